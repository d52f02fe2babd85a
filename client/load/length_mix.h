// Request-length mixes for scored-load: "64:0.5,512:0.4,2048:0.1" means 50% of requests have 64 tokens,
// 40% have 512 and 10% have 2048.
//
// Thread-safety: LengthSampler is immutable after construction; Sample() may be called concurrently
// with distinct generators.
#ifndef SCORED_CLIENT_LOAD_LENGTH_MIX_H_
#define SCORED_CLIENT_LOAD_LENGTH_MIX_H_

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace scored {
namespace load {

// One entry of a mix: sequences of `tokens` ids (BOS included), drawn with relative weight `weight`.
struct LengthBucket {
  int64_t tokens = 0;
  double weight = 0.0;
};

// Parses "TOKENS:WEIGHT[,TOKENS:WEIGHT...]" (spaces around items are ignored). A bare "TOKENS" entry
// has weight 1. Weights are relative (they need not sum to 1). INVALID_ARGUMENT, naming the entry, for:
// an empty mix, tokens < 2 (a sequence needs one context and one scored token), a weight that is not
// a finite number > 0, a repeated token count, or malformed text.
absl::StatusOr<std::vector<LengthBucket>> ParseLengthMix(absl::string_view text);

// The canonical text of a mix ("64:0.5,512:0.4"), weights printed with up to 6 significant digits.
std::string FormatLengthMix(const std::vector<LengthBucket>& mix);

// Draws token counts with probability weight / sum(weights).
class LengthSampler {
 public:
  // `mix` must be valid (as ParseLengthMix returns).
  explicit LengthSampler(std::vector<LengthBucket> mix);

  // One token count of the mix. Uses one draw of `rng`.
  int64_t Sample(std::mt19937_64& rng) const;

  // Expected tokens per request: sum(tokens * weight) / sum(weights).
  double MeanTokens() const;
  // Largest token count of the mix.
  int64_t MaxTokens() const;
  const std::vector<LengthBucket>& mix() const { return mix_; }

 private:
  std::vector<LengthBucket> mix_;
  std::vector<double> cumulative_;  // [mix_.size()] running sums of the weights, divided by their total
};

}  // namespace load
}  // namespace scored

#endif  // SCORED_CLIENT_LOAD_LENGTH_MIX_H_
