#include "engine/tokenizer/pipeline_json.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "engine/base/status_macros.h"
#include "engine/tokenizer/text_util.h"

namespace scored {
namespace tokenizer_internal {
namespace {

using nlohmann::json;

std::string TypeOf(const json& j) {
  const auto it = j.find("type");
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// A boolean field; absent: `fallback`; present but not a boolean: false with *ok cleared.
bool BoolField(const json& j, const char* key, bool fallback, bool* ok) {
  const auto it = j.find(key);
  if (it == j.end()) return fallback;
  if (!it->is_boolean()) *ok = false;
  return it->is_boolean() && it->get<bool>();
}

// {"String": s} or {"Regex": r}.
bool ParsePattern(const json& j, std::string* pattern, bool* is_regex) {
  const auto it = j.find("pattern");
  if (it == j.end() || !it->is_object() || it->size() != 1) return false;
  *is_regex = it->contains("Regex");
  const json& value = *is_regex ? (*it)["Regex"] : it->value("String", json());
  if (!value.is_string() || value.get<std::string>().empty()) return false;
  *pattern = value.get<std::string>();
  return true;
}

// A string field; absent: `fallback`; present but not a string: false.
bool StringField(const json& j, const char* key, const char* fallback, std::string* out) {
  const auto it = j.find(key);
  if (it == j.end()) {
    *out = fallback;
    return true;
  }
  if (!it->is_string()) return false;
  *out = it->get<std::string>();
  return true;
}

// A count field (absent: 0); false if present and not a non-negative integer.
bool SizeField(const json& j, const char* key, size_t* out) {
  const auto it = j.find(key);
  if (it == j.end()) return true;
  if (!it->is_number_unsigned()) return false;
  *out = it->get<size_t>();
  return true;
}

// Whether `s` is exactly one UTF-8 character (a Rust char field).
bool IsOneCharacter(const std::string& s) {
  return !s.empty() && static_cast<size_t>(Utf8SequenceLength(static_cast<unsigned char>(s[0]))) == s.size();
}

bool ParseBehavior(const json& j, SplitBehavior* behavior) {
  static const std::pair<const char*, SplitBehavior> kBehaviors[] = {
      {"Removed", SplitBehavior::kRemoved},
      {"Isolated", SplitBehavior::kIsolated},
      {"MergedWithPrevious", SplitBehavior::kMergedWithPrevious},
      {"MergedWithNext", SplitBehavior::kMergedWithNext},
      {"Contiguous", SplitBehavior::kContiguous}};
  const auto it = j.find("behavior");
  if (it == j.end()) return true;  // the library's default, Isolated
  for (const auto& [name, value] : kBehaviors) {
    if (it->is_string() && it->get<std::string>() == name) {
      *behavior = value;
      return true;
    }
  }
  return false;
}

}  // namespace

absl::Status UnsupportedJson(const std::string& path, const std::string& what, const json& j) {
  return absl::UnimplementedError(absl::StrCat(path, ": unsupported ", what, ": ", j.dump().substr(0, 200)));
}

absl::Status ParseNormalizerSteps(const json& j, const std::string& path,
                                  std::vector<NormalizerStep>* steps) {
  if (j.is_null()) return absl::OkStatus();
  using Kind = NormalizerStep::Kind;
  const std::string type = TypeOf(j);
  NormalizerStep step;
  bool ok = true;
  if (type == "Sequence") {
    const auto it = j.find("normalizers");
    if (it == j.end() || !it->is_array()) return UnsupportedJson(path, "normalizer", j);
    for (const json& n : *it) SCORED_RETURN_IF_ERROR(ParseNormalizerSteps(n, path, steps));
    return absl::OkStatus();
  } else if (type == "NFC" || type == "NFD" || type == "NFKC" || type == "NFKD") {
    step.kind = type == "NFC"    ? Kind::kNfc
                : type == "NFD"  ? Kind::kNfd
                : type == "NFKC" ? Kind::kNfkc
                                 : Kind::kNfkd;
  } else if (type == "Lowercase") {
    step.kind = Kind::kLowercase;
  } else if (type == "Strip") {
    step.kind = Kind::kStrip;
    step.strip_left = BoolField(j, "strip_left", true, &ok);
    step.strip_right = BoolField(j, "strip_right", true, &ok);
  } else if (type == "Replace") {
    step.kind = Kind::kReplace;
    const auto content = j.find("content");
    ok = ParsePattern(j, &step.pattern, &step.pattern_is_regex) && content != j.end() && content->is_string();
    if (ok) step.content = content->get<std::string>();
  } else if (type == "Prepend") {
    step.kind = Kind::kPrepend;
    const auto prepend = j.find("prepend");
    ok = prepend != j.end() && prepend->is_string();
    if (ok) step.content = prepend->get<std::string>();
  } else if (type == "StripAccents") {
    step.kind = Kind::kStripAccents;
  } else if (type == "Nmt") {
    step.kind = Kind::kNmt;
  } else if (type == "BertNormalizer") {
    step.kind = Kind::kBert;
    step.clean_text = BoolField(j, "clean_text", true, &ok);
    step.handle_chinese_chars = BoolField(j, "handle_chinese_chars", true, &ok);
    step.lowercase = BoolField(j, "lowercase", true, &ok);
    // null (the library's default): as lowercase.
    const auto strip = j.find("strip_accents");
    step.strip_accents =
        strip == j.end() || strip->is_null() ? step.lowercase : BoolField(j, "strip_accents", false, &ok);
  } else {
    ok = false;
  }
  if (!ok) return UnsupportedJson(path, "normalizer", j);
  steps->push_back(std::move(step));
  return absl::OkStatus();
}

absl::Status ParsePreTokenizerSteps(const json& j, const std::string& path,
                                    std::vector<PreTokenizerStep>* steps) {
  if (j.is_null()) return absl::OkStatus();
  using Kind = PreTokenizerStep::Kind;
  const std::string type = TypeOf(j);
  PreTokenizerStep step;
  bool ok = true;
  if (type == "Sequence") {
    const auto it = j.find("pretokenizers");
    if (it == j.end() || !it->is_array()) return UnsupportedJson(path, "pre_tokenizer", j);
    for (const json& n : *it) SCORED_RETURN_IF_ERROR(ParsePreTokenizerSteps(n, path, steps));
    return absl::OkStatus();
  } else if (type == "Split") {
    step.kind = Kind::kSplit;
    step.invert = BoolField(j, "invert", false, &ok);
    ok = ok && ParsePattern(j, &step.pattern, &step.pattern_is_regex) && ParseBehavior(j, &step.behavior);
  } else if (type == "CharDelimiterSplit") {
    // split(delimiter, Removed).
    step.kind = Kind::kSplit;
    step.behavior = SplitBehavior::kRemoved;
    const auto delimiter = j.find("delimiter");
    ok = delimiter != j.end() && delimiter->is_string() && !delimiter->get<std::string>().empty();
    if (ok) step.pattern = delimiter->get<std::string>();
  } else if (type == "Punctuation") {
    step.kind = Kind::kPunctuation;
    ok = ParseBehavior(j, &step.behavior);
  } else if (type == "Digits") {
    step.kind = Kind::kDigits;
    step.individual_digits = BoolField(j, "individual_digits", false, &ok);
  } else if (type == "Whitespace") {
    step.kind = Kind::kWhitespace;
  } else if (type == "WhitespaceSplit") {
    step.kind = Kind::kWhitespaceSplit;
  } else if (type == "FixedLength") {
    step.kind = Kind::kFixedLength;
    const auto length = j.find("length");
    if (length != j.end()) {
      ok = length->is_number_unsigned() && length->get<uint64_t>() > 0 &&
           length->get<uint64_t>() <= (1u << 20);
      if (ok) step.length = length->get<size_t>();
    }
  } else if (type == "BertPreTokenizer") {
    // Whitespace removed, then every punctuation character isolated.
    PreTokenizerStep whitespace;
    whitespace.kind = Kind::kWhitespaceSplit;
    steps->push_back(whitespace);
    step.kind = Kind::kPunctuation;
  } else if (type == "ByteLevel") {
    step.kind = Kind::kByteLevel;
    step.add_prefix_space = BoolField(j, "add_prefix_space", true, &ok);
    step.use_regex = BoolField(j, "use_regex", true, &ok);
    if (std::any_of(steps->begin(), steps->end(),
                    [](const PreTokenizerStep& s) { return s.kind == Kind::kByteLevel; })) {
      return UnsupportedJson(path, "pre_tokenizer (a second ByteLevel)", j);
    }
  } else {
    ok = false;
  }
  if (!ok) return UnsupportedJson(path, "pre_tokenizer", j);
  steps->push_back(std::move(step));
  return absl::OkStatus();
}

absl::Status ParseDecoderSteps(const json& j, const std::string& path, std::vector<DecoderStep>* steps) {
  if (j.is_null()) return absl::OkStatus();
  using Kind = DecoderStep::Kind;
  const std::string type = TypeOf(j);
  DecoderStep step;
  bool ok = true;
  if (type == "Sequence") {
    const auto it = j.find("decoders");
    if (it == j.end() || !it->is_array()) return UnsupportedJson(path, "decoder", j);
    for (const json& d : *it) {
      if (d.is_null()) return UnsupportedJson(path, "decoder", j);
      SCORED_RETURN_IF_ERROR(ParseDecoderSteps(d, path, steps));
    }
    return absl::OkStatus();
  } else if (type == "ByteLevel") {
    step.kind = Kind::kByteLevel;
  } else if (type == "ByteFallback") {
    step.kind = Kind::kByteFallback;
  } else if (type == "Fuse") {
    step.kind = Kind::kFuse;
  } else if (type == "Replace") {
    step.kind = Kind::kReplace;
    const auto content = j.find("content");
    ok = ParsePattern(j, &step.pattern, &step.pattern_is_regex) && content != j.end() && content->is_string();
    if (ok) step.content = content->get<std::string>();
  } else if (type == "Strip") {
    step.kind = Kind::kStrip;
    ok = StringField(j, "content", "", &step.content) && IsOneCharacter(step.content) &&
         SizeField(j, "start", &step.strip_start) && SizeField(j, "stop", &step.strip_stop);
  } else if (type == "Metaspace") {
    step.kind = Kind::kMetaspace;
    ok = StringField(j, "replacement", "\xE2\x96\x81", &step.content) && IsOneCharacter(step.content);
    const std::string scheme =
        j.value("prepend_scheme", BoolField(j, "add_prefix_space", true, &ok) ? "always" : "never");
    ok = ok && (scheme == "always" || scheme == "first" || scheme == "never");
    step.prepend = scheme != "never";
  } else if (type == "BPEDecoder") {
    step.kind = Kind::kBpe;
    ok = StringField(j, "suffix", "</w>", &step.content) && !step.content.empty();
  } else if (type == "WordPiece") {
    step.kind = Kind::kWordPiece;
    ok = StringField(j, "prefix", "##", &step.content) && !step.content.empty();
    step.cleanup = BoolField(j, "cleanup", true, &ok);
  } else {
    ok = false;
  }
  if (!ok) return UnsupportedJson(path, "decoder", j);
  steps->push_back(std::move(step));
  return absl::OkStatus();
}

}  // namespace tokenizer_internal
}  // namespace scored
