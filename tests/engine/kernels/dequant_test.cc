// Dequantization vs LinearWeight::DequantizeRows (engine/model), bit for bit: fp32 output equals the
// oracle's fp32 values, bf16 output equals FloatToBf16 of them. Synthetic LinearWeights over host buffers
// cover every format, strategy and scale dtype; the committed compressed-tensors fixtures
// (tests/fixtures, made with the real llm-compressor) cover real checkpoints.
#include "engine/kernels/dequant.h"

#include <cuda_runtime_api.h>
#include <dirent.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "engine/base/dtype.h"
#include "engine/model/weights.h"
#include "tests/engine/kernels/kernel_test_util.h"

namespace scored::kernels {
namespace {

using testing::DeviceArray;

class DequantTest : public testing::GpuTest {};

// Host bytes of one tensor plus a TensorView over them.
struct HostTensor {
  std::vector<uint8_t> bytes;
  TensorView view;
};

template <typename T>
std::unique_ptr<HostTensor> MakeTensor(const std::string& name, DType dtype, std::vector<int64_t> shape,
                                       const std::vector<T>& values) {
  auto t = std::make_unique<HostTensor>();
  t->bytes.resize(values.size() * sizeof(T));
  std::memcpy(t->bytes.data(), values.data(), t->bytes.size());
  t->view.name = name;
  t->view.dtype = dtype;
  t->view.shape = std::move(shape);
  t->view.data = t->bytes.data();
  t->view.nbytes = static_cast<int64_t>(t->bytes.size());
  t->view.file = "synthetic";
  return t;
}

std::vector<uint16_t> Bf16Scales(size_t n, uint32_t seed) {
  std::vector<float> f = testing::RandomFloats(n, seed, 0.001f, 0.05f);
  std::vector<uint16_t> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = FloatToBf16(i % 3 == 0 ? -f[i] : f[i]);
  return out;
}

std::vector<uint16_t> Fp16Scales(size_t n, uint32_t seed) {
  std::vector<float> f = testing::RandomFloats(n, seed, 0.001f, 0.05f);
  std::vector<uint16_t> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = FloatToFp16(f[i]);
  return out;
}

std::vector<uint32_t> RandomWords(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint32_t> w(n);
  for (auto& x : w) x = rng();
  return w;
}

// Random FP8 E4M3FN codes without the NaN codes; positive only if asked.
std::vector<uint8_t> Fp8Codes(size_t n, uint32_t seed, bool positive) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> c(n);
  for (auto& x : c) {
    do {
      x = static_cast<uint8_t>(rng() & (positive ? 0x7f : 0xff));
    } while ((x & 0x7f) == 0x7f || (positive && x < 0x08));
  }
  return c;
}

// Uploads every present tensor of `w` and checks both output dtypes against DequantizeRows on
// [row_begin, row_end).
void CheckWeight(cudaStream_t stream, const LinearWeight& w, int64_t row_begin, int64_t row_end,
                 const std::string& name) {
  std::vector<std::unique_ptr<DeviceArray<uint8_t>>> keep;
  auto upload = [&keep](const TensorView& t) -> const void* {
    if (!t.present()) return nullptr;
    keep.push_back(std::make_unique<DeviceArray<uint8_t>>(std::vector<uint8_t>(t.data, t.data + t.nbytes)));
    return keep.back()->get();
  };
  DequantDevicePointers dev;
  dev.weight = upload(w.weight);
  dev.weight_packed = upload(w.weight_packed);
  dev.weight_scale = upload(w.weight_scale);
  dev.weight_zero_point = upload(w.weight_zero_point);
  dev.weight_g_idx = upload(w.weight_g_idx);
  absl::StatusOr<DequantParams> params = MakeDequantParams(w, dev);
  ASSERT_TRUE(params.ok()) << name << ": " << params.status();

  const int64_t n = (row_end - row_begin) * w.in_features;
  std::vector<float> want(n);
  ASSERT_TRUE(w.DequantizeRows(row_begin, row_end, want.data()).ok()) << name;
  DeviceArray<float> d32(n);
  DeviceArray<bf16_t> d16(n);
  d32.Poison();
  d16.Poison();
  ASSERT_TRUE(Dequantize(*params, row_begin, row_end, d32.get(), stream).ok()) << name;
  ASSERT_TRUE(Dequantize(*params, row_begin, row_end, d16.get(), stream).ok()) << name;
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  const int64_t diff32 = testing::CountBitDifferences(d32.Download(), want);
  const int64_t diff16 = testing::CountBitDifferences(d16.Download(), testing::ToBf16(want));
  std::cout << "[ measured ] dequant " << name << " rows [" << row_begin << ", " << row_end << ") x "
            << w.in_features << ": fp32 bit mismatches " << diff32 << ", bf16 bit mismatches " << diff16
            << std::endl;
  EXPECT_EQ(diff32, 0) << name;
  EXPECT_EQ(diff16, 0) << name;
}

LinearWeight Base(const std::string& name, WeightFormat format, int64_t out, int64_t in) {
  LinearWeight w;
  w.module = name;
  w.format = format;
  w.out_features = out;
  w.in_features = in;
  return w;
}

TEST_F(DequantTest, PackQuantizedInt4GroupSymmetricBf16) {
  constexpr int64_t kOut = 48, kIn = 256, kGroup = 32;
  LinearWeight w = Base("int4-g32-sym", WeightFormat::kPackQuantized, kOut, kIn);
  w.num_bits = 4;
  w.strategy = QuantStrategy::kGroup;
  w.group_size = kGroup;
  auto packed = MakeTensor("weight_packed", DType::kI32, {kOut, kIn / 8}, RandomWords(kOut * kIn / 8, 1));
  auto scale =
      MakeTensor("weight_scale", DType::kBF16, {kOut, kIn / kGroup}, Bf16Scales(kOut * kIn / kGroup, 2));
  w.weight_packed = packed->view;
  w.weight_scale = scale->view;
  CheckWeight(stream_, w, 0, kOut, w.module);
  CheckWeight(stream_, w, 5, 40, w.module);
}

TEST_F(DequantTest, PackQuantizedInt4GroupAsymmetricZeroPoints) {
  constexpr int64_t kOut = 44, kIn = 256, kGroup = 128;  // out not a multiple of 8: a partial zp word
  LinearWeight w = Base("int4-g128-asym", WeightFormat::kPackQuantized, kOut, kIn);
  w.num_bits = 4;
  w.symmetric = false;
  w.strategy = QuantStrategy::kGroup;
  w.group_size = kGroup;
  auto packed = MakeTensor("weight_packed", DType::kI32, {kOut, kIn / 8}, RandomWords(kOut * kIn / 8, 3));
  auto scale = MakeTensor("weight_scale", DType::kBF16, {kOut, 2}, Bf16Scales(kOut * 2, 4));
  auto zp = MakeTensor("weight_zero_point", DType::kI32, {(kOut * 4 + 31) / 32, 2},
                       RandomWords(((kOut * 4 + 31) / 32) * 2, 5));
  w.weight_packed = packed->view;
  w.weight_scale = scale->view;
  w.weight_zero_point = zp->view;
  CheckWeight(stream_, w, 0, kOut, w.module);
  CheckWeight(stream_, w, 9, 31, w.module);
}

TEST_F(DequantTest, PackQuantizedInt4ActorderGroupFp16) {
  constexpr int64_t kOut = 32, kIn = 256, kGroups = 4;
  LinearWeight w = Base("int4-actorder-fp16", WeightFormat::kPackQuantized, kOut, kIn);
  w.num_bits = 4;
  w.strategy = QuantStrategy::kGroup;
  w.group_size = 64;
  w.actorder_group = true;
  std::mt19937 rng(6);
  std::vector<int32_t> g_idx(kIn);
  for (auto& g : g_idx) g = static_cast<int32_t>(rng() % kGroups);
  auto packed = MakeTensor("weight_packed", DType::kI32, {kOut, kIn / 8}, RandomWords(kOut * kIn / 8, 7));
  auto scale = MakeTensor("weight_scale", DType::kF16, {kOut, kGroups}, Fp16Scales(kOut * kGroups, 8));
  auto gidx = MakeTensor("weight_g_idx", DType::kI32, {kIn}, g_idx);
  w.weight_packed = packed->view;
  w.weight_scale = scale->view;
  w.weight_g_idx = gidx->view;
  CheckWeight(stream_, w, 0, kOut, w.module);
}

TEST_F(DequantTest, PackQuantizedInt8ChannelAndTensor) {
  constexpr int64_t kOut = 24, kIn = 200;  // in not a multiple of 8: the scalar store path
  for (QuantStrategy strategy : {QuantStrategy::kChannel, QuantStrategy::kTensor}) {
    const bool channel = strategy == QuantStrategy::kChannel;
    LinearWeight w =
        Base(channel ? "int8-channel-fp16" : "int8-tensor-fp32", WeightFormat::kPackQuantized, kOut, kIn);
    w.num_bits = 8;
    w.strategy = strategy;
    auto packed = MakeTensor("weight_packed", DType::kI32, {kOut, kIn / 4}, RandomWords(kOut * kIn / 4, 9));
    std::unique_ptr<HostTensor> scale =
        channel ? MakeTensor("weight_scale", DType::kF16, {kOut, 1}, Fp16Scales(kOut, 10))
                : MakeTensor("weight_scale", DType::kF32, {1}, std::vector<float>{0.0123f});
    w.weight_packed = packed->view;
    w.weight_scale = scale->view;
    CheckWeight(stream_, w, 0, kOut, w.module);
  }
}

TEST_F(DequantTest, Nvfp4) {
  constexpr int64_t kOut = 40, kIn = 256;
  LinearWeight w = Base("nvfp4", WeightFormat::kNvfp4PackQuantized, kOut, kIn);
  w.num_bits = 4;
  w.strategy = QuantStrategy::kGroup;
  w.group_size = 16;
  std::vector<uint32_t> words = RandomWords(kOut * kIn / 8, 11);
  std::vector<uint8_t> bytes(kOut * kIn / 2);
  std::memcpy(bytes.data(), words.data(), bytes.size());
  auto packed = MakeTensor("weight_packed", DType::kU8, {kOut, kIn / 2}, bytes);
  auto scale =
      MakeTensor("weight_scale", DType::kF8E4M3, {kOut, kIn / 16}, Fp8Codes(kOut * kIn / 16, 12, true));
  auto global = MakeTensor("weight_global_scale", DType::kF32, {1}, std::vector<float>{2771.37f});
  w.weight_packed = packed->view;
  w.weight_scale = scale->view;
  w.weight_global_scale = global->view;
  CheckWeight(stream_, w, 0, kOut, w.module);
  CheckWeight(stream_, w, 3, 4, w.module);
}

// MXFP4: nvfp4's nibbles with one E8M0 exponent byte per 32 columns. Exponents span 0 (the subnormal
// 2^-127) to 254 (products from 2 * 2^127 up overflow to infinity, on the host as on the device); 255 is
// rejected by the loader (its 0 * infinity NaN has no one bit pattern to compare).
TEST_F(DequantTest, Mxfp4) {
  constexpr int64_t kOut = 40, kIn = 256;
  LinearWeight w = Base("mxfp4", WeightFormat::kMxfp4PackQuantized, kOut, kIn);
  w.num_bits = 4;
  w.strategy = QuantStrategy::kGroup;
  w.group_size = 32;
  std::vector<uint32_t> words = RandomWords(kOut * kIn / 8, 31);
  std::vector<uint8_t> bytes(kOut * kIn / 2);
  std::memcpy(bytes.data(), words.data(), bytes.size());
  auto packed = MakeTensor("weight_packed", DType::kU8, {kOut, kIn / 2}, bytes);
  std::vector<uint32_t> scale_words = RandomWords(kOut * kIn / 32, 32);
  std::vector<uint8_t> exps(kOut * kIn / 32);
  for (size_t i = 0; i < exps.size(); ++i) exps[i] = static_cast<uint8_t>(100 + scale_words[i] % 60);
  exps[0] = 0;
  exps[1] = 1;
  exps[2] = 127;
  exps[3] = 200;
  exps[4] = 253;
  exps[5] = 254;
  auto scale = MakeTensor("weight_scale", DType::kU8, {kOut, kIn / 32}, exps);
  w.weight_packed = packed->view;
  w.weight_scale = scale->view;
  CheckWeight(stream_, w, 0, kOut, w.module);
  CheckWeight(stream_, w, 3, 4, w.module);
}

TEST_F(DequantTest, Fp8TensorChannelBlock) {
  constexpr int64_t kOut = 200;                      // partial 128 x 128 blocks on both axes
  for (int64_t in : {int64_t{300}, int64_t{384}}) {  // 300: element-wise path; 384: 8-column chunks
    const std::string suffix = " in=" + std::to_string(in);
    auto values = MakeTensor("weight", DType::kF8E4M3, {kOut, in}, Fp8Codes(kOut * in, 13, false));
    {
      LinearWeight w = Base("fp8-tensor-fp32" + suffix, WeightFormat::kFloatQuantized, kOut, in);
      w.num_bits = 8;
      w.strategy = QuantStrategy::kTensor;
      auto scale = MakeTensor("weight_scale", DType::kF32, {1}, std::vector<float>{0.00731f});
      w.weight = values->view;
      w.weight_scale = scale->view;
      CheckWeight(stream_, w, 0, kOut, w.module);
    }
    {
      LinearWeight w = Base("fp8-channel-bf16" + suffix, WeightFormat::kFloatQuantized, kOut, in);
      w.num_bits = 8;
      w.strategy = QuantStrategy::kChannel;
      auto scale = MakeTensor("weight_scale", DType::kBF16, {kOut, 1}, Bf16Scales(kOut, 14));
      w.weight = values->view;
      w.weight_scale = scale->view;
      CheckWeight(stream_, w, 0, kOut, w.module);
    }
    {
      LinearWeight w = Base("fp8-block-bf16" + suffix, WeightFormat::kFloatQuantized, kOut, in);
      w.num_bits = 8;
      w.strategy = QuantStrategy::kBlock;
      w.block_rows = 128;
      w.block_cols = 128;
      auto scale = MakeTensor("weight_scale", DType::kBF16, {2, 3}, Bf16Scales(6, 15));
      w.weight = values->view;
      w.weight_scale = scale->view;
      CheckWeight(stream_, w, 0, kOut, w.module);
      CheckWeight(stream_, w, 100, 170, w.module);
    }
  }
}

TEST_F(DequantTest, NaiveInt8WithAndWithoutZeroPoint) {
  constexpr int64_t kOut = 16, kIn = 128;
  std::vector<uint32_t> words = RandomWords(kOut * kIn / 4, 16);
  std::vector<int8_t> q(kOut * kIn);
  std::memcpy(q.data(), words.data(), q.size());
  auto values = MakeTensor("weight", DType::kI8, {kOut, kIn}, q);
  {
    LinearWeight w = Base("naive-int8-g64-zp", WeightFormat::kNaiveQuantized, kOut, kIn);
    w.num_bits = 8;
    w.symmetric = false;
    w.strategy = QuantStrategy::kGroup;
    w.group_size = 64;
    std::vector<int8_t> zp(kOut * 2);
    for (size_t i = 0; i < zp.size(); ++i) zp[i] = static_cast<int8_t>(static_cast<int>(i * 37 % 255) - 127);
    auto scale = MakeTensor("weight_scale", DType::kBF16, {kOut, 2}, Bf16Scales(kOut * 2, 17));
    auto zpt = MakeTensor("weight_zero_point", DType::kI8, {kOut, 2}, zp);
    w.weight = values->view;
    w.weight_scale = scale->view;
    w.weight_zero_point = zpt->view;
    CheckWeight(stream_, w, 0, kOut, w.module);
  }
  {
    LinearWeight w = Base("naive-int8-channel", WeightFormat::kNaiveQuantized, kOut, kIn);
    w.num_bits = 8;
    w.strategy = QuantStrategy::kChannel;
    auto scale =
        MakeTensor("weight_scale", DType::kF32, {kOut, 1}, testing::RandomFloats(kOut, 18, 0.001f, 0.01f));
    w.weight = values->view;
    w.weight_scale = scale->view;
    CheckWeight(stream_, w, 0, kOut, w.module);
  }
}

TEST_F(DequantTest, DenseF32F16Bf16) {
  constexpr int64_t kOut = 12, kIn = 72;
  const std::vector<float> f = testing::RandomNormal(kOut * kIn, 19);
  std::vector<uint16_t> h(f.size()), b(f.size());
  for (size_t i = 0; i < f.size(); ++i) {
    h[i] = FloatToFp16(f[i]);
    b[i] = FloatToBf16(f[i]);
  }
  auto t32 = MakeTensor("weight", DType::kF32, {kOut, kIn}, f);
  auto t16 = MakeTensor("weight", DType::kF16, {kOut, kIn}, h);
  auto tb = MakeTensor("weight", DType::kBF16, {kOut, kIn}, b);
  for (const HostTensor* t : {t32.get(), t16.get(), tb.get()}) {
    LinearWeight w = Base(std::string("dense-") + DTypeName(t->view.dtype), WeightFormat::kDense, kOut, kIn);
    w.weight = t->view;
    CheckWeight(stream_, w, 0, kOut, w.module);
  }
}

TEST_F(DequantTest, RejectsInconsistentParams) {
  LinearWeight w = Base("bad", WeightFormat::kPackQuantized, 8, 64);
  w.num_bits = 4;
  w.strategy = QuantStrategy::kGroup;
  w.group_size = 32;
  auto packed = MakeTensor("weight_packed", DType::kI32, {8, 7}, RandomWords(56, 20));  // should be [8, 8]
  auto scale = MakeTensor("weight_scale", DType::kBF16, {8, 2}, Bf16Scales(16, 21));
  w.weight_packed = packed->view;
  w.weight_scale = scale->view;
  DequantDevicePointers dev;
  dev.weight_packed = packed->bytes.data();
  dev.weight_scale = scale->bytes.data();
  EXPECT_EQ(MakeDequantParams(w, dev).status().code(), absl::StatusCode::kInvalidArgument);
}

std::string FixturesDir() {
  const char* env = std::getenv("SCORED_FIXTURES_DIR");
  return env != nullptr ? env : SCORED_FIXTURES_DIR;
}

// Every linear of every committed compressed-tensors fixture, all rows.
TEST_F(DequantTest, CommittedFixturesBitExact) {
  const std::string dir = FixturesDir();
  DIR* d = opendir(dir.c_str());
  ASSERT_NE(d, nullptr) << dir;
  std::vector<std::string> models;
  while (dirent* e = readdir(d)) {
    const std::string path = dir + "/" + e->d_name;
    if (e->d_name[0] != '.' && access((path + "/config.json").c_str(), R_OK) == 0) models.push_back(path);
  }
  closedir(d);
  std::sort(models.begin(), models.end());
  int checked = 0;
  for (const std::string& m : models) {
    absl::StatusOr<std::unique_ptr<ModelWeights>> weights = ModelWeights::Load(m);
    ASSERT_TRUE(weights.ok()) << m << ": " << weights.status();
    for (const LayerWeights& layer : (*weights)->layers()) {
      std::vector<const LinearWeight*> linears = {&layer.q_proj, &layer.k_proj, &layer.v_proj, &layer.o_proj};
      if (!layer.sparse) {
        linears.insert(linears.end(), {&layer.gate_proj, &layer.up_proj, &layer.down_proj});
      } else {  // mixture-of-experts layers: every expert (and the shared expert)
        for (const ExpertWeights& e : layer.moe.experts) {
          linears.insert(linears.end(), {&e.gate_proj, &e.up_proj, &e.down_proj});
        }
        const ExpertWeights& sh = layer.moe.shared_expert;
        if (!sh.gate_proj.module.empty())
          linears.insert(linears.end(), {&sh.gate_proj, &sh.up_proj, &sh.down_proj});
      }
      for (const LinearWeight* lw : linears) {
        CheckWeight(stream_, *lw, 0, lw->out_features, m.substr(dir.size() + 1) + ":" + lw->module);
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 0);
}

// Times int4 group-128, NVFP4 and FP8 128x128-block -> bf16 for one [14336, 4096] matrix (a Llama-3-8B
// MLP projection). Reports only; bytes counted: packed values + scales read, bf16 written.
TEST_F(DequantTest, ThroughputLlama8BMlp) {
  constexpr int64_t kOut = 14336, kIn = 4096;
  std::vector<uint32_t> words = RandomWords(kOut * kIn / 4, 22);  // enough bytes for every format
  auto as_bytes = [&words](int64_t n) {
    std::vector<uint8_t> b(n);
    std::memcpy(b.data(), words.data(), n);
    return b;
  };
  LinearWeight int4 = Base("int4 g128", WeightFormat::kPackQuantized, kOut, kIn);
  int4.num_bits = 4;
  int4.strategy = QuantStrategy::kGroup;
  int4.group_size = 128;
  auto int4_packed = MakeTensor("weight_packed", DType::kI32, {kOut, kIn / 8},
                                std::vector<uint32_t>(words.begin(), words.begin() + kOut * kIn / 8));
  auto int4_scale =
      MakeTensor("weight_scale", DType::kBF16, {kOut, kIn / 128}, Bf16Scales(kOut * kIn / 128, 23));
  int4.weight_packed = int4_packed->view;
  int4.weight_scale = int4_scale->view;

  LinearWeight fp4 = Base("nvfp4", WeightFormat::kNvfp4PackQuantized, kOut, kIn);
  fp4.num_bits = 4;
  fp4.strategy = QuantStrategy::kGroup;
  fp4.group_size = 16;
  auto fp4_packed = MakeTensor("weight_packed", DType::kU8, {kOut, kIn / 2}, as_bytes(kOut * kIn / 2));
  auto fp4_scale =
      MakeTensor("weight_scale", DType::kF8E4M3, {kOut, kIn / 16}, Fp8Codes(kOut * kIn / 16, 24, true));
  auto fp4_global = MakeTensor("weight_global_scale", DType::kF32, {1}, std::vector<float>{2771.37f});
  fp4.weight_packed = fp4_packed->view;
  fp4.weight_scale = fp4_scale->view;
  fp4.weight_global_scale = fp4_global->view;

  LinearWeight fp8 = Base("fp8 block", WeightFormat::kFloatQuantized, kOut, kIn);
  fp8.num_bits = 8;
  fp8.strategy = QuantStrategy::kBlock;
  fp8.block_rows = fp8.block_cols = 128;
  auto fp8_values = MakeTensor("weight", DType::kF8E4M3, {kOut, kIn}, Fp8Codes(kOut * kIn, 25, false));
  auto fp8_scale =
      MakeTensor("weight_scale", DType::kBF16, {kOut / 128, kIn / 128}, Bf16Scales(kOut * kIn / 16384, 26));
  fp8.weight = fp8_values->view;
  fp8.weight_scale = fp8_scale->view;

  DeviceArray<bf16_t> out(kOut * kIn);
  for (const LinearWeight* w : {&int4, &fp4, &fp8}) {
    std::vector<std::unique_ptr<DeviceArray<uint8_t>>> keep;
    auto upload = [&keep](const TensorView& t) -> const void* {
      if (!t.present()) return nullptr;
      keep.push_back(std::make_unique<DeviceArray<uint8_t>>(std::vector<uint8_t>(t.data, t.data + t.nbytes)));
      return keep.back()->get();
    };
    DequantDevicePointers dev;
    dev.weight = upload(w->weight);
    dev.weight_packed = upload(w->weight_packed);
    dev.weight_scale = upload(w->weight_scale);
    absl::StatusOr<DequantParams> params = MakeDequantParams(*w, dev);
    ASSERT_TRUE(params.ok()) << params.status();
    ASSERT_TRUE(Dequantize(*params, 0, kOut, out.get(), stream_).ok());
    cudaEvent_t start, stop;
    cudaEventCreate(&start);
    cudaEventCreate(&stop);
    constexpr int kIters = 10;
    cudaEventRecord(start, stream_);
    for (int i = 0; i < kIters; ++i) ASSERT_TRUE(Dequantize(*params, 0, kOut, out.get(), stream_).ok());
    cudaEventRecord(stop, stream_);
    Sync();
    float ms = 0.0f;
    cudaEventElapsedTime(&ms, start, stop);
    ms /= kIters;
    const double bytes = static_cast<double>(w->StoredBytes()) + kOut * kIn * 2.0;
    std::cout << "[ measured ] dequant " << w->module << " 14336x4096 -> bf16: " << ms << " ms, "
              << bytes / ms / 1e9 << " TB/s moved" << std::endl;
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
  }
}

}  // namespace
}  // namespace scored::kernels
