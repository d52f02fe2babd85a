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

namespace {

// Drops Rust White_Space characters at the start (`left`) and at the end (`right`) of valid UTF-8.
void StripWhitespace(bool left, bool right, std::string* text) {
  size_t begin = 0;
  size_t end = text->size();
  while (left && begin < end) {
    int len = 1;
    if (!IsUnicodeWhitespace(DecodeUtf8At(*text, begin, &len))) break;
    begin += static_cast<size_t>(len);
  }
  while (right && end > begin) {
    size_t last = end - 1;
    while (last > begin && (static_cast<unsigned char>((*text)[last]) & 0xC0) == 0x80) --last;
    int len = 1;
    if (!IsUnicodeWhitespace(DecodeUtf8At(*text, last, &len))) break;
    end = last;
  }
  *text = text->substr(begin, end - begin);
}

utf8proc_category_t CategoryOf(uint32_t cp) { return utf8proc_category(static_cast<utf8proc_int32_t>(cp)); }

bool IsMark(uint32_t cp) {
  const utf8proc_category_t c = CategoryOf(cp);
  return c == UTF8PROC_CATEGORY_MN || c == UTF8PROC_CATEGORY_MC || c == UTF8PROC_CATEGORY_ME;
}

// BertNormalizer's is_control: the categories C* (Cc, Cf, Cn, Co, Cs), '\t', '\n' and '\r' excepted.
bool IsBertControl(uint32_t cp) {
  if (cp == '\t' || cp == '\n' || cp == '\r') return false;
  const utf8proc_category_t c = CategoryOf(cp);
  return c == UTF8PROC_CATEGORY_CC || c == UTF8PROC_CATEGORY_CF || c == UTF8PROC_CATEGORY_CN ||
         c == UTF8PROC_CATEGORY_CO || c == UTF8PROC_CATEGORY_CS;
}

bool IsCjkIdeograph(uint32_t cp) {
  return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) ||
         (cp >= 0x20000 && cp <= 0x2A6DF) || (cp >= 0x2A700 && cp <= 0x2B73F) ||
         (cp >= 0x2B740 && cp <= 0x2B81F) || (cp >= 0x2B920 && cp <= 0x2CEAF) ||
         (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
}

// Nmt's map: -1 drops the character, else the character written for it.
int64_t NmtMap(uint32_t cp) {
  if ((cp >= 0x01 && cp <= 0x08) || cp == 0x0B || (cp >= 0x0E && cp <= 0x1F) || cp == 0x7F || cp == 0x8F ||
      cp == 0x9F) {
    return -1;
  }
  if (cp == 0x09 || cp == 0x0A || cp == 0x0C || cp == 0x0D || cp == 0x1680 ||
      (cp >= 0x200B && cp <= 0x200F) || cp == 0x2028 || cp == 0x2029 || cp == 0x2581 || cp == 0xFEFF ||
      cp == 0xFFFD) {
    return ' ';
  }
  return cp;
}

// Rewrites valid UTF-8 character by character: `map` returns the code points written for one (none: dropped).
template <typename Map>
void MapChars(Map map, std::string* text) {
  std::string out;
  out.reserve(text->size());
  for (size_t pos = 0; pos < text->size();) {
    int len = 1;
    const uint32_t cp = DecodeUtf8At(*text, pos, &len);
    pos += static_cast<size_t>(len);
    map(cp, &out);
  }
  *text = std::move(out);
}

absl::Status BertNormalize(const NormalizerStep& step, std::string* text) {
  if (step.clean_text) {
    MapChars(
        [](uint32_t cp, std::string* out) {
          if (cp == 0 || cp == 0xFFFD || IsBertControl(cp)) return;
          AppendUtf8(IsUnicodeWhitespace(cp) ? ' ' : cp, out);
        },
        text);
  }
  if (step.handle_chinese_chars) {
    MapChars(
        [](uint32_t cp, std::string* out) {
          const bool cjk = IsCjkIdeograph(cp);
          if (cjk) out->push_back(' ');
          AppendUtf8(cp, out);
          if (cjk) out->push_back(' ');
        },
        text);
  }
  if (step.strip_accents) {
    SCORED_ASSIGN_OR_RETURN(*text, NormalizeUnicode(*text, /*compose=*/false, /*compat=*/false));
    MapChars(
        [](uint32_t cp, std::string* out) {
          if (CategoryOf(cp) != UTF8PROC_CATEGORY_MN) AppendUtf8(cp, out);
        },
        text);
  }
  if (step.lowercase) *text = LowercaseUtf8(*text);
  return absl::OkStatus();
}

}  // namespace

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
    case Kind::kStrip:
      StripWhitespace(step.strip_left, step.strip_right, text);
      return absl::OkStatus();
    case Kind::kPrepend:
      if (!text->empty()) text->insert(0, step.content);
      return absl::OkStatus();
    case Kind::kStripAccents:
      MapChars(
          [](uint32_t cp, std::string* out) {
            if (!IsMark(cp)) AppendUtf8(cp, out);
          },
          text);
      return absl::OkStatus();
    case Kind::kNmt:
      MapChars(
          [](uint32_t cp, std::string* out) {
            const int64_t mapped = NmtMap(cp);
            if (mapped >= 0) AppendUtf8(static_cast<uint32_t>(mapped), out);
          },
          text);
      return absl::OkStatus();
    case Kind::kBert:
      return BertNormalize(step, text);
    case Kind::kReplace:
      break;
  }
  return ReplaceMatches(regexes_[index].get(), step.pattern, step.content, text);
}

absl::Status ReplaceMatches(const RegexSplitter* regex, const std::string& pattern,
                            const std::string& content, std::string* text) {
  std::vector<std::pair<size_t, size_t>> matches;
  if (regex != nullptr) {
    SCORED_RETURN_IF_ERROR(regex->FindMatches(*text, &matches));
  } else {
    for (size_t p = text->find(pattern); p != std::string::npos;
         p = text->find(pattern, p + pattern.size())) {
      matches.emplace_back(p, p + pattern.size());
    }
  }
  if (matches.empty()) return absl::OkStatus();
  std::string out;
  out.reserve(text->size());
  size_t copied = 0;
  for (const auto& [start, end] : matches) {
    out.append(*text, copied, start - copied);
    out.append(content);
    copied = end;
  }
  out.append(*text, copied, std::string::npos);
  *text = std::move(out);
  return absl::OkStatus();
}

}  // namespace tokenizer_internal
}  // namespace scored
