#include "engine/tokenizer/decoder.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/base/status_macros.h"
#include "engine/tokenizer/normalizer.h"
#include "engine/tokenizer/text_util.h"

namespace scored {
namespace tokenizer_internal {
namespace {

using Kind = DecoderStep::Kind;

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// The byte of a ByteFallback token "<0xNN>", or -1: token[3..5] read as Rust's u8::from_str_radix(_, 16) does
// (hex digits of either case; a leading '+' allowed).
int FallbackByte(const std::string& token) {
  if (token.size() != 6 || token.compare(0, 3, "<0x") != 0 || token[5] != '>') return -1;
  const int low = HexDigit(token[4]);
  if (low < 0) return -1;
  if (token[3] == '+') return low;
  const int high = HexDigit(token[3]);
  return high < 0 ? -1 : high * 16 + low;
}

// ByteFallback: each run of byte tokens as one token of its bytes when they are valid UTF-8, else one token
// per byte (where the library writes one U+FFFD each).
void MergeFallbackBytes(std::vector<std::string>* tokens) {
  std::vector<std::string> out;
  out.reserve(tokens->size());
  std::string run;
  auto flush = [&out, &run]() {
    if (run.empty()) return;
    if (ValidateUtf8(run).ok()) {
      out.push_back(std::move(run));
    } else {
      for (const char b : run) out.emplace_back(1, b);
    }
    run.clear();
  };
  for (std::string& token : *tokens) {
    const int byte = FallbackByte(token);
    if (byte >= 0) {
      run.push_back(static_cast<char>(byte));
      continue;
    }
    flush();
    out.push_back(std::move(token));
  }
  flush();
  *tokens = std::move(out);
}

// Strip: up to `start` leading and `stop` trailing copies of the character `c`.
void StripToken(const std::string& c, size_t start, size_t stop, std::string* token) {
  size_t begin = 0;
  for (size_t n = 0; n < start && token->compare(begin, c.size(), c) == 0; ++n) begin += c.size();
  size_t end = token->size();
  for (size_t n = 0; n < stop && end >= begin + c.size() && token->compare(end - c.size(), c.size(), c) == 0;
       ++n) {
    end -= c.size();
  }
  *token = token->substr(begin, end - begin);
}

// Every non-overlapping occurrence of `from` in *token as `to`.
void ReplaceAll(const std::string& from, const std::string& to, std::string* token) {
  std::string out;
  size_t copied = 0;
  for (size_t p = token->find(from); p != std::string::npos; p = token->find(from, p + from.size())) {
    out.append(*token, copied, p - copied);
    out.append(to);
    copied = p + from.size();
  }
  if (copied == 0) return;
  out.append(*token, copied, std::string::npos);
  *token = std::move(out);
}

// WordPiece's cleanup, in the library's order.
void WordPieceCleanup(std::string* token) {
  static const std::pair<const char*, const char*> kRules[] = {
      {" .", "."},   {" ?", "?"},           {" !", "!"},   {" ,", ","},     {" ' ", "'"},   {" n't", "n't"},
      {" 'm", "'m"}, {" do not", " don't"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
  for (const auto& [from, to] : kRules) ReplaceAll(from, to, token);
}

// The tokens joined with `separator` between them.
template <typename Tokens>
std::string Join(const Tokens& tokens, std::string_view separator) {
  size_t size = 0;
  for (const auto& t : tokens) size += t.size() + separator.size();
  std::string out;
  out.reserve(size);
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (i > 0) out.append(separator);
    out.append(tokens[i]);
  }
  return out;
}

void JoinInto(std::vector<std::string>* tokens) {
  if (tokens->size() == 1) return;
  std::string joined = Join(*tokens, "");
  tokens->assign(1, std::move(joined));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Decoder>> Decoder::Create(std::vector<DecoderStep> steps, bool has_decoder) {
  if (!has_decoder && !steps.empty()) return absl::InvalidArgumentError("decoder steps without a decoder");
  std::unique_ptr<Decoder> d(new Decoder());
  for (size_t i = 0; i < steps.size(); ++i) {
    const DecoderStep& step = steps[i];
    std::unique_ptr<RegexSplitter> regex;
    if (step.kind == Kind::kByteLevel && i != 0) {
      return absl::InvalidArgumentError(absl::StrCat("a ByteLevel decoder at step ", i, " (only first)"));
    }
    if (step.kind == Kind::kReplace && step.pattern_is_regex) {
      SCORED_ASSIGN_OR_RETURN(regex, RegexSplitter::Create(step.pattern));
    } else if ((step.kind == Kind::kReplace || step.kind == Kind::kStrip || step.kind == Kind::kMetaspace ||
                step.kind == Kind::kBpe || step.kind == Kind::kWordPiece) &&
               (step.kind == Kind::kReplace ? step.pattern : step.content).empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("decoder step ", i, " has an empty pattern or character"));
    }
    d->regexes_.push_back(std::move(regex));
  }
  d->steps_ = std::move(steps);
  d->has_decoder_ = has_decoder;
  return d;
}

absl::Status Decoder::ApplyToToken(size_t s, bool first, bool last, std::string* token) const {
  const DecoderStep& step = steps_[s];
  switch (step.kind) {
    case Kind::kReplace:
      // A token of raw bytes (the ids cut a character) is left to the literal patterns only.
      if (regexes_[s] != nullptr && !ValidateUtf8(*token).ok()) return absl::OkStatus();
      return ReplaceMatches(regexes_[s].get(), step.pattern, step.content, token);
    case Kind::kStrip:
      StripToken(step.content, step.strip_start, step.strip_stop, token);
      return absl::OkStatus();
    case Kind::kMetaspace:
      ReplaceAll(step.content, first && step.prepend ? "" : " ", token);
      return absl::OkStatus();
    case Kind::kBpe:
      ReplaceAll(step.content, last ? "" : " ", token);
      return absl::OkStatus();
    case Kind::kWordPiece:
      if (!first) {
        if (token->compare(0, step.content.size(), step.content) == 0) {
          token->erase(0, step.content.size());
        } else {
          token->insert(0, " ");
        }
      }
      if (step.cleanup) WordPieceCleanup(token);
      return absl::OkStatus();
    case Kind::kByteLevel:
    case Kind::kFuse:
    case Kind::kByteFallback:
      break;  // steps over the whole list: Decode, TokenText
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> Decoder::Decode(const std::vector<std::string_view>& tokens) const {
  if (!has_decoder_) return Join(tokens, " ");
  std::vector<std::string> list;
  size_t first_step = 0;
  if (!steps_.empty() && steps_[0].kind == Kind::kByteLevel) {
    // The tokens are bytes already: ByteLevel only joins them.
    list.emplace_back(Join(tokens, ""));
    first_step = 1;
  } else {
    list.assign(tokens.begin(), tokens.end());
  }
  for (size_t s = first_step; s < steps_.size(); ++s) {
    const Kind kind = steps_[s].kind;
    if (kind == Kind::kByteLevel || kind == Kind::kFuse) {
      JoinInto(&list);
    } else if (kind == Kind::kByteFallback) {
      MergeFallbackBytes(&list);
    } else {
      for (size_t i = 0; i < list.size(); ++i) {
        SCORED_RETURN_IF_ERROR(ApplyToToken(s, i == 0, i + 1 == list.size(), &list[i]));
      }
    }
  }
  return Join(list, "");
}

absl::StatusOr<std::string> Decoder::TokenText(std::string_view token) const {
  std::string text(token);
  bool joined = false;  // a step joined the tokens of the text into one
  for (size_t s = 0; s < steps_.size(); ++s) {
    const Kind kind = steps_[s].kind;
    if (kind == Kind::kByteLevel || kind == Kind::kFuse) {
      joined = true;
    } else if (kind == Kind::kByteFallback) {
      const int byte = FallbackByte(text);
      if (byte >= 0) text.assign(1, static_cast<char>(byte));
    } else if (!(kind == Kind::kStrip && joined)) {  // that Strip cuts only the ends of the whole text
      SCORED_RETURN_IF_ERROR(ApplyToToken(s, /*first=*/false, /*last=*/false, &text));
    }
  }
  return text;
}

}  // namespace tokenizer_internal
}  // namespace scored
