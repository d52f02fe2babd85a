// gpt-oss's dense experts and expert biases (engine/model/gpt_oss_experts.h): the fused, transposed and
// interleaved gate_up_proj [E, H, 2I] and down_proj [E, I, H] become per-expert [out, in] linears whose
// DequantizeRows is transformers' gate_up_proj[e, :, 0::2]^T, [e, :, 1::2]^T and down_proj[e]^T exactly;
// the biases split the same way. Then the refusals. (The whole model against transformers:
// tests/fixtures/gpt-oss-trained-bf16 in reference_moe_fixtures_test.)
#include "engine/model/gpt_oss_experts.h"

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace scored {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kE = 2, kI = 3, kH = 4;

// A F32 view over `values` (which must outlive it).
TensorView F32View(const std::string& name, std::vector<int64_t> shape, const std::vector<float>& values) {
  TensorView t;
  t.name = name;
  t.dtype = DType::kF32;
  t.shape = std::move(shape);
  t.data = reinterpret_cast<const uint8_t*>(values.data());
  t.nbytes = static_cast<int64_t>(values.size() * sizeof(float));
  t.file = "mem.safetensors";
  return t;
}

// value(e, a, b) = 1000 e + 10 a + b: every element names its place.
std::vector<float> Numbered(int64_t e_count, int64_t rows, int64_t cols) {
  std::vector<float> v;
  for (int64_t e = 0; e < e_count; ++e)
    for (int64_t a = 0; a < rows; ++a)
      for (int64_t b = 0; b < cols; ++b) v.push_back(static_cast<float>(1000 * e + 10 * a + b));
  return v;
}

std::vector<float> Decoded(const LinearWeight& w) {
  std::vector<float> out(static_cast<size_t>(w.out_features * w.in_features));
  EXPECT_TRUE(w.DequantizeRows(0, w.out_features, out.data()).ok());
  return out;
}

TEST(GptOssDenseExperts, TransposedAndDeinterleaved) {
  const std::vector<float> gate_up = Numbered(kE, kH, 2 * kI);  // [E, H, 2I]
  const std::vector<float> down = Numbered(kE, kI, kH);         // [E, I, H]
  TranscodedBuffers buffers;
  absl::StatusOr<std::vector<ExpertWeights>> experts =
      SplitGptOssDenseExperts("m.experts", F32View("m.experts.gate_up_proj", {kE, kH, 2 * kI}, gate_up),
                              F32View("m.experts.down_proj", {kE, kI, kH}, down), kE, kI, kH, &buffers);
  ASSERT_TRUE(experts.ok()) << experts.status();
  ASSERT_EQ(experts->size(), static_cast<size_t>(kE));
  EXPECT_EQ(buffers.size(), 3u);
  for (int64_t e = 0; e < kE; ++e) {
    const ExpertWeights& x = (*experts)[static_cast<size_t>(e)];
    EXPECT_EQ(x.gate_proj.module, "m.experts." + std::to_string(e) + ".gate_proj");
    const std::vector<float> g = Decoded(x.gate_proj), u = Decoded(x.up_proj), d = Decoded(x.down_proj);
    for (int64_t i = 0; i < kI; ++i) {
      for (int64_t h = 0; h < kH; ++h) {
        // gate_proj[i, h] = gate_up[e, h, 2i], up_proj[i, h] = gate_up[e, h, 2i + 1]
        EXPECT_EQ(g[i * kH + h], 1000 * e + 10 * h + 2 * i);
        EXPECT_EQ(u[i * kH + h], 1000 * e + 10 * h + 2 * i + 1);
        // down_proj[h, i] = down[e, i, h]
        EXPECT_EQ(d[h * kI + i], 1000 * e + 10 * i + h);
      }
    }
  }
  // Biases: gate = gate_up_bias[e, 0::2], up = [e, 1::2], down = down_bias[e].
  const std::vector<float> gate_up_bias = Numbered(kE, 1, 2 * kI), down_bias = Numbered(kE, 1, kH);
  ASSERT_TRUE(SetGptOssExpertBiases(F32View("b.gate_up_proj_bias", {kE, 2 * kI}, gate_up_bias),
                                    F32View("b.down_proj_bias", {kE, kH}, down_bias), kI, kH, &*experts,
                                    &buffers)
                  .ok());
  for (int64_t e = 0; e < kE; ++e) {
    const ExpertWeights& x = (*experts)[static_cast<size_t>(e)];
    ASSERT_EQ(x.gate_proj.bias.NumElements(), kI);
    ASSERT_EQ(x.down_proj.bias.NumElements(), kH);
    for (int64_t i = 0; i < kI; ++i) {
      float g, u;
      std::memcpy(&g, x.gate_proj.bias.data + 4 * i, 4);
      std::memcpy(&u, x.up_proj.bias.data + 4 * i, 4);
      EXPECT_EQ(g, 1000 * e + 2 * i);
      EXPECT_EQ(u, 1000 * e + 2 * i + 1);
    }
    float d;
    std::memcpy(&d, x.down_proj.bias.data + 4 * (kH - 1), 4);
    EXPECT_EQ(d, 1000 * e + kH - 1);
  }
}

TEST(GptOssDenseExperts, RefusalsNameTheTensor) {
  const std::vector<float> gate_up = Numbered(kE, kH, 2 * kI), down = Numbered(kE, kI, kH);
  TranscodedBuffers buffers;
  // transformers 4's [E, 2I, H] (or any other shape) is not gpt-oss's layout.
  absl::StatusOr<std::vector<ExpertWeights>> bad =
      SplitGptOssDenseExperts("m.experts", F32View("m.experts.gate_up_proj", {kE, 2 * kI, kH}, gate_up),
                              F32View("m.experts.down_proj", {kE, kI, kH}, down), kE, kI, kH, &buffers);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("m.experts.gate_up_proj"));
  EXPECT_THAT(bad.status().message(), HasSubstr("[2, 4, 6]"));
  EXPECT_TRUE(buffers.empty());
  TensorView u8 = F32View("m.experts.down_proj", {kE, kI, kH}, down);
  u8.dtype = DType::kU8;
  bad = SplitGptOssDenseExperts("m.experts", F32View("m.experts.gate_up_proj", {kE, kH, 2 * kI}, gate_up), u8,
                                kE, kI, kH, &buffers);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("m.experts.down_proj"));
  std::vector<ExpertWeights> experts(static_cast<size_t>(kE));
  const std::vector<float> bias = Numbered(kE, 1, kI);
  const absl::Status status =
      SetGptOssExpertBiases(F32View("b.gate_up_proj_bias", {kE, kI}, bias),
                            F32View("b.down_proj_bias", {kE, kH}, bias), kI, kH, &experts, &buffers);
  EXPECT_THAT(status.message(), HasSubstr("b.gate_up_proj_bias"));
  EXPECT_TRUE(buffers.empty());
}

}  // namespace
}  // namespace scored
