// The OpenAI-compatible formats (server/openai_api.h): request parsing, the engine request of a prompt, the
// response built from an engine result, token strings with the real stories260K-hf tokenizer.
#include "server/openai_api.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "engine/tokenizer/tokenizer.h"

namespace scored {
namespace openai {
namespace {

const std::string kModelDir = std::string(SCORED_DATA_DIR) + "/stories260K-hf";

std::unique_ptr<Tokenizer> LoadTokenizer() {
  absl::StatusOr<std::unique_ptr<Tokenizer>> t = Tokenizer::Load(kModelDir);
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? *std::move(t) : nullptr;
}

TEST(OpenAiParse, PromptForms) {
  absl::StatusOr<CompletionRequest> text =
      ParseCompletionRequest(R"({"prompt": "Once", "max_tokens": 0})", 64);
  ASSERT_TRUE(text.ok()) << text.status();
  ASSERT_EQ(text->prompts.size(), 1u);
  EXPECT_TRUE(text->prompts[0].is_text);
  EXPECT_EQ(text->prompts[0].text, "Once");
  EXPECT_EQ(text->max_tokens, 0);
  EXPECT_FALSE(text->echo);
  EXPECT_EQ(text->logprobs, -1);
  EXPECT_FALSE(text->add_bos.has_value());

  absl::StatusOr<CompletionRequest> ids = ParseCompletionRequest(
      R"({"prompt": [1, 403, 407], "max_tokens": 1, "echo": true, "logprobs": 5, "model": "m",
          "add_special_tokens": false, "temperature": 0, "seed": 1234})",
      64);
  ASSERT_TRUE(ids.ok()) << ids.status();
  ASSERT_EQ(ids->prompts.size(), 1u);
  EXPECT_FALSE(ids->prompts[0].is_text);
  EXPECT_EQ(ids->prompts[0].ids, (std::vector<int32_t>{1, 403, 407}));
  EXPECT_EQ(ids->max_tokens, 1);
  EXPECT_TRUE(ids->echo);
  EXPECT_EQ(ids->logprobs, 5);
  EXPECT_EQ(ids->model, "m");
  EXPECT_EQ(ids->add_bos, std::optional<bool>(false));

  absl::StatusOr<CompletionRequest> batch =
      ParseCompletionRequest(R"({"prompt": [[1, 2], [3], "x"], "max_tokens": 0})", 64);
  ASSERT_TRUE(batch.ok()) << batch.status();
  ASSERT_EQ(batch->prompts.size(), 3u);
  EXPECT_EQ(batch->prompts[0].ids, (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(batch->prompts[1].ids, (std::vector<int32_t>{3}));
  EXPECT_TRUE(batch->prompts[2].is_text);
}

TEST(OpenAiParse, Refusals) {
  const struct {
    const char* body;
    const char* says;
  } cases[] = {
      {"not json", "not valid JSON"},
      {"[1, 2]", "not a JSON object"},
      {R"({"max_tokens": 0})", "'prompt' is required"},
      {R"({"prompt": [], "max_tokens": 0})", "'prompt' is an empty list"},
      {R"({"prompt": [[1], []], "max_tokens": 0})", "'prompt[1]' is an empty list"},
      {R"({"prompt": [1, -2], "max_tokens": 0})", "element 1 is -2"},
      {R"({"prompt": [1, 2.5], "max_tokens": 0})", "element 1 is 2.5"},
      {R"({"prompt": [1, "a"], "max_tokens": 0})", "element 1 is a string"},
      {R"({"prompt": 7, "max_tokens": 0})", "must be a string or a list"},
      {R"({"prompt": "x"})", "got 16 (the default)"},
      {R"({"prompt": "x", "max_tokens": 2})", "got 2"},
      {R"({"prompt": "x", "max_tokens": 0, "logprobs": 65})", "[0, 64], got 65"},
      {R"({"prompt": "x", "max_tokens": 0, "logprobs": -1})", "[0, 64], got -1"},
      {R"({"prompt": "x", "max_tokens": 0, "n": 2})", "'n' must be 1"},
      {R"({"prompt": "x", "max_tokens": 0, "best_of": 3})", "'best_of' must be 1"},
      {R"({"prompt": "x", "max_tokens": 0, "stream": true})", "'stream' true is not supported"},
      {R"({"prompt": "x", "max_tokens": 0, "suffix": "y"})", "'suffix' is not supported"},
      {R"({"prompt": "x", "max_tokens": 0, "echo": "yes"})", "'echo' must be true or false"},
      {R"({"prompt": "x", "max_tokens": 0, "model": 3})", "'model' must be a string"},
  };
  for (const auto& c : cases) {
    absl::StatusOr<CompletionRequest> r = ParseCompletionRequest(c.body, 64);
    ASSERT_FALSE(r.ok()) << c.body;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << c.body;
    EXPECT_NE(r.status().message().find(c.says), absl::string_view::npos) << c.body << ": " << r.status();
  }
  // A deeply nested prompt is refused by its type (no recursion over its depth).
  const std::string deep =
      R"({"max_tokens": 0, "prompt": [[)" + std::string(200000, '[') + std::string(200000, ']') + "]]}";
  absl::StatusOr<CompletionRequest> nested = ParseCompletionRequest(deep, 64);
  ASSERT_FALSE(nested.ok());
  EXPECT_NE(nested.status().message().find("element 0 is a array"), absl::string_view::npos)
      << nested.status();
  // The tensor-parallel shard bound replaces 64.
  absl::StatusOr<CompletionRequest> shard =
      ParseCompletionRequest(R"({"prompt": "x", "max_tokens": 0, "logprobs": 9})", 8);
  ASSERT_FALSE(shard.ok());
  EXPECT_NE(shard.status().message().find("[0, 8], got 9"), absl::string_view::npos);
}

CompletionRequest Request(int max_tokens, bool echo, int logprobs) {
  CompletionRequest r;
  r.max_tokens = max_tokens;
  r.echo = echo;
  r.logprobs = logprobs;
  return r;
}

TEST(OpenAiEngineRequest, WhatIsScored) {
  const std::vector<int32_t> ids = {1, 403, 407, 261};
  // Prompt log-probabilities only: the prompt as it is, from position 1, top_k = logprobs.
  std::optional<ScoreRequest> echo = EngineRequestFor(Request(0, true, 3), ids);
  ASSERT_TRUE(echo.has_value());
  EXPECT_EQ(echo->tokens, ids);
  EXPECT_EQ(echo->score_from, 1);
  EXPECT_EQ(echo->top_k, 3);
  // Plus the next token: one more id, its position's top-1 is the greedy token.
  std::optional<ScoreRequest> next = EngineRequestFor(Request(1, true, 0), ids);
  ASSERT_TRUE(next.has_value());
  EXPECT_EQ(next->tokens, (std::vector<int32_t>{1, 403, 407, 261, 261}));
  EXPECT_EQ(next->score_from, 1);
  EXPECT_EQ(next->top_k, 1);
  // Only the next token: only the appended position.
  std::optional<ScoreRequest> only = EngineRequestFor(Request(1, false, -1), ids);
  ASSERT_TRUE(only.has_value());
  EXPECT_EQ(only->score_from, 4);
  EXPECT_EQ(only->top_k, 1);
  // Nothing to score.
  EXPECT_FALSE(EngineRequestFor(Request(0, false, 5), ids).has_value());
  EXPECT_FALSE(EngineRequestFor(Request(0, true, -1), ids).has_value());
  EXPECT_FALSE(EngineRequestFor(Request(0, true, 2), {1}).has_value());
  // A one-token prompt can still take the next token.
  std::optional<ScoreRequest> one = EngineRequestFor(Request(1, true, 1), {1});
  ASSERT_TRUE(one.has_value());
  EXPECT_EQ(one->tokens, (std::vector<int32_t>{1, 1}));
  EXPECT_EQ(one->score_from, 1);
}

TEST(OpenAiTokenStrings, PiecesJoinToTheDecodedText) {
  std::unique_ptr<Tokenizer> tok = LoadTokenizer();
  ASSERT_NE(tok, nullptr);
  const std::string text = "Once upon a time, there was a little girl named Lily. She loved to play.";
  absl::StatusOr<std::vector<int32_t>> encoded = tok->Encode(text);
  ASSERT_TRUE(encoded.ok());
  std::vector<int32_t> ids = {tok->bos_id()};
  ids.insert(ids.end(), encoded->begin(), encoded->end());
  const TokenStrings strings(tok.get());
  std::string joined;
  for (size_t i = 0; i < ids.size(); ++i) joined += strings.Piece(ids, i);
  EXPECT_EQ(joined, strings.Text(ids));
  EXPECT_EQ(strings.Text(ids), "<s>" + text);
  EXPECT_EQ(strings.Piece(ids, 0), "<s>");
  EXPECT_EQ(strings.Piece(ids, 1), "Once");  // the dummy-prefix space is dropped, as in the decoded text
  EXPECT_EQ(strings.Piece(ids, 2), " upon");
  // An alternative at position 2 is what it would add after "Once".
  EXPECT_EQ(strings.Alternative(ids, 2, ids[2]), " upon");
  const TokenStrings none(nullptr);
  EXPECT_EQ(none.Piece(ids, 2), "token_id:" + std::to_string(ids[2]));
  EXPECT_EQ(none.Text(ids), "");
}

TEST(OpenAiUtf8, InvalidBytesBecomeReplacementCharacters) {
  EXPECT_EQ(ValidUtf8("abc"), "abc");
  EXPECT_EQ(ValidUtf8("h\xC3\xA9"), "h\xC3\xA9");
  EXPECT_EQ(ValidUtf8("a\xC3"), "a\xEF\xBF\xBD");                  // a cut two-byte character
  EXPECT_EQ(ValidUtf8("\xE2\x82x"), "\xEF\xBF\xBD\xEF\xBF\xBDx");  // each invalid byte
  EXPECT_EQ(ValidUtf8("\xC0\xAF"), "\xEF\xBF\xBD\xEF\xBF\xBD");    // overlong
  EXPECT_EQ(CodePoints("h\xC3\xA9\xF0\x9F\x98\x80"), 3);
}

TEST(OpenAiChoice, EchoLogprobsAndTheNextToken) {
  std::unique_ptr<Tokenizer> tok = LoadTokenizer();
  ASSERT_NE(tok, nullptr);
  const TokenStrings strings(tok.get());
  const std::vector<int32_t> ids = {1, 403, 407};  // <s> Once ▁upon
  CompletionRequest request = Request(1, true, 1);
  Prompt prompt;
  prompt.is_text = true;
  prompt.text = "Once upon";
  prompt.ids = ids;
  request.prompts = {prompt};
  // The engine's answer for positions 1, 2 and the appended position 3 (made up, with distinct values).
  ScoreResult result;
  result.logprob = {-0.25f, -3.5f, -9.0f};
  result.top_k = {{{403, -0.25f}}, {{261, -0.5f}}, {{261, -0.125f}}};  // position 2's token is not the top
  result.num_scored = 3;
  const Json choice = BuildChoice(request, 4, prompt, ids, &result, strings);
  EXPECT_EQ(choice["index"], 4);
  EXPECT_EQ(choice["text"], "Once upon a");
  EXPECT_EQ(choice["finish_reason"], "length");
  const Json& lp = choice["logprobs"];
  EXPECT_EQ(lp["tokens"], Json::array({"<s>", "Once", " upon", " a"}));
  ASSERT_EQ(lp["token_logprobs"].size(), 4u);
  EXPECT_TRUE(lp["token_logprobs"][0].is_null());
  EXPECT_EQ(lp["token_logprobs"][1].get<float>(), -0.25f);
  EXPECT_EQ(lp["token_logprobs"][2].get<float>(), -3.5f);
  EXPECT_EQ(lp["token_logprobs"][3].get<float>(), -0.125f);  // the greedy token's log-probability
  EXPECT_TRUE(lp["top_logprobs"][0].is_null());
  EXPECT_EQ(lp["top_logprobs"][1], Json({{"Once", -0.25f}}));
  // The top entry first, then the position's own token (not among the top 1).
  EXPECT_EQ(lp["top_logprobs"][2].dump(), Json({{" a", -0.5f}, {" upon", -3.5f}}).dump());
  EXPECT_EQ(lp["top_logprobs"][3], Json({{" a", -0.125f}}));
  // text_offset indexes `text`: the BOS the tokenizer added is not in it and takes no characters
  // ("Once upon a"[4:9] is " upon"; before, the offsets counted "<s>" and were 3 too far: 0, 3, 7, 12).
  EXPECT_EQ(lp["text_offset"], Json::array({0, 0, 4, 9}));
  EXPECT_FALSE(choice.contains("prompt_logprobs"));  // not asked for

  // Without echo only the generated token; without logprobs a null object.
  CompletionRequest plain = Request(1, false, -1);
  plain.prompts = {prompt};
  ScoreResult last;
  last.logprob = {-9.0f};
  last.top_k = {{{261, -0.125f}}};
  const Json bare = BuildChoice(plain, 0, prompt, ids, &last, strings);
  EXPECT_EQ(bare["text"], " a");
  EXPECT_TRUE(bare["logprobs"].is_null());

  // Token-id prompts echo their decoded text; max_tokens 0 with nothing scored keeps null log-probs.
  Prompt id_prompt;
  id_prompt.ids = ids;
  CompletionRequest zero = Request(0, true, 2);
  zero.prompts = {id_prompt};
  const Json unscored = BuildChoice(zero, 0, id_prompt, {1}, nullptr, strings);
  EXPECT_EQ(unscored["text"], "<s>");
  EXPECT_EQ(unscored["logprobs"]["token_logprobs"], Json::array({nullptr}));

  const Json response = BuildCompletionResponse(request, "stories", "cmpl-1", 42, {choice});
  EXPECT_EQ(response["object"], "text_completion");
  EXPECT_EQ(response["model"], "stories");
  EXPECT_EQ(response["created"], 42);
  EXPECT_EQ(response["usage"], Json({{"prompt_tokens", 3}, {"completion_tokens", 1}, {"total_tokens", 4}}));
}

// vLLM's prompt_logprobs: parsed within the logprobs bound, scored from position 1 with ranks, whether or not
// echo is set; each position's entry holds its own token and the top k, keyed by id, with ranks.
TEST(OpenAiPromptLogprobs, ParsedScoredAndBuiltAsVllm) {
  absl::StatusOr<CompletionRequest> r =
      ParseCompletionRequest(R"({"prompt": [1, 403, 407], "max_tokens": 0, "prompt_logprobs": 2})", 64);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->prompt_logprobs, 2);
  EXPECT_FALSE(r->echo);
  for (const char* bad : {R"({"prompt": "a", "max_tokens": 0, "prompt_logprobs": -1})",
                          R"({"prompt": "a", "max_tokens": 0, "prompt_logprobs": 65})",
                          R"({"prompt": "a", "max_tokens": 0, "prompt_logprobs": "2"})"}) {
    absl::StatusOr<CompletionRequest> refused = ParseCompletionRequest(bad, 64);
    ASSERT_FALSE(refused.ok()) << bad;
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(refused.status().message().find("prompt_logprobs"), std::string::npos) << refused.status();
  }
  EXPECT_NE(ParseCompletionRequest(R"({"prompt": "a", "max_tokens": 0, "prompt_logprobs": -1})", 64)
                .status()
                .message()
                .find("the whole vocabulary, is not served"),
            std::string::npos);

  const std::vector<int32_t> ids = {1, 403, 407};
  std::optional<ScoreRequest> engine = EngineRequestFor(*r, ids);
  ASSERT_TRUE(engine.has_value());
  EXPECT_EQ(engine->tokens, ids);
  EXPECT_EQ(engine->score_from, 1);
  EXPECT_EQ(engine->top_k, 2);
  EXPECT_TRUE(engine->want_rank);

  std::unique_ptr<Tokenizer> tok = LoadTokenizer();
  ASSERT_NE(tok, nullptr);
  const TokenStrings strings(tok.get());
  Prompt prompt;
  prompt.ids = ids;
  r->prompts = {prompt};
  ScoreResult result;
  result.logprob = {-0.25f, -3.5f};
  result.rank = {1, 3};
  // Position 2: two ids tied for the top, the prompt's own token (407) third.
  result.top_k = {{{403, -0.25f}, {261, -2.0f}}, {{261, -0.5f}, {300, -0.5f}}};
  result.num_scored = 2;
  const Json choice = BuildChoice(*r, 0, prompt, ids, &result, strings);
  EXPECT_TRUE(choice["logprobs"].is_null());
  EXPECT_EQ(choice["text"], "");  // no echo
  const Json& plp = choice["prompt_logprobs"];
  ASSERT_EQ(plp.size(), 3u);
  EXPECT_TRUE(plp[0].is_null());
  EXPECT_EQ(
      plp[1].dump(),
      Json({{"403", {{"logprob", -0.25f}, {"rank", 1}, {"decoded_token", "Once"}}},
            {"261", {{"logprob", -2.0f}, {"rank", 2}, {"decoded_token", strings.Alternative(ids, 1, 261)}}}})
          .dump());
  EXPECT_EQ(plp[2]["407"], Json({{"logprob", -3.5f}, {"rank", 3}, {"decoded_token", " upon"}}));
  EXPECT_EQ(plp[2]["261"]["rank"], 1);
  EXPECT_EQ(plp[2]["300"]["rank"], 1);  // tied with the top: the same rank
  EXPECT_EQ(plp[2].size(), 3u);

  // Asked for on a one-token prompt: nothing to score, vLLM's [null].
  prompt.ids = {1};
  const Json single = BuildChoice(*r, 0, prompt, {1}, nullptr, strings);
  EXPECT_EQ(single["prompt_logprobs"], Json::array({nullptr}));
}

// The memory a body's DOM would take, counted before it is parsed (an 8 MiB body of nested "[" used to parse
// into ~600 MiB; a 10-million-id prompt into ~500 MiB, none of it charged to the memory budget).
TEST(OpenAiJsonDomBytes, CountsWhatParsingWouldTakeAndRefusesDeepNesting) {
  std::string flat = R"({"prompt": [)";
  for (int i = 0; i < 1000; ++i) flat += "12345,";
  flat += "1]}";
  // 1001 ids, the prompt array, the object, the key "prompt".
  EXPECT_EQ(JsonDomBytes(flat).value(),
            1001 * kDomBytesPerValue + 2 * kDomBytesPerContainer + kDomBytesPerString + 6);
  EXPECT_EQ(JsonDomBytes(R"({"prompt": "abc"})").value(),
            kDomBytesPerContainer + 2 * kDomBytesPerString + 6 + 3 + kDomBytesPerValue);
  const std::string deep =
      R"({"prompt": )" + std::string(kMaxJsonDepth, '[') + std::string(kMaxJsonDepth, ']') + "}";
  absl::StatusOr<int64_t> refused = JsonDomBytes(deep);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("deeper than 16 levels"), std::string::npos) << refused.status();
  const std::string fits =
      R"({"prompt": )" + std::string(kMaxJsonDepth - 1, '[') + std::string(kMaxJsonDepth - 1, ']') + "}";
  EXPECT_TRUE(JsonDomBytes(fits).ok());
  EXPECT_EQ(JsonDomBytes(R"({"prompt": [1, 2)").status().message(), "the request body is not valid JSON");
}

// An id list longer than any prompt may be is refused by the SAX pass, before a vector of it exists.
TEST(OpenAiJsonDomBytes, RefusesArraysLongerThanAPromptOrABatch) {
  std::string ids = R"({"prompt": [[1, 2], [)";
  for (int i = 0; i < 600; ++i) ids += "7,";
  ids += "7]]}";
  EXPECT_TRUE(JsonDomBytes(ids).ok());
  EXPECT_TRUE(JsonDomBytes(ids, 601).ok());
  absl::StatusOr<int64_t> refused = JsonDomBytes(ids, 600);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_NE(refused.status().message().find("601 or more elements"), std::string::npos) << refused.status();
  std::string batch = R"({"prompt": [)";
  for (int i = 0; i < 10; ++i) batch += R"("a",)";
  batch += R"("a"], "n": [1, 2, 3]})";
  EXPECT_TRUE(JsonDomBytes(batch, 11).ok());
  EXPECT_EQ(JsonDomBytes(batch, 10).status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_TRUE(JsonDomBytes(R"({"a": {"b": 1, "c": 2, "d": 3}})", 1).ok());  // object members are not elements
}

TEST(OpenAiErrors, StatusAndType) {
  EXPECT_EQ(HttpStatusOf(absl::StatusCode::kInvalidArgument), 400);
  EXPECT_EQ(HttpStatusOf(absl::StatusCode::kOutOfRange), 400);
  EXPECT_EQ(HttpStatusOf(absl::StatusCode::kUnauthenticated), 401);
  EXPECT_EQ(HttpStatusOf(absl::StatusCode::kNotFound), 404);
  EXPECT_EQ(HttpStatusOf(absl::StatusCode::kResourceExhausted), 429);
  EXPECT_EQ(HttpStatusOf(absl::StatusCode::kUnavailable), 503);
  EXPECT_EQ(HttpStatusOf(absl::StatusCode::kDeadlineExceeded), 504);
  EXPECT_EQ(HttpStatusOf(absl::StatusCode::kInternal), 500);
  const Json e = ErrorBody(401, "missing token");
  EXPECT_EQ(e["error"]["message"], "missing token");
  EXPECT_EQ(e["error"]["type"], "authentication_error");
  EXPECT_EQ(e["error"]["code"], 401);
  EXPECT_EQ(ErrorBody(429, "x")["error"]["type"], "rate_limit_error");
  EXPECT_EQ(ErrorBody(503, "x")["error"]["type"], "server_error");
  EXPECT_EQ(ErrorBody(400, "x")["error"]["type"], "invalid_request_error");
}

TEST(OpenAiTokenizerRoutes, ParseAndSpecialTokens) {
  absl::StatusOr<TokenizeRequest> t =
      ParseTokenizeRequest(R"({"prompt": "test", "add_special_tokens": false})");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->prompt, "test");
  EXPECT_FALSE(t->add_special_tokens);
  EXPECT_TRUE(ParseTokenizeRequest(R"({"prompt": "test"})")->add_special_tokens);
  EXPECT_FALSE(ParseTokenizeRequest(R"({"messages": []})").ok());
  absl::StatusOr<std::vector<int32_t>> d = ParseDetokenizeRequest(R"({"tokens": [1, 403]})");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(*d, (std::vector<int32_t>{1, 403}));
  EXPECT_FALSE(ParseDetokenizeRequest(R"({"tokens": "1"})").ok());
  EXPECT_FALSE(ParseDetokenizeRequest(R"({"tokens": [1, -1]})").ok());

  std::unique_ptr<Tokenizer> tok = LoadTokenizer();
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(SpecialTokenIdOf(*tok, "<s>"), 1);
  EXPECT_EQ(SpecialTokenIdOf(*tok, "</s>"), 2);
  EXPECT_EQ(SpecialTokenIdOf(*tok, "<s> hi"), -1);
  const Json info = TokenizerInfo(*tok, 512);
  EXPECT_EQ(info["bos_token"], "<s>");
  EXPECT_EQ(info["eos_token"], "</s>");
  EXPECT_TRUE(info["pad_token"].is_null());
  EXPECT_EQ(info["model_max_length"], 512);
  EXPECT_EQ(info["vocab_size"], 512);
  EXPECT_EQ(info["add_bos_token"], true);
}

}  // namespace
}  // namespace openai
}  // namespace scored
