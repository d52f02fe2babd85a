#include "client/load/length_mix.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace scored {
namespace load {

absl::StatusOr<std::vector<LengthBucket>> ParseLengthMix(absl::string_view text) {
  std::vector<LengthBucket> mix;
  if (absl::StripAsciiWhitespace(text).empty()) {
    return absl::InvalidArgumentError("length mix is empty (expected e.g. \"64:0.5,512:0.5\")");
  }
  for (absl::string_view raw : absl::StrSplit(text, ',')) {
    const absl::string_view entry = absl::StripAsciiWhitespace(raw);
    const std::vector<absl::string_view> parts = absl::StrSplit(entry, ':');
    if (entry.empty() || parts.size() > 2) {
      return absl::InvalidArgumentError(
          absl::StrCat("length mix entry '", entry, "' is not TOKENS:WEIGHT (in \"", text, "\")"));
    }
    LengthBucket bucket;
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(parts[0]), &bucket.tokens)) {
      return absl::InvalidArgumentError(
          absl::StrCat("length mix entry '", entry, "': '", parts[0], "' is not an integer token count"));
    }
    if (bucket.tokens < 2) {
      return absl::InvalidArgumentError(absl::StrCat(
          "length mix entry '", entry, "': a sequence needs at least 2 tokens, got ", bucket.tokens));
    }
    bucket.weight = 1.0;
    if (parts.size() == 2 && !absl::SimpleAtod(absl::StripAsciiWhitespace(parts[1]), &bucket.weight)) {
      return absl::InvalidArgumentError(
          absl::StrCat("length mix entry '", entry, "': '", parts[1], "' is not a number"));
    }
    if (!std::isfinite(bucket.weight) || bucket.weight <= 0.0) {
      return absl::InvalidArgumentError(
          absl::StrCat("length mix entry '", entry, "': the weight must be a finite number > 0"));
    }
    for (const LengthBucket& seen : mix) {
      if (seen.tokens == bucket.tokens) {
        return absl::InvalidArgumentError(
            absl::StrCat("length mix lists ", bucket.tokens, " tokens more than once (in \"", text, "\")"));
      }
    }
    mix.push_back(bucket);
  }
  return mix;
}

std::string FormatLengthMix(const std::vector<LengthBucket>& mix) {
  return absl::StrJoin(mix, ",", [](std::string* out, const LengthBucket& b) {
    absl::StrAppend(out, b.tokens, ":", b.weight);
  });
}

LengthSampler::LengthSampler(std::vector<LengthBucket> mix) : mix_(std::move(mix)) {
  double total = 0.0;
  for (const LengthBucket& b : mix_) total += b.weight;
  double running = 0.0;
  cumulative_.reserve(mix_.size());
  for (const LengthBucket& b : mix_) {
    running += b.weight;
    cumulative_.push_back(running / total);
  }
}

int64_t LengthSampler::Sample(std::mt19937_64& rng) const {
  // 53 random bits -> a uniform double in [0, 1), the same on every platform (unlike
  // std::uniform_real_distribution, whose algorithm the standard leaves open).
  const double u = static_cast<double>(rng() >> 11) * 0x1.0p-53;
  const auto it = std::upper_bound(cumulative_.begin(), cumulative_.end(), u);
  // cumulative_.back() can round to just below 1; such draws belong to the last bucket.
  const size_t index =
      it == cumulative_.end() ? mix_.size() - 1 : static_cast<size_t>(it - cumulative_.begin());
  return mix_[index].tokens;
}

double LengthSampler::MeanTokens() const {
  double total = 0.0;
  double weighted = 0.0;
  for (const LengthBucket& b : mix_) {
    total += b.weight;
    weighted += static_cast<double>(b.tokens) * b.weight;
  }
  return weighted / total;
}

int64_t LengthSampler::MaxTokens() const {
  int64_t max_tokens = 0;
  for (const LengthBucket& b : mix_) max_tokens = std::max(max_tokens, b.tokens);
  return max_tokens;
}

}  // namespace load
}  // namespace scored
