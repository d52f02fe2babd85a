// RopeInvFreq (engine/model/rope_freq.h) against the RoPE frequency formula evaluated here, independently,
// in double: plain, linear, llama3 and yarn scaling, over every index of real head dims and thetas; and yarn
// bit for bit against transformers' own tables (tests/fixtures/rope_yarn_golden.json, made by
// scripts/fixtures/make_rope_goldens.py from _compute_yarn_parameters), read through ParseModelConfig from
// the same config.json bodies, so the parsing of every yarn field and default is checked with it.
//
// Tolerance: the function reproduces transformers' fp32 computation, whose first rounding is the exponent
// 2i/d in fp32. That alone moves theta^(2i/d) by up to 2^-24 * ln(theta) relative (8e-7 at theta 5e5,
// 9e-7 at 1e6); the fp32 power, reciprocal, division by the factor and the llama3 blend add a few 2^-24
// each. kInvFreqRelTol = 2e-6 covers that and still fails any formula error (a wrong band, factor or
// exponent is off by far more).
#include "engine/model/rope_freq.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "engine/model/config.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace scored {
namespace {

constexpr double kInvFreqRelTol = 2e-6;
constexpr double kPi = 3.14159265358979323846;

ModelConfig MakeConfig(int64_t head_dim, double theta) {
  ModelConfig config;
  config.head_dim = head_dim;
  config.rope_theta = theta;
  return config;
}

// theta^(-2i/d), the unscaled frequency, in double.
double PlainInvFreq(double theta, int64_t i, int64_t d) {
  return std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(d));
}

// The llama3 scaling of one frequency (transformers' _compute_llama3_parameters), in double.
double Llama3InvFreq(double inv, const RopeScaling& s) {
  const double orig = static_cast<double>(s.original_max_position_embeddings);
  const double wavelen = 2.0 * kPi / inv;
  if (wavelen < orig / s.high_freq_factor) return inv;
  if (wavelen > orig / s.low_freq_factor) return inv / s.factor;
  const double smooth = (orig / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
  return (1.0 - smooth) * inv / s.factor + smooth * inv;
}

void ExpectNearFormula(const ModelConfig& config) {
  const std::vector<float> f = RopeInvFreq(config);
  ASSERT_EQ(static_cast<int64_t>(f.size()), config.head_dim / 2);
  for (int64_t i = 0; i < config.head_dim / 2; ++i) {
    double expected = PlainInvFreq(config.rope_theta, i, config.head_dim);
    if (config.rope_scaling.type == RopeType::kLinear) expected /= config.rope_scaling.factor;
    if (config.rope_scaling.type == RopeType::kLlama3)
      expected = Llama3InvFreq(expected, config.rope_scaling);
    EXPECT_NEAR(f[i], expected, expected * kInvFreqRelTol)
        << "i " << i << ", head_dim " << config.head_dim << ", theta " << config.rope_theta;
  }
}

TEST(RopeInvFreq, PlainSmallCaseIsPowersOfTheta) {
  const std::vector<float> f = RopeInvFreq(MakeConfig(8, 10000.0));
  ASSERT_EQ(f.size(), 4u);
  const double expected[] = {1.0, 0.1, 0.01, 0.001};  // 10000^(-2i/8)
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(f[i], expected[i], expected[i] * kInvFreqRelTol) << i;
  EXPECT_EQ(f[0], 1.0f);  // theta^0 is exact
}

// Head dims and thetas of the supported families: Llama-2 (128, 1e4), Llama-3 (128, 5e5), Qwen2.5 (64, 1e6),
// Qwen3 (128, 1e6), stories260K (8, 1e4).
TEST(RopeInvFreq, PlainMatchesFormula) {
  for (const auto& [head_dim, theta] :
       {std::pair<int64_t, double>{8, 1e4}, {64, 1e6}, {128, 1e4}, {128, 5e5}, {128, 1e6}, {256, 1e4}}) {
    ExpectNearFormula(MakeConfig(head_dim, theta));
  }
}

TEST(RopeInvFreq, LinearMatchesFormula) {
  for (const double factor : {2.0, 4.0, 8.0}) {
    ModelConfig config = MakeConfig(64, 10000.0);
    config.rope_scaling.type = RopeType::kLinear;
    config.rope_scaling.factor = factor;
    ExpectNearFormula(config);
  }
}

// Llama-3.1 (factor 8, low 1, high 4, original context 8192) and Llama-3.2 (factor 32) parameters.
TEST(RopeInvFreq, Llama3MatchesFormula) {
  for (const double factor : {8.0, 32.0}) {
    ModelConfig config = MakeConfig(128, 500000.0);
    config.rope_scaling.type = RopeType::kLlama3;
    config.rope_scaling.factor = factor;
    config.rope_scaling.low_freq_factor = 1.0;
    config.rope_scaling.high_freq_factor = 4.0;
    config.rope_scaling.original_max_position_embeddings = 8192;
    ExpectNearFormula(config);
  }
}

// The three llama3 bands are all exercised: the band edges worked out by hand for the Llama-3.1
// parameters are wavelengths 1956 (i=28) < 2048 <= 2402 (i=29) and 6695 (i=34) <= 8192 < 8219 (i=35).
TEST(RopeInvFreq, Llama3BandEdges) {
  ModelConfig config = MakeConfig(128, 500000.0);
  config.rope_scaling.type = RopeType::kLlama3;
  config.rope_scaling.factor = 8.0;
  config.rope_scaling.low_freq_factor = 1.0;
  config.rope_scaling.high_freq_factor = 4.0;
  config.rope_scaling.original_max_position_embeddings = 8192;
  const std::vector<float> f = RopeInvFreq(config);
  ASSERT_EQ(f.size(), 64u);
  EXPECT_NEAR(f[28], PlainInvFreq(500000.0, 28, 128), 1e-8);        // high band: unchanged
  EXPECT_LT(f[29], PlainInvFreq(500000.0, 29, 128) * 0.999);        // blend: below unscaled
  EXPECT_GT(f[34], PlainInvFreq(500000.0, 34, 128) / 8.0 * 1.001);  // blend: above scaled
  EXPECT_NEAR(f[35], PlainInvFreq(500000.0, 35, 128) / 8.0, 1e-9);  // low band: divided by 8
}

// longrope with partial rotary (Phi-3.5-mini-shaped: head_dim 96 at full rotary, here a partial 0.75 of
// 128 = 96): 1 / (factor_i * theta^(2i/rotary_dim)), short factors up to original_max_position_embeddings
// tokens, long ones beyond; attention scaling only for longrope.
TEST(RopeInvFreq, LongropePicksFactorsBySequenceLength) {
  ModelConfig config = MakeConfig(128, 10000.0);
  config.rotary_dim = 96;
  config.rope_scaling.type = RopeType::kLongrope;
  config.rope_scaling.original_max_position_embeddings = 4096;
  config.rope_scaling.attention_factor = 1.19;
  for (int64_t i = 0; i < 48; ++i) {
    config.rope_scaling.short_factor.push_back(1.0 + 0.02 * static_cast<double>(i));
    config.rope_scaling.long_factor.push_back(1.0 + 1.3 * static_cast<double>(i));
  }
  const std::vector<float> base = RopeInvFreq(config);
  const std::vector<float> at_original = RopeInvFreqForLength(config, 4096);
  const std::vector<float> beyond = RopeInvFreqForLength(config, 4097);
  ASSERT_EQ(base.size(), 48u);
  EXPECT_EQ(base, at_original);  // seq_len <= original: short factors (transformers: seq_len > original)
  for (int64_t i = 0; i < 48; ++i) {
    const double plain = PlainInvFreq(10000.0, i, 96);
    const double s = plain / config.rope_scaling.short_factor[i];
    const double l = plain / config.rope_scaling.long_factor[i];
    EXPECT_NEAR(base[i], s, s * kInvFreqRelTol) << i;
    EXPECT_NEAR(beyond[i], l, l * kInvFreqRelTol) << i;
  }
  EXPECT_FLOAT_EQ(RopeAttentionScaling(config), 1.19f);
  config.rope_scaling.type = RopeType::kDefault;
  EXPECT_EQ(RopeAttentionScaling(config), 1.0f);
  // Without longrope the length changes nothing.
  EXPECT_EQ(RopeInvFreqForLength(config, 1 << 20), RopeInvFreq(config));
}

// yarn in double (transformers' _compute_yarn_parameters with every rounding removed).
double YarnInvFreq(const RopeScaling& s, double theta, int64_t i, int64_t d) {
  const auto correction_dim = [&](double rotations) {
    return (static_cast<double>(d) *
            std::log(static_cast<double>(s.original_max_position_embeddings) / (rotations * 2.0 * kPi))) /
           (2.0 * std::log(theta));
  };
  double low = correction_dim(s.beta_fast), high = correction_dim(s.beta_slow);
  if (s.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(d - 1));
  if (low == high) high += 0.001;
  const double ramp = std::min(1.0, std::max(0.0, (static_cast<double>(i) - low) / (high - low)));
  const double plain = PlainInvFreq(theta, i, d);
  return plain / s.factor * ramp + plain * (1.0 - ramp);
}

// DeepSeek-V3's and gpt-oss's yarn (truncated and not) against the double formula: low dims extrapolate
// (unchanged), high dims interpolate (divided by factor), a ramp between.
// Gemma 4's proportional RoPE (_compute_proportional_rope_parameters): over the whole head of 512, the first
// int(0.25 * 512 // 2) = 64 frequencies are the default ones of head_dim 512, the other 192 are 0; a factor
// divides them all.
TEST(RopeInvFreq, ProportionalRotatesAQuarterOfTheHead) {
  ModelConfig config = MakeConfig(512, 1e6);
  config.rotary_dim = 512;
  config.rope_scaling.type = RopeType::kProportional;
  config.rope_scaling.proportion = 0.25;
  const std::vector<float> plain = RopeInvFreq(MakeConfig(512, 1e6));
  std::vector<float> inv = RopeInvFreq(config);
  ASSERT_EQ(inv.size(), 256u);
  for (int64_t i = 0; i < 256; ++i) EXPECT_EQ(inv[i], i < 64 ? plain[i] : 0.0f) << i;
  config.rope_scaling.factor = 8.0;
  config.rope_scaling.proportion = 0.3;  // int(0.3 * 512 // 2) = int(76.8 // 1) = 76
  inv = RopeInvFreq(config);
  for (int64_t i = 0; i < 256; ++i) EXPECT_EQ(inv[i], i < 76 ? plain[i] / 8.0f : 0.0f) << i;
  EXPECT_EQ(RopeAttentionScaling(config), 1.0f);
}

TEST(RopeInvFreq, YarnMatchesFormula) {
  for (const bool truncate : {true, false}) {
    ModelConfig config = MakeConfig(64, truncate ? 10000.0 : 150000.0);
    RopeScaling& s = config.rope_scaling;
    s.type = RopeType::kYarn;
    s.factor = truncate ? 40.0 : 32.0;
    s.original_max_position_embeddings = 4096;
    s.truncate = truncate;
    const std::vector<float> f = RopeInvFreq(config);
    ASSERT_EQ(f.size(), 32u);
    for (int64_t i = 0; i < 32; ++i) {
      const double expected = YarnInvFreq(s, config.rope_theta, i, 64);
      EXPECT_NEAR(f[i], expected, expected * kInvFreqRelTol) << "i " << i << ", truncate " << truncate;
    }
    EXPECT_FLOAT_EQ(f[0], 1.0f);                                                    // extrapolated
    EXPECT_NEAR(f[31], PlainInvFreq(config.rope_theta, 31, 64) / s.factor, 1e-12);  // interpolated
  }
}

std::vector<uint32_t> Bits(const std::vector<float>& v) {
  std::vector<uint32_t> out(v.size());
  std::memcpy(out.data(), v.data(), v.size() * sizeof(float));
  return out;
}

// torch evaluates theta^e with its vectorized fp32 pow (within 1 ulp, not always the correctly rounded value
// this file's double pow gives), so a few frequencies of a table may differ by one ulp: measured, 2 of 32 for
// theta 150000 and 1 of 32 for theta 50000, none in the other 7 cases. Everything after the power (the ramp,
// the blend, attention_factor) is bit for bit.
TEST(RopeInvFreq, YarnEqualsTransformersToTheUlp) {
  std::ifstream in(std::string(SCORED_FIXTURES_DIR) + "/rope_yarn_golden.json");
  ASSERT_TRUE(in.good()) << "tests/fixtures/rope_yarn_golden.json";
  const nlohmann::json golden = nlohmann::json::parse(in);
  ASSERT_GE(golden["cases"].size(), 9u);
  int cases_off = 0;
  for (const nlohmann::json& c : golden["cases"]) {
    const std::string name = c["name"].get<std::string>();
    const absl::StatusOr<ModelConfig> config = ParseModelConfig(c["config"].dump(), name);
    ASSERT_TRUE(config.ok()) << name << ": " << config.status();
    ASSERT_EQ(config->rope_scaling.type, RopeType::kYarn) << name;
    const std::vector<uint32_t> want = c["inv_freq_bits"].get<std::vector<uint32_t>>();
    const std::vector<uint32_t> got = Bits(RopeInvFreq(*config));
    ASSERT_EQ(got.size(), want.size()) << name;
    int off_by_one = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      const int64_t ulps = static_cast<int64_t>(got[i]) - static_cast<int64_t>(want[i]);  // same sign: ulps
      EXPECT_LE(std::abs(ulps), 1) << name << " i " << i;
      off_by_one += ulps != 0 ? 1 : 0;
    }
    if (off_by_one > 0)
      std::printf("%s: %d of %zu frequencies one ulp off\n", name.c_str(), off_by_one, got.size());
    EXPECT_LE(off_by_one, static_cast<int>(got.size()) / 8) << name;
    cases_off += off_by_one > 0 ? 1 : 0;
    EXPECT_EQ(RopeAttentionScaling(*config), static_cast<float>(c["attention_factor"].get<double>())) << name;
    EXPECT_TRUE(absl::StrContains(DescribeRope(*config), "rope_scaling yarn factor"))
        << DescribeRope(*config);
  }
  EXPECT_LE(cases_off, 3) << "more than torch's pow rounding";
}

}  // namespace
}  // namespace scored
