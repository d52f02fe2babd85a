#include "engine/tokenizer/pipeline_json.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "engine/base/status_macros.h"

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

}  // namespace tokenizer_internal
}  // namespace scored
