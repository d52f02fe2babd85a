// gpt-oss's MXFP4 expert layout (engine/model/gpt_oss_mxfp4.h) against transformers' own dequantization:
// tests/fixtures/gpt-oss-mxfp4-experts (scripts/fixtures/make_gpt_oss_mxfp4.py) holds one layer's stored
// blocks / scales and what convert_moe_packed_tensors(..., dtype=torch.float32) made of them. Every expert's
// gate, up and down, split by SplitGptOssMxfp4Experts and decoded by the existing MXFP4 decode
// (LinearWeight::DequantizeRows), must give those floats bit for bit. Then every refusal, naming the tensor.
#include "engine/model/gpt_oss_mxfp4.h"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "engine/model/safetensors.h"
#include "engine/model/weights.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace scored {
namespace {

using ::testing::HasSubstr;

const std::string kDir = std::string(SCORED_FIXTURES_DIR) + "/gpt-oss-mxfp4-experts";
const std::string kExperts = "model.layers.0.mlp.experts";
constexpr int64_t kE = 3, kI = 64, kH = 96;

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

float F32At(const TensorView& t, int64_t i) {
  float f;
  std::memcpy(&f, t.data + i * 4, sizeof f);
  return f;
}

class GptOssMxfp4Test : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<TensorStore>> store = TensorStore::Open(kDir);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
    absl::StatusOr<GptOssMxfp4Tensors> t = GetGptOssMxfp4Tensors(*store_, kExperts);
    ASSERT_TRUE(t.ok()) << t.status();
    tensors_ = *t;
  }

  // The refusal of `t` (with the fixture's E, I, H unless given): its message; "ok" when accepted. Nothing
  // may be left in the buffers by a refused call.
  std::string ErrorOf(const GptOssMxfp4Tensors& t, int64_t e = kE, int64_t i = kI, int64_t h = kH) {
    TranscodedBuffers buffers;
    absl::StatusOr<std::vector<ExpertWeights>> experts = SplitGptOssMxfp4Experts(t, e, i, h, &buffers);
    if (experts.ok()) return "ok";
    EXPECT_EQ(experts.status().code(), absl::StatusCode::kInvalidArgument) << experts.status();
    EXPECT_TRUE(buffers.empty());
    return std::string(experts.status().message());
  }

  std::unique_ptr<TensorStore> store_;
  GptOssMxfp4Tensors tensors_;
};

// The whole fixture: 3 experts x (gate [64, 96] + up [64, 96] + down [96, 64]) = 55,296 values, each
// compared as a bit pattern (so -0 from nibble 8 counts).
TEST_F(GptOssMxfp4Test, DecodesBitForBitAsTransformers) {
  absl::StatusOr<std::unique_ptr<SafetensorsFile>> ref_file =
      SafetensorsFile::Open(kDir + "/reference_dequant.safetensors");
  ASSERT_TRUE(ref_file.ok()) << ref_file.status();
  const auto& ref = (*ref_file)->tensors();
  ASSERT_EQ(ref.count(kExperts + ".gate_up_proj"), 1u);
  ASSERT_EQ(ref.count(kExperts + ".down_proj"), 1u);
  const TensorView& gate_up = ref.at(kExperts + ".gate_up_proj");  // F32 [E, H, 2I]
  const TensorView& down = ref.at(kExperts + ".down_proj");        // F32 [E, I, H]
  ASSERT_EQ(gate_up.dtype, DType::kF32);
  ASSERT_EQ(gate_up.shape, (std::vector<int64_t>{kE, kH, 2 * kI}));
  ASSERT_EQ(down.dtype, DType::kF32);
  ASSERT_EQ(down.shape, (std::vector<int64_t>{kE, kI, kH}));

  TranscodedBuffers buffers;
  absl::StatusOr<std::vector<ExpertWeights>> experts =
      SplitGptOssMxfp4Experts(tensors_, kE, kI, kH, &buffers);
  ASSERT_TRUE(experts.ok()) << experts.status();
  ASSERT_EQ(experts->size(), static_cast<size_t>(kE));
  EXPECT_EQ(buffers.size(), 4u);

  int64_t compared = 0, equal = 0, nonzero = 0;
  for (int64_t e = 0; e < kE; ++e) {
    const ExpertWeights& x = (*experts)[static_cast<size_t>(e)];
    // expected(o, k) for each linear [out, in]: transformers' parameters transposed (gate / up: its
    // columns 0::2 / 1::2).
    struct Case {
      const LinearWeight* w;
      int64_t out, in;
      const TensorView* ref;
      int64_t ref_cols, col_stride, col_offset;
    };
    for (const Case& c :
         {Case{&x.gate_proj, kI, kH, &gate_up, 2 * kI, 2, 0},
          Case{&x.up_proj, kI, kH, &gate_up, 2 * kI, 2, 1}, Case{&x.down_proj, kH, kI, &down, kH, 1, 0}}) {
      SCOPED_TRACE(c.w->module);
      ASSERT_EQ(c.w->format, WeightFormat::kMxfp4PackQuantized);
      ASSERT_EQ(c.w->out_features, c.out);
      ASSERT_EQ(c.w->in_features, c.in);
      std::vector<float> got(static_cast<size_t>(c.out * c.in), NAN);  // poisoned
      ASSERT_TRUE(c.w->DequantizeRows(0, c.out, got.data()).ok());
      int failures = 0;
      for (int64_t o = 0; o < c.out; ++o) {
        for (int64_t k = 0; k < c.in; ++k) {
          const int64_t ri = (e * c.in + k) * c.ref_cols + c.col_stride * o + c.col_offset;
          const float want = F32At(*c.ref, ri);
          const float have = got[static_cast<size_t>(o * c.in + k)];
          ++compared;
          nonzero += want != 0.0f;
          if (Bits(have) == Bits(want)) {
            ++equal;
          } else if (++failures <= 5) {
            ADD_FAILURE() << "row " << o << " column " << k << ": " << have << " != transformers' " << want;
          }
        }
      }
    }
  }
  std::printf("gpt-oss MXFP4 experts: %lld of %lld values bit for bit as transformers (%lld nonzero)\n",
              static_cast<long long>(equal), static_cast<long long>(compared),
              static_cast<long long>(nonzero));
  EXPECT_EQ(compared, kE * (2 * kI * kH + kH * kI));
  EXPECT_EQ(equal, compared);
  // Random FP4 codes: 2 of 16 are +-0, so a decode of all zeros could not pass as the reference.
  EXPECT_GT(nonzero, compared * 3 / 4);
}

// Names, parameters and storage: down views the checkpoint in place, gate and up live in the buffers.
TEST_F(GptOssMxfp4Test, ExpertLinearsNamedAndStoredAsDocumented) {
  TranscodedBuffers buffers;
  absl::StatusOr<std::vector<ExpertWeights>> experts =
      SplitGptOssMxfp4Experts(tensors_, kE, kI, kH, &buffers);
  ASSERT_TRUE(experts.ok()) << experts.status();
  auto in_buffers = [&](const TensorView& t) {
    for (const auto& b : buffers) {
      if (t.data >= b->data() && t.data + t.nbytes <= b->data() + b->size()) return true;
    }
    return false;
  };
  for (int64_t e = 0; e < kE; ++e) {
    const ExpertWeights& x = (*experts)[static_cast<size_t>(e)];
    const std::string m = kExperts + "." + std::to_string(e) + ".";
    EXPECT_EQ(x.gate_proj.module, m + "gate_proj");
    EXPECT_EQ(x.up_proj.module, m + "up_proj");
    EXPECT_EQ(x.down_proj.module, m + "down_proj");
    for (const LinearWeight* w : {&x.gate_proj, &x.up_proj}) {
      EXPECT_EQ(w->num_bits, 4);
      EXPECT_EQ(w->strategy, QuantStrategy::kGroup);
      EXPECT_EQ(w->group_size, 32);
      EXPECT_EQ(w->weight_packed.shape, (std::vector<int64_t>{kI, kH / 2}));
      EXPECT_EQ(w->weight_scale.shape, (std::vector<int64_t>{kI, kH / 32}));
      EXPECT_TRUE(in_buffers(w->weight_packed)) << w->module;
      EXPECT_TRUE(in_buffers(w->weight_scale)) << w->module;
      EXPECT_EQ(w->StoredBytes(), kI * kH / 2 + kI * kH / 32);
    }
    EXPECT_EQ(x.down_proj.weight_packed.data, tensors_.down_blocks.data + e * kH * kI / 2);
    EXPECT_EQ(x.down_proj.weight_scale.data, tensors_.down_scales.data + e * kH * kI / 32);
    EXPECT_EQ(x.down_proj.weight_packed.shape, (std::vector<int64_t>{kH, kI / 2}));
    EXPECT_EQ(x.down_proj.weight_scale.shape, (std::vector<int64_t>{kH, kI / 32}));
    EXPECT_THAT(x.down_proj.weight_packed.name, HasSubstr("down_proj_blocks"));
    EXPECT_THAT(x.up_proj.weight_scale.name, HasSubstr("gate_up_proj_scales"));
  }
}

TEST_F(GptOssMxfp4Test, RefusesAWrongDtypeNamingTheTensor) {
  GptOssMxfp4Tensors t = tensors_;
  t.gate_up_scales.dtype = DType::kI8;
  EXPECT_THAT(ErrorOf(t), HasSubstr("'" + kExperts + ".gate_up_proj_scales' has dtype I8, expected U8"));
  t = tensors_;
  t.down_blocks.dtype = DType::kF32;
  EXPECT_THAT(ErrorOf(t), HasSubstr("'" + kExperts + ".down_proj_blocks' has dtype F32"));
}

TEST_F(GptOssMxfp4Test, RefusesAWrongShapeNamingTheTensor) {
  // Blocks of 8 bytes (the same bytes as [E, 2I, H/32, 16]): the last dimension must be 16.
  GptOssMxfp4Tensors t = tensors_;
  t.gate_up_blocks.shape = {kE, 2 * kI, kH / 16, 8};
  EXPECT_THAT(ErrorOf(t), HasSubstr("'" + kExperts + ".gate_up_proj_blocks' has shape [3, 128, 6, 8], " +
                                    "expected [3, 128, 3, 16]"));
  // Scales that are not the blocks' shape without its last dimension.
  t = tensors_;
  t.down_scales.shape = {kE, kI / 32, kH};
  EXPECT_THAT(ErrorOf(t), HasSubstr("'" + kExperts + ".down_proj_scales' has shape [3, 2, 96], " +
                                    "expected [3, 96, 2]"));
  // Tensors that disagree with the E, I, H given.
  EXPECT_THAT(ErrorOf(tensors_, kE - 1), HasSubstr("'" + kExperts + ".gate_up_proj_blocks' has shape"));
  EXPECT_THAT(ErrorOf(tensors_, kE, /*i=*/kH, /*h=*/kI),
              HasSubstr("'" + kExperts + ".gate_up_proj_blocks' has shape"));
  // A byte count that disagrees with the shape (a view made by hand).
  t = tensors_;
  t.down_scales.nbytes -= 1;
  EXPECT_THAT(ErrorOf(t), HasSubstr("'" + kExperts + ".down_proj_scales' holds 575 bytes"));
  // An absent tensor.
  t = tensors_;
  t.down_blocks.data = nullptr;
  EXPECT_THAT(ErrorOf(t),
              HasSubstr("down_proj_blocks (tensor '" + kExperts + ".down_proj_blocks') is absent"));
}

TEST_F(GptOssMxfp4Test, RefusesSizesNotMultiplesOf32) {
  EXPECT_THAT(
      ErrorOf(tensors_, kE, kI, 100),
      HasSubstr(kExperts + ": gpt-oss MXFP4 experts: hidden_size 100 is not a positive multiple of 32"));
  EXPECT_THAT(ErrorOf(tensors_, kE, 48, kH),
              HasSubstr("intermediate_size 48 is not a positive multiple of 32"));
  EXPECT_THAT(ErrorOf(tensors_, kE, 0, kH),
              HasSubstr("intermediate_size 0 is not a positive multiple of 32"));
  EXPECT_THAT(ErrorOf(tensors_, 0), HasSubstr("num_experts 0 < 1"));
  EXPECT_EQ(ErrorOf(tensors_), "ok");
}

// One E8M0 scale of 255 in either scales tensor, at its last element and in the middle.
TEST_F(GptOssMxfp4Test, RefusesTheE8M0NaNCodeNamingTheTensorAndIndex) {
  for (TensorView GptOssMxfp4Tensors::*field :
       {&GptOssMxfp4Tensors::gate_up_scales, &GptOssMxfp4Tensors::down_scales}) {
    const TensorView& original = tensors_.*field;
    for (const int64_t index : {original.nbytes - 1, original.nbytes / 2 + 1}) {
      std::vector<uint8_t> scales(original.data, original.data + original.nbytes);
      ASSERT_NE(scales[static_cast<size_t>(index)], 255);
      scales[static_cast<size_t>(index)] = 255;
      GptOssMxfp4Tensors t = tensors_;
      (t.*field).data = scales.data();
      EXPECT_THAT(ErrorOf(t), HasSubstr("tensor '" + original.name +
                                        "' holds the E8M0 NaN code 255 at index " + std::to_string(index)));
    }
  }
}

TEST_F(GptOssMxfp4Test, MissingTensorsAreNotFound) {
  absl::StatusOr<GptOssMxfp4Tensors> t = GetGptOssMxfp4Tensors(*store_, "model.layers.1.mlp.experts");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(t.status().message()), HasSubstr("model.layers.1.mlp.experts.gate_up_proj_blocks"));
}

}  // namespace
}  // namespace scored
