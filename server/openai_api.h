// The OpenAI-compatible request and response formats (server/openai_http.h serves them): parsing of a
// /v1/completions, /tokenize and /detokenize body, the engine request a completion prompt needs, and the
// response JSON built from the engine's result. No I/O, no HTTP: every function here is pure and
// unit-tested (tests/server/openai_api_test.cc).
//
// What /v1/completions computes (scored scores, it does not sample):
//   - prompt: a text, a list of token ids, or a batch (a list) of either; one choice per prompt, `index`
//     its place in the batch. A text is tokenized as gRPC Score's `text` is: with the tokenizer's default
//     BOS unless `add_special_tokens` (vLLM's extension) says otherwise. Token ids are scored as given.
//   - max_tokens 0: the prompt's log-probabilities only; 1: also the greedy next token (argmax, ties to the
//     lower id) and its log-probability. Anything else is INVALID_ARGUMENT (absent = OpenAI's default 16,
//     refused too). The next token is read from the engine's top-1 at one extra position: the prompt is
//     scored with one more id appended (its own last id), whose predicted distribution is that of the next
//     token; the appended id's own log-probability is not used. Causal attention makes the prompt's positions
//     independent of it, and the engine's rows do not depend on the batch's other rows (batching never
//     changes a result), so the prompt's log-probabilities are the ones a plain Score gives. A prompt of
//     max_seq_len tokens therefore cannot take max_tokens 1 (OUT_OF_RANGE naming both numbers), as vLLM's
//     prompt + max_tokens <= max_model_len.
//   - echo: the prompt's tokens come first in `text` and in `logprobs` (token_logprobs[0] is null: the first
//     token has no context); without echo only the generated token (if any) is returned.
//   - logprobs k (0..kMaxLogprobs, or the tensor-parallel vocabulary shard's rows): per position the k most
//     likely tokens with their log-probabilities, plus the position's own token when it is not among them
//     (so up to k + 1 entries, as OpenAI and vLLM). null/absent: `logprobs` is null.
//   - prompt_logprobs k (vLLM's extension, 0..the logprobs bound; vLLM's -1, the whole vocabulary, is
//     INVALID_ARGUMENT): each choice gets `prompt_logprobs`, as vLLM returns it: null for the first token,
//     then per prompt position {"<id>": {"logprob", "rank", "decoded_token"}} for the position's own token
//     (rank: 1 + the ids with a strictly larger log-probability, the engine's rank) and the k most likely
//     (ties share a rank), whether or not `echo` is set.
//   - n, best_of must be 1; stream true, suffix: INVALID_ARGUMENT. temperature, top_p, seed, stop, user and
//     other fields are accepted and ignored (the one token generated is always the greedy one).
// Token strings (`logprobs.tokens`, the keys of `top_logprobs`): what each token adds to the decoded text,
// found by decoding a few tokens before it with and without it (so "▁the" after a word is " the", and the
// strings of the prompt join to the decoded prompt); bytes that are no valid UTF-8 on their own (a byte
// token cutting a character) become U+FFFD. text_offset[i] is the sum of the lengths (code points) of
// tokens[0..i), so it indexes `text`: a BOS the tokenizer added to a text prompt (not in `text`, the prompt
// as sent) counts no characters. Without a tokenizer a token's string is "token_id:<id>" (vLLM's spelling).
#ifndef SCORED_SERVER_OPENAI_API_H_
#define SCORED_SERVER_OPENAI_API_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/engine.h"
#include "engine/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"

namespace scored {
namespace openai {

// The most `logprobs` / `prompt_logprobs` a completion may ask for: 64, what the Score contract's top_k
// allowed before it grew for stored references (a JSON top-k entry is ~10x its protobuf size).
inline constexpr int kMaxLogprobs = 64;

using Json = nlohmann::ordered_json;

struct Prompt {
  bool is_text = false;
  std::string text;          // is_text: as sent
  std::vector<int32_t> ids;  // !is_text: as sent; is_text: filled once the text is tokenized
};

struct CompletionRequest {
  std::string model;            // empty: not given (any model)
  std::vector<Prompt> prompts;  // >= 1
  int max_tokens = 16;          // 0 or 1 after parsing
  bool echo = false;
  int logprobs = -1;            // -1: null; else 0..max_logprobs
  int prompt_logprobs = -1;     // vLLM's extension: -1 absent; else 0..max_logprobs
  std::optional<bool> add_bos;  // `add_special_tokens` for text prompts; unset: the tokenizer's default
};

// Parses a /v1/completions body. INVALID_ARGUMENT naming the field for malformed JSON, a field of the wrong
// type, an empty prompt (list), a token id that is negative or not an integer, max_tokens other than 0/1,
// logprobs outside [0, max_logprobs], n or best_of other than 1, stream true, a suffix.
absl::StatusOr<CompletionRequest> ParseCompletionRequest(absl::string_view body, int max_logprobs);

// What parsing `body` into a DOM (the Parse* functions here) would take in memory, counted by one SAX pass
// over it that builds nothing: kDomBytesPerValue per value, kDomBytesPerString more per string or object key
// plus its bytes, kDomBytesPerContainer per array or object. Measured on nlohmann::ordered_json (glibc
// malloc): a flat list of 1M ids 16.8 bytes per id (32 after a vector's last doubling), a string "ab" 69, a
// {"k": 1} 117, a nested "[" 64, where the body spends 2-8 bytes on each. The HTTP endpoint charges it to the
// memory budget before parsing, so a body that would expand past the budget is refused (429) instead of
// parsed. INVALID_ARGUMENT for invalid JSON or nesting deeper than kMaxJsonDepth (a request has 3 levels;
// deeper nesting is only a way to multiply memory); OUT_OF_RANGE for an array of more than
// `max_array_elements` elements (when >= 0: a prompt holds at most max_seq_len ids, a batch at most
// max_queue prompts), found before any of it is materialized.
inline constexpr int64_t kDomBytesPerValue = 32;
inline constexpr int64_t kDomBytesPerString = 48;
inline constexpr int64_t kDomBytesPerContainer = 80;
inline constexpr int kMaxJsonDepth = 16;
absl::StatusOr<int64_t> JsonDomBytes(absl::string_view body, int64_t max_array_elements = -1);

// The engine request for one prompt of `ids` (the prompt's ids, >= 1 of them), or nullopt when nothing
// needs scoring (max_tokens 0 and either no echoed log-probabilities or a one-token prompt).
std::optional<ScoreRequest> EngineRequestFor(const CompletionRequest& request,
                                             const std::vector<int32_t>& ids);

// Token strings as described in the header comment. `tokenizer` may be null. Thread-compatible (holds a
// pointer only).
class TokenStrings {
 public:
  explicit TokenStrings(const Tokenizer* tokenizer) : tokenizer_(tokenizer) {}
  // What ids[i] adds to the decoded text of ids[0..i).
  std::string Piece(const std::vector<int32_t>& ids, size_t i) const;
  // What `id` would add after ids[0..i) (a top_logprobs alternative at position i).
  std::string Alternative(const std::vector<int32_t>& ids, size_t i, int32_t id) const;
  // The decoded text of `ids` (invalid UTF-8 replaced); "" without a tokenizer.
  std::string Text(const std::vector<int32_t>& ids) const;

  // Tokens decoded before the one asked for: enough for a multi-byte character split over byte tokens
  // (at most 4) and a metaspace boundary.
  static constexpr size_t kContext = 6;

 private:
  std::string DecodeValid(const std::vector<int32_t>& ids, size_t begin, size_t end, int32_t extra) const;
  const Tokenizer* tokenizer_;
};

// `text` with every byte sequence that is no valid UTF-8 replaced by U+FFFD.
std::string ValidUtf8(absl::string_view text);
// Unicode code points in valid UTF-8 `text`.
int64_t CodePoints(absl::string_view text);

// One element of `choices` for prompt `index`: `ids` are the prompt's ids, `result` the engine's answer to
// EngineRequestFor(request, ids) (null when that was nullopt).
Json BuildChoice(const CompletionRequest& request, int index, const Prompt& prompt,
                 const std::vector<int32_t>& ids, const ScoreResult* result, const TokenStrings& strings);

// The whole /v1/completions response: id, object "text_completion", created (unix seconds), model,
// choices, usage (prompt_tokens: all prompts' ids; completion_tokens: max_tokens per prompt).
Json BuildCompletionResponse(const CompletionRequest& request, const std::string& model_name,
                             const std::string& id, int64_t created, std::vector<Json> choices);

// An OpenAI error body: {"error": {"message", "type", "param": null, "code"}} with the type the HTTP status
// implies (invalid_request_error, authentication_error, not_found_error, rate_limit_error, server_error).
Json ErrorBody(int http_status, absl::string_view message);
// The HTTP status of an absl status code: INVALID_ARGUMENT, OUT_OF_RANGE, FAILED_PRECONDITION 400;
// UNAUTHENTICATED 401; PERMISSION_DENIED 403; NOT_FOUND 404; RESOURCE_EXHAUSTED 429; CANCELLED 499;
// UNIMPLEMENTED 501; UNAVAILABLE 503; DEADLINE_EXCEEDED 504; anything else 500.
int HttpStatusOf(absl::StatusCode code);

// /tokenize body {"prompt": str, "add_special_tokens": bool (default true)}; INVALID_ARGUMENT otherwise.
struct TokenizeRequest {
  std::string prompt;
  bool add_special_tokens = true;
};
absl::StatusOr<TokenizeRequest> ParseTokenizeRequest(absl::string_view body);
// /detokenize body {"tokens": [ids]}; INVALID_ARGUMENT otherwise (ids must be integers in [0, 2^31)).
absl::StatusOr<std::vector<int32_t>> ParseDetokenizeRequest(absl::string_view body);

// The id of a text that is exactly the tokenizer's BOS or EOS string (Decode of that one id), else -1.
// /tokenize maps such a text to the special token, as HF tokenizers (and so vLLM) do: lm-eval's remote
// tokenizer finds the BOS and EOS ids by tokenizing those strings. Other text is tokenized as Score's.
int32_t SpecialTokenIdOf(const Tokenizer& tokenizer, absl::string_view text);

// /tokenizer_info: bos_token, eos_token (strings or null), pad_token null, chat_template null,
// add_bos_token, model_max_length, vocab_size, tokenizer_class (the tokenizer's kind).
Json TokenizerInfo(const Tokenizer& tokenizer, int64_t max_seq_len);

}  // namespace openai
}  // namespace scored

#endif  // SCORED_SERVER_OPENAI_API_H_
