// RoPE frequencies (contract: rope_freq.h). Compiled with -ffp-contract=off (engine/model/CMakeLists.txt):
// every fp32 operation below rounds on its own, as in transformers.
#include "engine/model/rope_freq.h"

#include <algorithm>
#include <cmath>

namespace scored {
namespace {

// fp32(theta^e_i), e_i = fp32(2i) / fp32(dim): the power evaluated in double, then rounded.
float ThetaPower(float theta, int64_t i, int64_t dim) {
  const float exponent = static_cast<float>(2 * i) / static_cast<float>(dim);
  return static_cast<float>(std::pow(static_cast<double>(theta), static_cast<double>(exponent)));
}

// The dimension at which `rotations` full turns fit in the original context (_compute_yarn_parameters'
// find_correction_dim), in double as Python computes it.
double YarnCorrectionDim(double rotations, int64_t dim, double base, double original) {
  return (static_cast<double>(dim) * std::log(original / (rotations * 2.0 * M_PI))) / (2.0 * std::log(base));
}

// yarn: the blend of extrapolation (theta^-e) and interpolation (theta^-e / factor) frequencies by a
// linear ramp over [low, high], each step in fp32 as torch runs it; low, high and the ramp's bounds in
// double as Python computes them.
std::vector<float> YarnInvFreq(const ModelConfig& config, int64_t dim) {
  const RopeScaling& s = config.rope_scaling;
  const double base = config.rope_theta;
  const double original = static_cast<double>(s.original_max_position_embeddings);
  double low = YarnCorrectionDim(s.beta_fast, dim, base, original);
  double high = YarnCorrectionDim(s.beta_slow, dim, base, original);
  if (s.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(dim - 1));
  if (low == high) high += 0.001;  // linear_ramp_factor's guard against a zero-width ramp
  const float low_f = static_cast<float>(low), width = static_cast<float>(high - low);
  const float factor = static_cast<float>(s.factor);
  const float theta = static_cast<float>(base);
  std::vector<float> inv_freq(static_cast<size_t>(dim / 2));
  for (int64_t i = 0; i < dim / 2; ++i) {
    const float power = ThetaPower(theta, i, dim);
    const float extrapolation = 1.0f / power;
    const float interpolation = 1.0f / (factor * power);
    const float ramp = std::clamp((static_cast<float>(i) - low_f) / width, 0.0f, 1.0f);
    const float extrapolation_factor = 1.0f - ramp;
    inv_freq[i] = interpolation * (1.0f - extrapolation_factor) + extrapolation * extrapolation_factor;
  }
  return inv_freq;
}

}  // namespace

std::vector<float> RopeInvFreq(const ModelConfig& config) { return RopeInvFreqForLength(config, 0); }

float RopeAttentionScaling(const ModelConfig& config) {
  const RopeType t = config.rope_scaling.type;
  return t == RopeType::kLongrope || t == RopeType::kYarn
             ? static_cast<float>(config.rope_scaling.attention_factor)
             : 1.0f;
}

std::vector<float> RopeInvFreqForLength(const ModelConfig& config, int64_t seq_len) {
  const int64_t head_dim = config.rotary_dim > 0 ? config.rotary_dim : config.head_dim;
  if (config.rope_scaling.type == RopeType::kYarn) return YarnInvFreq(config, head_dim);
  const int64_t half = head_dim / 2;
  std::vector<float> inv_freq(half);
  const float theta = static_cast<float>(config.rope_theta);
  const RopeScaling& scaling = config.rope_scaling;
  const std::vector<double>* ext = nullptr;  // longrope's factors
  if (scaling.type == RopeType::kLongrope) {
    ext = seq_len > scaling.original_max_position_embeddings ? &scaling.long_factor : &scaling.short_factor;
  }
  for (int64_t i = 0; i < half; ++i) {
    const float power = ThetaPower(theta, i, head_dim);
    inv_freq[i] = ext == nullptr ? 1.0f / power : 1.0f / (static_cast<float>((*ext)[i]) * power);
  }
  const float factor = static_cast<float>(scaling.factor);
  if (scaling.type == RopeType::kProportional) {
    // int(proportion * head_dim // 2) rotated frequencies (Python's floor division of a float), the rest 0
    const int64_t angles =
        static_cast<int64_t>(std::floor(scaling.proportion * static_cast<double>(head_dim) / 2.0));
    for (int64_t i = angles; i < half; ++i) inv_freq[i] = 0.0f;
    for (float& f : inv_freq) f = f / factor;
  } else if (scaling.type == RopeType::kLinear) {
    for (float& f : inv_freq) f = f / factor;
  } else if (scaling.type == RopeType::kLlama3) {
    const float low = static_cast<float>(scaling.low_freq_factor);
    const float high = static_cast<float>(scaling.high_freq_factor);
    const float old_context = static_cast<float>(scaling.original_max_position_embeddings);
    const float low_freq_wavelen = old_context / low;
    const float high_freq_wavelen = old_context / high;
    const float two_pi = static_cast<float>(2.0 * M_PI);
    for (float& f : inv_freq) {
      const float wavelen = two_pi / f;
      if (wavelen > low_freq_wavelen) {
        f = f / factor;
      } else if (!(wavelen < high_freq_wavelen)) {
        const float smooth = (old_context / wavelen - low) / (high - low);
        f = (1.0f - smooth) * f / factor + smooth * f;
      }
    }
  }
  return inv_freq;
}

}  // namespace scored
