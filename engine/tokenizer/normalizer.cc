#include "engine/tokenizer/normalizer.h"

#include <utf8proc.h>

#include <cstdlib>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/base/status_macros.h"
#include "engine/tokenizer/text_util.h"

namespace scored {
namespace tokenizer_internal {

absl::StatusOr<std::string> NormalizeUnicode(std::string_view text, bool compose, bool compat) {
  // ASCII is invariant under every form.
  bool ascii = true;
  for (const char c : text) ascii = ascii && static_cast<unsigned char>(c) < 0x80;
  if (ascii) return std::string(text);
  int options = UTF8PROC_STABLE | (compose ? UTF8PROC_COMPOSE : UTF8PROC_DECOMPOSE);
  if (compat) options |= UTF8PROC_COMPAT;
  utf8proc_uint8_t* mapped = nullptr;
  const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                                          static_cast<utf8proc_ssize_t>(text.size()), &mapped,
                                          static_cast<utf8proc_option_t>(options));
  if (n < 0) {
    return absl::InvalidArgumentError(absl::StrCat("Unicode normalization failed: ", utf8proc_errmsg(n)));
  }
  std::string out(reinterpret_cast<const char*>(mapped), static_cast<size_t>(n));
  std::free(mapped);
  return out;
}

std::string LowercaseUtf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    int len = 1;
    const uint32_t cp = DecodeUtf8At(text, pos, &len);
    pos += static_cast<size_t>(len);
    if (cp < 0x80) {
      out.push_back(static_cast<char>(cp >= 'A' && cp <= 'Z' ? cp + ('a' - 'A') : cp));
    } else if (cp == 0x130) {
      // The one unconditional multi-character lowercase mapping of SpecialCasing.txt, which Rust applies.
      out.append("i\xCC\x87");
    } else {
      AppendUtf8(static_cast<uint32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(cp))), &out);
    }
  }
  return out;
}

absl::StatusOr<std::unique_ptr<Normalizer>> Normalizer::Create(std::vector<NormalizerStep> steps) {
  std::unique_ptr<Normalizer> n(new Normalizer());
  for (const NormalizerStep& step : steps) {
    std::unique_ptr<RegexSplitter> regex;
    if (step.kind == NormalizerStep::Kind::kReplace && step.pattern_is_regex) {
      SCORED_ASSIGN_OR_RETURN(regex, RegexSplitter::Create(step.pattern));
    } else if (step.kind == NormalizerStep::Kind::kReplace && step.pattern.empty()) {
      return absl::InvalidArgumentError("a Replace normalizer with an empty pattern");
    }
    n->regexes_.push_back(std::move(regex));
  }
  n->steps_ = std::move(steps);
  return n;
}

absl::Status Normalizer::Apply(std::string_view text, std::string* out) const {
  out->assign(text);
  for (size_t i = 0; i < steps_.size(); ++i) SCORED_RETURN_IF_ERROR(ApplyStep(i, out));
  return absl::OkStatus();
}

absl::Status Normalizer::ApplyStep(size_t index, std::string* text) const {
  const NormalizerStep& step = steps_[index];
  using Kind = NormalizerStep::Kind;
  switch (step.kind) {
    case Kind::kNfc:
    case Kind::kNfd:
    case Kind::kNfkc:
    case Kind::kNfkd: {
      SCORED_ASSIGN_OR_RETURN(*text,
                              NormalizeUnicode(*text, step.kind == Kind::kNfc || step.kind == Kind::kNfkc,
                                               step.kind == Kind::kNfkc || step.kind == Kind::kNfkd));
      return absl::OkStatus();
    }
    case Kind::kLowercase:
      *text = LowercaseUtf8(*text);
      return absl::OkStatus();
    case Kind::kStrip: {
      size_t begin = 0;
      size_t end = text->size();
      while (step.strip_left && begin < end) {
        int len = 1;
        if (!IsUnicodeWhitespace(DecodeUtf8At(*text, begin, &len))) break;
        begin += static_cast<size_t>(len);
      }
      while (step.strip_right && end > begin) {
        size_t last = end - 1;
        while (last > begin && (static_cast<unsigned char>((*text)[last]) & 0xC0) == 0x80) --last;
        int len = 1;
        if (!IsUnicodeWhitespace(DecodeUtf8At(*text, last, &len))) break;
        end = last;
      }
      *text = text->substr(begin, end - begin);
      return absl::OkStatus();
    }
    case Kind::kPrepend:
      if (!text->empty()) text->insert(0, step.content);
      return absl::OkStatus();
    case Kind::kReplace:
      break;
  }
  std::vector<std::pair<size_t, size_t>> matches;
  if (regexes_[index] != nullptr) {
    SCORED_RETURN_IF_ERROR(regexes_[index]->FindMatches(*text, &matches));
  } else {
    for (size_t p = text->find(step.pattern); p != std::string::npos;
         p = text->find(step.pattern, p + step.pattern.size())) {
      matches.emplace_back(p, p + step.pattern.size());
    }
  }
  if (matches.empty()) return absl::OkStatus();
  std::string out;
  out.reserve(text->size());
  size_t copied = 0;
  for (const auto& [start, end] : matches) {
    out.append(*text, copied, start - copied);
    out.append(step.content);
    copied = end;
  }
  out.append(*text, copied, std::string::npos);
  *text = std::move(out);
  return absl::OkStatus();
}

}  // namespace tokenizer_internal
}  // namespace scored
