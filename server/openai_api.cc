#include "server/openai_api.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "engine/base/score_options.h"

namespace scored {
namespace openai {
namespace {

absl::Status FieldError(absl::string_view field, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("field '", field, "' ", what));
}

// The SAX pass of JsonDomBytes: counts, builds nothing.
class DomSizer : public nlohmann::json_sax<Json> {
 public:
  explicit DomSizer(int64_t max_array_elements) : max_array_elements_(max_array_elements) {}
  bool null() override { return Value(); }
  bool boolean(bool) override { return Value(); }
  bool number_integer(number_integer_t) override { return Value(); }
  bool number_unsigned(number_unsigned_t) override { return Value(); }
  bool number_float(number_float_t, const string_t&) override { return Value(); }
  bool string(string_t& s) override {
    bytes_ += kDomBytesPerString + static_cast<int64_t>(s.size());
    return Value();
  }
  bool binary(binary_t& b) override {
    bytes_ += static_cast<int64_t>(b.size());
    return Value();
  }
  bool start_object(std::size_t) override { return Open(/*array=*/false); }
  bool end_object() override { return Close(); }
  bool start_array(std::size_t) override { return Open(/*array=*/true); }
  bool end_array() override { return Close(); }
  bool key(string_t& k) override {
    bytes_ += kDomBytesPerString + static_cast<int64_t>(k.size());
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override {
    return false;
  }
  int64_t bytes() const { return bytes_; }
  bool too_deep() const { return too_deep_; }
  bool too_long() const { return too_long_; }

 private:
  // An element of the innermost open array (if it is one): counted against max_array_elements_.
  bool Element() {
    if (open_.empty() || open_.back() < 0) return true;
    if (max_array_elements_ >= 0 && ++open_.back() > max_array_elements_) too_long_ = true;
    return !too_long_;
  }
  bool Value() {
    bytes_ += kDomBytesPerValue;
    return Element();
  }
  bool Open(bool array) {
    bytes_ += kDomBytesPerContainer;
    if (!Element()) return false;
    if (++depth_ > kMaxJsonDepth) too_deep_ = true;
    open_.push_back(array ? 0 : -1);
    return !too_deep_;
  }
  bool Close() {
    --depth_;
    if (!open_.empty()) open_.pop_back();
    return true;
  }
  const int64_t max_array_elements_;
  int64_t bytes_ = 0;
  int depth_ = 0;
  bool too_deep_ = false;
  bool too_long_ = false;
  std::vector<int64_t> open_;  // per open container: elements so far (arrays), -1 (objects)
};

absl::StatusOr<Json> ParseBody(absl::string_view body) {
  Json j = Json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::InvalidArgumentError("the request body is not valid JSON");
  if (!j.is_object()) return absl::InvalidArgumentError("the request body is not a JSON object");
  return j;
}

// The member `key`, or nullptr when absent or null.
const Json* Member(const Json& obj, const char* key) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

absl::StatusOr<int64_t> IntMember(const Json& obj, const char* key, int64_t def) {
  const Json* v = Member(obj, key);
  if (v == nullptr) return def;
  if (v->is_number_integer()) return v->get<int64_t>();
  if (v->is_number_float()) {
    const double d = v->get<double>();
    if (d == static_cast<double>(static_cast<int64_t>(d))) return static_cast<int64_t>(d);
  }
  return FieldError(key, "must be an integer");
}

absl::StatusOr<bool> BoolMember(const Json& obj, const char* key, bool def) {
  const Json* v = Member(obj, key);
  if (v == nullptr) return def;
  if (!v->is_boolean()) return FieldError(key, "must be true or false");
  return v->get<bool>();
}

// A list of token ids (each an integer in [0, 2^31)); `where` names it in errors.
absl::StatusOr<std::vector<int32_t>> TokenIds(const Json& list, const std::string& where) {
  std::vector<int32_t> ids;
  ids.reserve(list.size());
  for (size_t i = 0; i < list.size(); ++i) {
    const Json& v = list[i];
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > INT32_MAX) {
      // A number is shown; anything else by its type only (dumping a deeply nested value would recurse).
      return FieldError(where, absl::StrCat("must hold token ids (integers >= 0); element ", i, " is ",
                                            v.is_number() ? v.dump() : std::string("a ") + v.type_name()));
    }
    ids.push_back(static_cast<int32_t>(v.get<int64_t>()));
  }
  return ids;
}

absl::StatusOr<Prompt> OnePrompt(const Json& v, const std::string& where) {
  Prompt p;
  if (v.is_string()) {
    p.is_text = true;
    p.text = v.get<std::string>();
    return p;
  }
  if (v.is_array()) {
    if (v.empty()) return FieldError(where, "is an empty list of token ids");
    absl::StatusOr<std::vector<int32_t>> ids = TokenIds(v, where);
    if (!ids.ok()) return ids.status();
    p.ids = *std::move(ids);
    return p;
  }
  return FieldError(where, "must be a string or a list of token ids");
}

absl::StatusOr<std::vector<Prompt>> Prompts(const Json& body) {
  const Json* prompt = Member(body, "prompt");
  if (prompt == nullptr) return FieldError("prompt", "is required");
  std::vector<Prompt> prompts;
  // A batch is a list of strings or of lists; a list of integers is one prompt of token ids.
  if (prompt->is_array() && !prompt->empty() && ((*prompt)[0].is_string() || (*prompt)[0].is_array())) {
    for (size_t i = 0; i < prompt->size(); ++i) {
      absl::StatusOr<Prompt> p = OnePrompt((*prompt)[i], absl::StrCat("prompt[", i, "]"));
      if (!p.ok()) return p.status();
      prompts.push_back(*std::move(p));
    }
    return prompts;
  }
  absl::StatusOr<Prompt> p = OnePrompt(*prompt, "prompt");
  if (!p.ok()) return p.status();
  prompts.push_back(*std::move(p));
  return prompts;
}

// Replaces the invalid sequence at text[i] (one byte) or copies the valid character there; returns its
// length in the input.
size_t Utf8CharLength(absl::string_view text, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char c = b(i);
  size_t n = 0;
  uint32_t cp = 0;
  if (c < 0x80) return 1;
  if ((c & 0xE0) == 0xC0) {
    n = 2;
    cp = c & 0x1F;
  } else if ((c & 0xF0) == 0xE0) {
    n = 3;
    cp = c & 0x0F;
  } else if ((c & 0xF8) == 0xF0) {
    n = 4;
    cp = c & 0x07;
  } else {
    return 0;
  }
  if (i + n > text.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((b(i + k) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (b(i + k) & 0x3F);
  }
  // Overlong forms, surrogates and code points past U+10FFFF are invalid.
  if ((n == 2 && cp < 0x80) || (n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) || cp > 0x10FFFF ||
      (cp >= 0xD800 && cp <= 0xDFFF)) {
    return 0;
  }
  return n;
}

// The top_logprobs object of one position: the first `k` entries of `top` plus (`own_id`, `own_logprob`)
// when it is not among them. Two ids with the same string keep the first (the more likely) one.
Json TopObject(const std::vector<TopKEntry>& top, int k, int32_t own_id, float own_logprob,
               const std::vector<int32_t>& context, size_t position, const TokenStrings& strings) {
  Json obj = Json::object();
  bool own_seen = false;
  const size_t count = std::min(top.size(), static_cast<size_t>(std::max(k, 0)));
  for (size_t t = 0; t < count; ++t) {
    const std::string key = strings.Alternative(context, position, top[t].id);
    if (!obj.contains(key)) obj[key] = top[t].logprob;
    own_seen = own_seen || top[t].id == own_id;
  }
  if (!own_seen) {
    const std::string key = strings.Alternative(context, position, own_id);
    if (!obj.contains(key)) obj[key] = own_logprob;
  }
  return obj;
}

// vLLM's prompt_logprobs entry of one position: {"<id>": {"logprob", "rank", "decoded_token"}} for the first
// `k` entries of `top` and the position's own token (`own_rank` from the engine). A top entry's rank is
// 1 + the entries of `top` strictly more likely (every such id is in `top`, which is sorted), so tied
// entries share a rank as the engine's rank does.
Json PromptLogprobEntry(const std::vector<TopKEntry>& top, int k, int32_t own_id, float own_logprob,
                        int32_t own_rank, const std::vector<int32_t>& context, size_t position,
                        const TokenStrings& strings) {
  Json obj = Json::object();
  const auto put = [&](int32_t id, float logprob, int64_t rank) {
    obj[std::to_string(id)] = {
        {"logprob", logprob}, {"rank", rank}, {"decoded_token", strings.Alternative(context, position, id)}};
  };
  put(own_id, own_logprob, own_rank);
  const size_t count = std::min(top.size(), static_cast<size_t>(std::max(k, 0)));
  size_t above = 0;  // entries of `top` strictly more likely than entry t
  for (size_t t = 0; t < count; ++t) {
    if (t > 0 && top[t].logprob < top[t - 1].logprob) above = t;
    if (top[t].id != own_id) put(top[t].id, top[t].logprob, static_cast<int64_t>(above) + 1);
  }
  return obj;
}

}  // namespace

absl::StatusOr<int64_t> JsonDomBytes(absl::string_view body, int64_t max_array_elements) {
  DomSizer sizer(max_array_elements);
  const bool ok = Json::sax_parse(body.begin(), body.end(), &sizer, nlohmann::json::input_format_t::json,
                                  /*strict=*/true);
  if (sizer.too_deep()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the request body nests JSON deeper than ", kMaxJsonDepth, " levels"));
  }
  if (sizer.too_long()) {
    return absl::OutOfRangeError(absl::StrCat("the request body has a JSON array of ", max_array_elements + 1,
                                              " or more elements, more than ", max_array_elements,
                                              " (a prompt holds at most max_seq_len ids, a batch at most "
                                              "--max_queue prompts)"));
  }
  if (!ok) return absl::InvalidArgumentError("the request body is not valid JSON");
  return sizer.bytes();
}

absl::StatusOr<CompletionRequest> ParseCompletionRequest(absl::string_view body, int max_logprobs) {
  absl::StatusOr<Json> j = ParseBody(body);
  if (!j.ok()) return j.status();
  CompletionRequest r;
  if (const Json* model = Member(*j, "model"); model != nullptr) {
    if (!model->is_string()) return FieldError("model", "must be a string");
    r.model = model->get<std::string>();
  }
  absl::StatusOr<std::vector<Prompt>> prompts = Prompts(*j);
  if (!prompts.ok()) return prompts.status();
  r.prompts = *std::move(prompts);
  absl::StatusOr<int64_t> max_tokens = IntMember(*j, "max_tokens", 16);
  if (!max_tokens.ok()) return max_tokens.status();
  if (*max_tokens != 0 && *max_tokens != 1) {
    return FieldError("max_tokens",
                      absl::StrCat("must be 0 (score the prompt) or 1 (also the greedy next token), got ",
                                   *max_tokens, Member(*j, "max_tokens") == nullptr ? " (the default)" : "",
                                   ": this server scores text, it does not generate"));
  }
  r.max_tokens = static_cast<int>(*max_tokens);
  absl::StatusOr<bool> echo = BoolMember(*j, "echo", false);
  if (!echo.ok()) return echo.status();
  r.echo = *echo;
  absl::StatusOr<int64_t> logprobs = IntMember(*j, "logprobs", -1);
  if (!logprobs.ok()) return logprobs.status();
  if (Member(*j, "logprobs") != nullptr && (*logprobs < 0 || *logprobs > max_logprobs)) {
    return FieldError("logprobs", absl::StrCat("must be in [0, ", max_logprobs, "], got ", *logprobs));
  }
  r.logprobs = static_cast<int>(*logprobs);
  absl::StatusOr<int64_t> prompt_logprobs = IntMember(*j, "prompt_logprobs", -1);
  if (!prompt_logprobs.ok()) return prompt_logprobs.status();
  if (Member(*j, "prompt_logprobs") != nullptr && (*prompt_logprobs < 0 || *prompt_logprobs > max_logprobs)) {
    return FieldError(
        "prompt_logprobs",
        absl::StrCat("must be in [0, ", max_logprobs, "], got ", *prompt_logprobs,
                     *prompt_logprobs == -1 ? " (-1, the whole vocabulary, is not served)" : ""));
  }
  r.prompt_logprobs = static_cast<int>(*prompt_logprobs);
  for (const char* key : {"n", "best_of"}) {
    absl::StatusOr<int64_t> v = IntMember(*j, key, 1);
    if (!v.ok()) return v.status();
    if (*v != 1) return FieldError(key, absl::StrCat("must be 1, got ", *v));
  }
  absl::StatusOr<bool> stream = BoolMember(*j, "stream", false);
  if (!stream.ok()) return stream.status();
  if (*stream) return FieldError("stream", "true is not supported (the response is sent whole)");
  if (const Json* suffix = Member(*j, "suffix");
      suffix != nullptr && !(suffix->is_string() && suffix->empty())) {
    return FieldError("suffix", "is not supported");
  }
  if (const Json* add = Member(*j, "add_special_tokens"); add != nullptr) {
    if (!add->is_boolean()) return FieldError("add_special_tokens", "must be true or false");
    r.add_bos = add->get<bool>();
  }
  return r;
}

std::optional<ScoreRequest> EngineRequestFor(const CompletionRequest& request,
                                             const std::vector<int32_t>& ids) {
  const bool echo_logprobs = request.echo && request.logprobs >= 0 && ids.size() >= 2;
  const bool vllm_prompt_logprobs = request.prompt_logprobs >= 0 && ids.size() >= 2;
  if (request.max_tokens == 0 && !echo_logprobs && !vllm_prompt_logprobs) return std::nullopt;
  ScoreRequest s;
  s.tokens = ids;
  if (request.max_tokens == 1) s.tokens.push_back(ids.back());  // its distribution is the next token's
  const int32_t n = static_cast<int32_t>(s.tokens.size());
  // Without the prompt's own log-probabilities only the appended position is scored.
  s.score_from = echo_logprobs || vllm_prompt_logprobs ? 1 : n - 1;
  s.top_k = std::max({request.logprobs, request.prompt_logprobs, request.max_tokens == 1 ? 1 : 0});
  s.want_rank = vllm_prompt_logprobs;
  return s;
}

std::string ValidUtf8(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const size_t n = Utf8CharLength(text, i);
    if (n == 0) {
      out += "\xEF\xBF\xBD";  // U+FFFD
      ++i;
    } else {
      out.append(text.data() + i, n);
      i += n;
    }
  }
  return out;
}

int64_t CodePoints(absl::string_view text) {
  int64_t count = 0;
  for (unsigned char c : text) count += (c & 0xC0) != 0x80;
  return count;
}

std::string TokenStrings::DecodeValid(const std::vector<int32_t>& ids, size_t begin, size_t end,
                                      int32_t extra) const {
  std::vector<int32_t> span(ids.begin() + static_cast<std::ptrdiff_t>(begin),
                            ids.begin() + static_cast<std::ptrdiff_t>(end));
  if (extra >= 0) span.push_back(extra);
  absl::StatusOr<std::string> text = tokenizer_->Decode(span);
  return text.ok() ? *text : std::string();
}

std::string TokenStrings::Alternative(const std::vector<int32_t>& ids, size_t i, int32_t id) const {
  if (tokenizer_ == nullptr) return absl::StrCat("token_id:", id);
  if (id >= tokenizer_->vocab_size()) return absl::StrCat("token_id:", id);  // a padded embedding row
  const size_t begin = i > kContext ? i - kContext : 0;
  const std::string before = DecodeValid(ids, begin, i, -1);
  const std::string with = DecodeValid(ids, begin, i, id);
  if (with.size() >= before.size() && with.compare(0, before.size(), before) == 0) {
    return ValidUtf8(absl::string_view(with).substr(before.size()));
  }
  return ValidUtf8(DecodeValid(ids, 0, 0, id));  // a decoder that rewrote the context: the token alone
}

std::string TokenStrings::Piece(const std::vector<int32_t>& ids, size_t i) const {
  return Alternative(ids, i, ids[i]);
}

std::string TokenStrings::Text(const std::vector<int32_t>& ids) const {
  if (tokenizer_ == nullptr) return std::string();
  return ValidUtf8(DecodeValid(ids, 0, ids.size(), -1));
}

namespace {

// vLLM's `prompt_logprobs` of one choice: null for the first token (no context), then one entry per
// prompt position (the appended next-token position of max_tokens 1 is not the prompt's).
Json PromptLogprobsList(const CompletionRequest& request, const std::vector<int32_t>& ids,
                        const ScoreResult& result, const TokenStrings& strings) {
  Json list = Json::array({nullptr});
  static const std::vector<TopKEntry> kNone;
  for (size_t i = 1; i < ids.size(); ++i) {
    const size_t r = i - 1;
    const std::vector<TopKEntry>& top = r < result.top_k.size() ? result.top_k[r] : kNone;
    const int32_t rank = r < result.rank.size() ? result.rank[r] : 0;
    list.push_back(
        PromptLogprobEntry(top, request.prompt_logprobs, ids[i], result.logprob[r], rank, ids, i, strings));
  }
  return list;
}

}  // namespace

Json BuildChoice(const CompletionRequest& request, int index, const Prompt& prompt,
                 const std::vector<int32_t>& ids, const ScoreResult* result, const TokenStrings& strings) {
  // The engine's arrays start at position max(1, score_from) of the scored sequence.
  const size_t n = ids.size();
  const bool prompt_scored = result != nullptr && n >= 2 && (request.echo || request.prompt_logprobs >= 0);
  const bool echo_logprobs = prompt_scored && request.echo && request.logprobs >= 0;
  Json tokens = Json::array();
  Json token_logprobs = Json::array();
  Json top_logprobs = Json::array();
  Json text_offset = Json::array();
  std::string text;
  int64_t offset = 0;
  const auto add = [&](const std::string& piece, Json logprob, Json top, bool in_text) {
    tokens.push_back(piece);
    token_logprobs.push_back(std::move(logprob));
    top_logprobs.push_back(std::move(top));
    text_offset.push_back(offset);
    if (in_text) offset += CodePoints(piece);
  };
  if (request.echo) {
    text = prompt.is_text ? prompt.text : strings.Text(ids);
    if (request.logprobs >= 0) {
      for (size_t i = 0; i < n; ++i) {
        const std::string piece = strings.Piece(ids, i);
        // A BOS the tokenizer added to a text prompt is not in `text` (the prompt as sent): it takes no
        // characters, so that text_offset indexes `text`.
        const bool in_text = !(i == 0 && prompt.is_text && !absl::StartsWith(text, piece));
        if (i == 0 || !echo_logprobs) {
          add(piece, nullptr, nullptr, in_text);
          continue;
        }
        const size_t r = i - 1;
        static const std::vector<TopKEntry> kNone;  // logprobs 0 asks the engine for no top-k
        const std::vector<TopKEntry>& top = r < result->top_k.size() ? result->top_k[r] : kNone;
        add(piece, result->logprob[r],
            TopObject(top, request.logprobs, ids[i], result->logprob[r], ids, i, strings), in_text);
      }
    }
  }
  std::vector<int32_t> completion_ids;
  if (request.max_tokens == 1 && result != nullptr && !result->top_k.empty() &&
      !result->top_k.back().empty()) {
    const TopKEntry next = result->top_k.back().front();
    const std::string piece = strings.Alternative(ids, n, next.id);
    // Alternative() reads ids[0..n): the prompt's ids are the context of the next token.
    text += piece;
    completion_ids.push_back(next.id);
    if (request.logprobs >= 0) {
      add(piece, next.logprob,
          TopObject(result->top_k.back(), request.logprobs, next.id, next.logprob, ids, n, strings), true);
    }
  }
  Json choice;
  choice["index"] = index;
  choice["text"] = text;
  if (request.logprobs >= 0) {
    choice["logprobs"] = {{"tokens", std::move(tokens)},
                          {"token_logprobs", std::move(token_logprobs)},
                          {"top_logprobs", std::move(top_logprobs)},
                          {"text_offset", std::move(text_offset)}};
  } else {
    choice["logprobs"] = nullptr;
  }
  if (request.prompt_logprobs >= 0) {
    choice["prompt_logprobs"] =
        prompt_scored ? PromptLogprobsList(request, ids, *result, strings) : Json::array({nullptr});
  }
  choice["finish_reason"] = "length";
  return choice;
}

Json BuildCompletionResponse(const CompletionRequest& request, const std::string& model_name,
                             const std::string& id, int64_t created, std::vector<Json> choices) {
  int64_t prompt_tokens = 0;
  for (const Prompt& p : request.prompts) prompt_tokens += static_cast<int64_t>(p.ids.size());
  const int64_t completion_tokens = static_cast<int64_t>(request.prompts.size()) * request.max_tokens;
  Json j;
  j["id"] = id;
  j["object"] = "text_completion";
  j["created"] = created;
  j["model"] = model_name;
  j["choices"] = std::move(choices);
  j["usage"] = {{"prompt_tokens", prompt_tokens},
                {"completion_tokens", completion_tokens},
                {"total_tokens", prompt_tokens + completion_tokens}};
  return j;
}

int HttpStatusOf(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kOk:
      return 200;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kFailedPrecondition:
      return 400;
    case absl::StatusCode::kUnauthenticated:
      return 401;
    case absl::StatusCode::kPermissionDenied:
      return 403;
    case absl::StatusCode::kNotFound:
      return 404;
    case absl::StatusCode::kResourceExhausted:
      return 429;
    case absl::StatusCode::kCancelled:
      return 499;
    case absl::StatusCode::kUnimplemented:
      return 501;
    case absl::StatusCode::kUnavailable:
      return 503;
    case absl::StatusCode::kDeadlineExceeded:
      return 504;
    default:
      return 500;
  }
}

Json ErrorBody(int http_status, absl::string_view message) {
  const char* type = "invalid_request_error";
  if (http_status == 401) type = "authentication_error";
  if (http_status == 404) type = "not_found_error";
  if (http_status == 429) type = "rate_limit_error";
  if (http_status >= 500) type = "server_error";
  return {{"error",
           {{"message", ValidUtf8(message)}, {"type", type}, {"param", nullptr}, {"code", http_status}}}};
}

absl::StatusOr<TokenizeRequest> ParseTokenizeRequest(absl::string_view body) {
  absl::StatusOr<Json> j = ParseBody(body);
  if (!j.ok()) return j.status();
  const Json* prompt = Member(*j, "prompt");
  if (prompt == nullptr || !prompt->is_string()) return FieldError("prompt", "must be a string");
  TokenizeRequest r;
  r.prompt = prompt->get<std::string>();
  absl::StatusOr<bool> add = BoolMember(*j, "add_special_tokens", true);
  if (!add.ok()) return add.status();
  r.add_special_tokens = *add;
  return r;
}

absl::StatusOr<std::vector<int32_t>> ParseDetokenizeRequest(absl::string_view body) {
  absl::StatusOr<Json> j = ParseBody(body);
  if (!j.ok()) return j.status();
  const Json* tokens = Member(*j, "tokens");
  if (tokens == nullptr || !tokens->is_array()) return FieldError("tokens", "must be a list of token ids");
  return TokenIds(*tokens, "tokens");
}

int32_t SpecialTokenIdOf(const Tokenizer& tokenizer, absl::string_view text) {
  for (int32_t id : {tokenizer.bos_id(), tokenizer.eos_id()}) {
    if (id < 0) continue;
    absl::StatusOr<std::string> s = tokenizer.Decode(std::vector<int32_t>{id});
    if (s.ok() && !s->empty() && *s == text) return id;
  }
  return -1;
}

Json TokenizerInfo(const Tokenizer& tokenizer, int64_t max_seq_len) {
  const auto token = [&](int32_t id) -> Json {
    if (id < 0) return nullptr;
    absl::StatusOr<std::string> s = tokenizer.Decode(std::vector<int32_t>{id});
    if (!s.ok()) return nullptr;
    return ValidUtf8(*s);
  };
  return {{"tokenizer_class", tokenizer.kind()},
          {"bos_token", token(tokenizer.bos_id())},
          {"eos_token", token(tokenizer.eos_id())},
          {"pad_token", nullptr},
          {"chat_template", nullptr},
          {"add_bos_token", tokenizer.add_bos_by_default()},
          {"model_max_length", max_seq_len},
          {"vocab_size", tokenizer.vocab_size()}};
}

}  // namespace openai
}  // namespace scored
