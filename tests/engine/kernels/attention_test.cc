// Causal GQA varlen attention vs ref::CausalAttention (with ref::AttentionOptions: scale, soft cap, sliding
// window), one oracle call per sequence, through every kernel that takes the input.
// Tolerances (v in [-1, 1], so |out| <= 1):
//   fp32 (SIMT): fp32 dot products and sums vs double in the oracle: scores off by ~1e-6, outputs by
//     less; kFp32AbsTol = 1e-5.
//   bf16: inputs are bf16 on both sides; the output is rounded to bf16 (<= 2^-9 = 0.002 of |out|) and the
//     tensor-core path also rounds the probabilities to bf16 before P.V (relative 2^-9 each, <= 0.002 on
//     a convex combination): kBf16AbsTol = 1e-2, with the mean error bounded by kBf16MeanAbsTol = 2e-3.
#include "engine/kernels/attention.h"

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "engine/kernels/attention_kernels.h"
#include "engine/reference/ops.h"
#include "tests/engine/kernels/kernel_test_util.h"

namespace scored::kernels {
namespace {

using testing::DeviceArray;

constexpr double kFp32AbsTol = 1e-5;
constexpr double kBf16AbsTol = 1e-2;
constexpr double kBf16MeanAbsTol = 2e-3;

class AttentionTest : public testing::GpuTest {};

struct Problem {
  std::vector<int32_t> lengths;
  int32_t num_heads, num_kv_heads, head_dim;
  ref::AttentionOptions options;
  std::vector<int32_t> cu_seqlens;
  int64_t num_tokens = 0, stride = 0;
  std::vector<float> qkv;   // [num_tokens, stride] fused q|k|v, bf16-representable
  std::vector<float> want;  // [num_tokens, num_heads * head_dim]

  AttentionShape Shape() const {
    AttentionShape s;
    s.num_tokens = num_tokens;
    s.num_seqs = static_cast<int32_t>(lengths.size());
    s.max_seqlen = *std::max_element(lengths.begin(), lengths.end());
    s.num_heads = num_heads;
    s.num_kv_heads = num_kv_heads;
    s.head_dim = head_dim;
    s.q_stride = stride;
    s.kv_stride = stride;
    s.scale = static_cast<float>(options.scale);
    s.softcap = options.softcap;
    s.window = static_cast<int32_t>(options.window);
    return s;
  }
};

// options.scale must be a float value (the kernels take a float scale).
Problem MakeProblem(std::vector<int32_t> lengths, int32_t nh, int32_t nkv, int32_t hd, uint32_t seed,
                    const ref::AttentionOptions& options = ref::AttentionOptions()) {
  Problem p;
  p.lengths = std::move(lengths);
  p.options = options;
  p.num_heads = nh;
  p.num_kv_heads = nkv;
  p.head_dim = hd;
  p.cu_seqlens.push_back(0);
  for (int32_t len : p.lengths) p.cu_seqlens.push_back(p.cu_seqlens.back() + len);
  p.num_tokens = p.cu_seqlens.back();
  p.stride = static_cast<int64_t>(nh + 2 * nkv) * hd;
  p.qkv.resize(p.num_tokens * p.stride);
  std::mt19937 rng(seed);
  std::normal_distribution<float> qk_dist(0.0f, 1.5f);
  std::uniform_real_distribution<float> v_dist(-1.0f, 1.0f);
  for (int64_t t = 0; t < p.num_tokens; ++t) {
    for (int64_t j = 0; j < p.stride; ++j) {
      const bool is_v = j >= static_cast<int64_t>(nh + nkv) * hd;
      p.qkv[t * p.stride + j] = RoundToBf16(is_v ? v_dist(rng) : qk_dist(rng));
    }
  }
  const int64_t q_cols = static_cast<int64_t>(nh) * hd, kv_cols = static_cast<int64_t>(nkv) * hd;
  p.want.resize(p.num_tokens * q_cols);
  for (size_t s = 0; s < p.lengths.size(); ++s) {
    const int64_t n = p.lengths[s], t0 = p.cu_seqlens[s];
    if (n == 0) continue;
    std::vector<float> q(n * q_cols), k(n * kv_cols), v(n * kv_cols), out(n * q_cols);
    for (int64_t i = 0; i < n; ++i) {
      const float* row = p.qkv.data() + (t0 + i) * p.stride;
      std::copy(row, row + q_cols, q.begin() + i * q_cols);
      std::copy(row + q_cols, row + q_cols + kv_cols, k.begin() + i * kv_cols);
      std::copy(row + q_cols + kv_cols, row + q_cols + 2 * kv_cols, v.begin() + i * kv_cols);
    }
    ref::CausalAttention(q.data(), k.data(), v.data(), n, nh, nkv, hd, out.data(), nullptr, options);
    std::copy(out.begin(), out.end(), p.want.begin() + t0 * q_cols);
  }
  return p;
}

template <typename T>
std::vector<float> RunAttention(cudaStream_t stream, const Problem& p, bool simt) {
  const AttentionShape shape = p.Shape();
  DeviceArray<int32_t> d_cu(p.cu_seqlens);
  std::vector<float> out;
  if constexpr (sizeof(T) == 2) {
    DeviceArray<bf16_t> d_qkv(testing::ToBf16(p.qkv)), d_out(p.num_tokens * p.num_heads * p.head_dim);
    d_out.Poison();
    const bf16_t* q = d_qkv.get();
    const bf16_t* k = q + static_cast<int64_t>(p.num_heads) * p.head_dim;
    const bf16_t* v = k + static_cast<int64_t>(p.num_kv_heads) * p.head_dim;
    const absl::Status st = simt ? CausalAttentionSimt(q, k, v, d_cu.get(), shape, d_out.get(), stream)
                                 : CausalAttention(q, k, v, d_cu.get(), shape, d_out.get(), stream);
    EXPECT_TRUE(st.ok()) << st;
    EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    out = testing::FromBf16(d_out.Download());
  } else {
    DeviceArray<float> d_qkv(p.qkv), d_out(p.num_tokens * p.num_heads * p.head_dim);
    d_out.Poison();
    const float* q = d_qkv.get();
    const float* k = q + static_cast<int64_t>(p.num_heads) * p.head_dim;
    const float* v = k + static_cast<int64_t>(p.num_kv_heads) * p.head_dim;
    const absl::Status st = CausalAttention(q, k, v, d_cu.get(), shape, d_out.get(), stream);
    EXPECT_TRUE(st.ok()) << st;
    EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    out = d_out.Download();
  }
  return out;
}

// bf16 attention through the named kernel (fused q|k|v buffer as the engine passes it).
std::vector<float> RunAttentionWith(cudaStream_t stream, const Problem& p, AttentionKernel kernel) {
  const AttentionShape shape = p.Shape();
  DeviceArray<int32_t> d_cu(p.cu_seqlens);
  DeviceArray<bf16_t> d_qkv(testing::ToBf16(p.qkv)), d_out(p.num_tokens * p.num_heads * p.head_dim);
  d_out.Poison();
  const bf16_t* q = d_qkv.get();
  const bf16_t* k = q + static_cast<int64_t>(p.num_heads) * p.head_dim;
  const bf16_t* v = k + static_cast<int64_t>(p.num_kv_heads) * p.head_dim;
  const absl::Status st = CausalAttentionWith(kernel, q, k, v, d_cu.get(), shape, d_out.get(), stream);
  EXPECT_TRUE(st.ok()) << st;
  EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  return testing::FromBf16(d_out.Download());
}

const char* KernelName(AttentionKernel kernel) {
  switch (kernel) {
    case AttentionKernel::kAuto:
      return "auto";
    case AttentionKernel::kSimt:
      return "simt";
    case AttentionKernel::kMma16Rows:
      return "mma16rows";
    case AttentionKernel::kMma32RowsK32:
      return "mma32rows_k32";
    case AttentionKernel::kMma32RowsK64:
      return "mma32rows_k64";
    case AttentionKernel::kWgmma:
      return "wgmma";
  }
  return "?";
}

// kAuto, then every kernel that CausalAttentionWith takes for p's fused q|k|v buffer on this device (SIMT
// always; wgmma only for sm_90a code on a 9.0 device, not a build run from its compute_80 PTX under
// CUDA_FORCE_PTX_JIT=1).
std::vector<AttentionKernel> KernelsFor(const Problem& p) {
  DeviceArray<bf16_t> d_qkv(p.num_tokens * p.stride), d_out(p.num_tokens * p.num_heads * p.head_dim);
  const bf16_t* q = d_qkv.get();
  const bf16_t* k = q + static_cast<int64_t>(p.num_heads) * p.head_dim;
  const bf16_t* v = k + static_cast<int64_t>(p.num_kv_heads) * p.head_dim;
  std::vector<AttentionKernel> kernels = {AttentionKernel::kAuto};
  for (AttentionKernel kernel :
       {AttentionKernel::kSimt, AttentionKernel::kMma16Rows, AttentionKernel::kMma32RowsK32,
        AttentionKernel::kMma32RowsK64, AttentionKernel::kWgmma}) {
    if (CausalAttentionSupports(kernel, q, k, v, d_out.get(), p.Shape())) kernels.push_back(kernel);
  }
  return kernels;
}

// The kernels of KernelsFor but kSimt and kAuto.
std::vector<AttentionKernel> TensorCoreKernels(const Problem& p) {
  std::vector<AttentionKernel> kernels;
  for (AttentionKernel kernel : KernelsFor(p)) {
    if (kernel != AttentionKernel::kAuto && kernel != AttentionKernel::kSimt) kernels.push_back(kernel);
  }
  return kernels;
}

double MeanAbsError(const std::vector<float>& got, const std::vector<float>& want) {
  double sum = 0.0;
  for (size_t i = 0; i < got.size(); ++i) sum += std::fabs(static_cast<double>(got[i]) - want[i]);
  return got.empty() ? 0.0 : sum / static_cast<double>(got.size());
}

// Includes an empty sequence (two equal cu_seqlens entries), which must produce nothing and disturb nothing.
const std::vector<int32_t> kLengths = {1, 17, 0, 64, 100, 130, 257};

TEST_F(AttentionTest, Bf16MatchesReference) {
  for (int32_t hd : {8, 16, 24, 32, 64, 96, 128, 256}) {
    const Problem p = MakeProblem(kLengths, 8, 2, hd, 100 + hd);
    for (bool simt : {false, true}) {
      const std::string name =
          std::string("attention bf16 ") + (simt ? "simt" : "default") + " hd=" + std::to_string(hd);
      const std::vector<float> got = RunAttention<bf16_t>(stream_, p, simt);
      const testing::ErrorStats s = testing::CompareArrays(got, p.want);
      const double mean = MeanAbsError(got, p.want);
      testing::Report(name + " (mean_abs=" + std::to_string(mean) + ")", s);
      EXPECT_EQ(s.not_finite, 0) << name;
      EXPECT_LE(s.max_abs, kBf16AbsTol) << name;
      EXPECT_LE(mean, kBf16MeanAbsTol) << name;
    }
  }
}

// Every kernel that takes the input (kAuto, SIMT, the tensor-core kernels) at head_dim 128, 64, 96 and 256,
// on the varlen batch above and on long windows (many key tiles, several query blocks, a partial last
// block), with 4 and 1 kv heads; at 128 and 256 also a window of exactly 8 x 128 tokens next to one of 128
// + 1 (whole tiles, and a tile holding a single row).
TEST_F(AttentionTest, Bf16KernelsMatchReference) {
  const std::vector<Problem> problems = {
      MakeProblem(kLengths, 8, 2, 128, 500),      MakeProblem({700, 1, 333}, 4, 1, 128, 501),
      MakeProblem({1024, 129}, 8, 2, 128, 504),   MakeProblem(kLengths, 8, 2, 64, 502),
      MakeProblem({700, 1, 333}, 4, 1, 64, 503),  MakeProblem(kLengths, 8, 2, 96, 505),
      MakeProblem({700, 1, 333}, 4, 1, 96, 506),  MakeProblem(kLengths, 8, 2, 256, 507),
      MakeProblem({700, 1, 333}, 4, 1, 256, 508), MakeProblem({1024, 129}, 4, 2, 256, 509)};
  for (const Problem& p : problems) {
    for (AttentionKernel kernel : KernelsFor(p)) {
      const std::string name = std::string("attention bf16 ") + KernelName(kernel) +
                               " hd=" + std::to_string(p.head_dim) +
                               " tokens=" + std::to_string(p.num_tokens);
      const std::vector<float> got = RunAttentionWith(stream_, p, kernel);
      const testing::ErrorStats s = testing::CompareArrays(got, p.want);
      const double mean = MeanAbsError(got, p.want);
      testing::Report(name + " (mean_abs=" + std::to_string(mean) + ")", s);
      EXPECT_EQ(s.not_finite, 0) << name;
      EXPECT_LE(s.max_abs, kBf16AbsTol) << name;
      EXPECT_LE(mean, kBf16MeanAbsTol) << name;
    }
  }
}

TEST_F(AttentionTest, Fp32MatchesReference) {
  for (int32_t hd : {8, 32, 64, 96, 128, 256}) {
    const Problem p = MakeProblem(kLengths, 4, 4, hd, 200 + hd);
    const std::vector<float> got = RunAttention<float>(stream_, p, false);
    const testing::ErrorStats s = testing::CompareArrays(got, p.want);
    testing::Report("attention f32 hd=" + std::to_string(hd), s);
    EXPECT_EQ(s.not_finite, 0);
    EXPECT_LE(s.max_abs, kFp32AbsTol) << "hd=" << hd;
  }
}

TEST_F(AttentionTest, SequenceResultIndependentOfBatch) {
  const Problem batch = MakeProblem({70, 33, 129}, 8, 1, 128, 300);
  // The middle sequence alone: same rows of qkv.
  Problem alone = batch;
  alone.lengths = {33};
  alone.cu_seqlens = {0, 33};
  alone.num_tokens = 33;
  alone.qkv.assign(batch.qkv.begin() + 70 * batch.stride, batch.qkv.begin() + 103 * batch.stride);
  const std::vector<float> all = RunAttention<bf16_t>(stream_, batch, false);
  const std::vector<float> one = RunAttention<bf16_t>(stream_, alone, false);
  const int64_t cols = 8 * 128;
  EXPECT_EQ(testing::CountBitDifferences(
                std::vector<float>(all.begin() + 70 * cols, all.begin() + 103 * cols), one),
            0);
  const std::vector<AttentionKernel> kernels = TensorCoreKernels(batch);
  EXPECT_FALSE(kernels.empty());
  for (AttentionKernel kernel : kernels) {
    const std::vector<float> all_k = RunAttentionWith(stream_, batch, kernel);
    const std::vector<float> one_k = RunAttentionWith(stream_, alone, kernel);
    EXPECT_EQ(testing::CountBitDifferences(
                  std::vector<float>(all_k.begin() + 70 * cols, all_k.begin() + 103 * cols), one_k),
              0)
        << KernelName(kernel);
  }
}

// ---------------------------------------------------------------- scale, soft cap, sliding window

struct OptionCase {
  const char* name;
  ref::AttentionOptions options;
};

ref::AttentionOptions Options(double scale, float softcap, int64_t window) {
  ref::AttentionOptions o;
  o.scale = static_cast<float>(scale);  // a float value: the kernels take a float scale
  o.softcap = softcap;
  o.window = window;
  return o;
}

const double kScale20 = 1.0 / std::sqrt(20.0);  // Gemma-like query_pre_attn_scalar^-1/2, not head_dim^-1/2

// Windows of 1 (a row sees only itself), 8 and 37 (not a multiple of any key tile); scale and caps alone
// and with the window (Gemma 2's combination).
const std::vector<OptionCase> kOptionCases = {
    {"default", Options(0.0, 0.0f, 0)},   {"scale", Options(kScale20, 0.0f, 0)},
    {"softcap5", Options(0.0, 5.0f, 0)},  {"softcap50+scale", Options(kScale20, 50.0f, 0)},
    {"window1", Options(0.0, 0.0f, 1)},   {"window8", Options(0.0, 0.0f, 8)},
    {"window37", Options(0.0, 0.0f, 37)}, {"window37+softcap50+scale", Options(kScale20, 50.0f, 37)},
};

// Lengths around the windows: shorter than 8 and 37, exactly 37 and one more, and several times longer;
// an empty sequence.
const std::vector<int32_t> kOptionLengths = {1, 17, 0, 37, 38, 100, 130, 300};

// Checks p through every kernel that takes it (bf16 tolerances) and through the fp32 SIMT path (fp32
// tolerance).
void CheckAllKernels(cudaStream_t stream, const Problem& p, const std::string& what) {
  for (AttentionKernel kernel : KernelsFor(p)) {
    const std::string name = "attention bf16 " + what + " " + KernelName(kernel);
    const std::vector<float> got = RunAttentionWith(stream, p, kernel);
    const testing::ErrorStats s = testing::CompareArrays(got, p.want);
    const double mean = MeanAbsError(got, p.want);
    testing::Report(name + " (mean_abs=" + std::to_string(mean) + ")", s);
    EXPECT_EQ(s.not_finite, 0) << name;
    EXPECT_LE(s.max_abs, kBf16AbsTol) << name;
    EXPECT_LE(mean, kBf16MeanAbsTol) << name;
  }
  const std::vector<float> got = RunAttention<float>(stream, p, false);
  const testing::ErrorStats s = testing::CompareArrays(got, p.want);
  testing::Report("attention f32 " + what, s);
  EXPECT_EQ(s.not_finite, 0) << what;
  EXPECT_LE(s.max_abs, kFp32AbsTol) << what;
}

// Every option case at head_dims 16 and 24 (SIMT only), 64, 96, 128 and 256, 4 heads on 2 kv heads.
TEST_F(AttentionTest, OptionsMatchReference) {
  for (int32_t hd : {16, 24, 64, 96, 128, 256}) {
    for (size_t c = 0; c < kOptionCases.size(); ++c) {
      const Problem p = MakeProblem(kOptionLengths, 4, 2, hd, 600 + 10 * hd + c, kOptionCases[c].options);
      CheckAllKernels(stream_, p, std::string(kOptionCases[c].name) + " hd=" + std::to_string(hd));
    }
  }
}

// Windows on sequences of several query blocks of every kernel (128 queries), where whole key tiles lie
// before a block's window and are skipped: 37, 200 (more than a tile), and the largest int32 (longer than
// the sequences: the plain causal result; no overflow in the window arithmetic). 8 heads on 1 kv head.
TEST_F(AttentionTest, WindowsOnLongSequencesMatchReference) {
  for (int32_t hd : {64, 96, 128, 256}) {
    for (int64_t window : {int64_t{37}, int64_t{200}, int64_t{std::numeric_limits<int32_t>::max()}}) {
      const ref::AttentionOptions options =
          Options(hd == 256 ? kScale20 : 0.0, hd == 256 ? 50.0f : 0.0f, window);
      const Problem p =
          MakeProblem({700, 1, 333}, 8, 1, hd, static_cast<uint32_t>(700 + hd + window), options);
      CheckAllKernels(stream_, p, "window" + std::to_string(window) + " hd=" + std::to_string(hd) + " long");
    }
  }
}

// Sequence `seq` of a batch as a batch of its own (same q|k|v rows, same options).
Problem Alone(const Problem& batch, size_t seq) {
  Problem alone = batch;
  const int64_t t0 = batch.cu_seqlens[seq], n = batch.lengths[seq];
  alone.lengths = {batch.lengths[seq]};
  alone.cu_seqlens = {0, batch.lengths[seq]};
  alone.num_tokens = n;
  alone.qkv.assign(batch.qkv.begin() + t0 * batch.stride, batch.qkv.begin() + (t0 + n) * batch.stride);
  const int64_t cols = static_cast<int64_t>(batch.num_heads) * batch.head_dim;
  alone.want.assign(batch.want.begin() + t0 * cols, batch.want.begin() + (t0 + n) * cols);
  return alone;
}

// With a window (and the cap and scale), a sequence's result is bitwise the same alone and in a batch,
// through every kernel.
TEST_F(AttentionTest, WindowedSequenceResultIndependentOfBatch) {
  for (int32_t hd : {96, 128, 256}) {
    const Problem batch = MakeProblem({300, 150, 129}, 8, 2, hd, 800 + hd, Options(kScale20, 50.0f, 37));
    const Problem alone = Alone(batch, 1);
    const int64_t cols = static_cast<int64_t>(batch.num_heads) * hd;
    for (AttentionKernel kernel : KernelsFor(batch)) {
      const std::vector<float> all = RunAttentionWith(stream_, batch, kernel);
      const std::vector<float> one = RunAttentionWith(stream_, alone, kernel);
      EXPECT_EQ(testing::CountBitDifferences(
                    std::vector<float>(all.begin() + 300 * cols, all.begin() + 450 * cols), one),
                0)
          << KernelName(kernel) << " hd=" << hd;
    }
  }
}

// Times attention at Llama-3 shapes (32 heads, 8 kv heads; 8 windows of 2048 tokens): bf16 (tensor cores)
// at head_dim 128 and 64, and the fp32 SIMT path at 128. Reports only; the tests above are the gate.
template <typename T>
void TimeAttention(cudaStream_t stream, int32_t head_dim, int iters,
                   AttentionKernel kernel = AttentionKernel::kAuto) {
  constexpr int32_t kSeqs = 8, kLen = 2048, kNh = 32, kNkv = 8;
  constexpr int64_t kTokens = static_cast<int64_t>(kSeqs) * kLen;
  const int64_t stride = static_cast<int64_t>(kNh + 2 * kNkv) * head_dim;
  std::vector<int32_t> cu(kSeqs + 1);
  for (int i = 0; i <= kSeqs; ++i) cu[i] = i * kLen;
  const std::vector<float> values = testing::RandomNormal(kTokens * stride, 400);
  std::vector<T> host(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    if constexpr (sizeof(T) == 2) {
      host[i].bits = FloatToBf16(values[i]);
    } else {
      host[i] = values[i];
    }
  }
  DeviceArray<T> d_qkv(host);
  DeviceArray<T> d_out(kTokens * kNh * head_dim);
  DeviceArray<int32_t> d_cu(cu);
  AttentionShape s;
  s.num_tokens = kTokens;
  s.num_seqs = kSeqs;
  s.max_seqlen = kLen;
  s.num_heads = kNh;
  s.num_kv_heads = kNkv;
  s.head_dim = head_dim;
  s.q_stride = s.kv_stride = stride;
  const T* q = d_qkv.get();
  auto launch = [&] {
    if constexpr (sizeof(T) == 2) {
      if (kernel != AttentionKernel::kAuto) {
        return CausalAttentionWith(kernel, q, q + kNh * head_dim, q + (kNh + kNkv) * head_dim, d_cu.get(), s,
                                   d_out.get(), stream);
      }
    }
    return CausalAttention(q, q + kNh * head_dim, q + (kNh + kNkv) * head_dim, d_cu.get(), s, d_out.get(),
                           stream);
  };
  const float ms = testing::MedianMs(stream, launch, iters);
  ASSERT_GT(ms, 0.0f);
  // Causal: QK^T and PV each 2 * hd FLOP per (query, key <= query) pair and head.
  const double flops = 4.0 * head_dim * kNh * kSeqs * (static_cast<double>(kLen) * (kLen + 1) / 2);
  std::cout << "[ measured ] attention " << (sizeof(T) == 2 ? "bf16" : "fp32") << " " << KernelName(kernel)
            << " 8x2048 nh=32 nkv=8 hd=" << head_dim << ": " << ms << " ms, " << flops / ms / 1e9
            << " TFLOP/s" << std::endl;
}

TEST_F(AttentionTest, ThroughputLlama3Shapes) {
  TimeAttention<bf16_t>(stream_, 128, 10);
  TimeAttention<bf16_t>(stream_, 128, 10, AttentionKernel::kMma16Rows);
  TimeAttention<bf16_t>(stream_, 128, 10, AttentionKernel::kMma32RowsK32);
  TimeAttention<bf16_t>(stream_, 128, 10, AttentionKernel::kMma32RowsK64);
  if (attention_internal::WgmmaAvailable()) TimeAttention<bf16_t>(stream_, 128, 10, AttentionKernel::kWgmma);
  TimeAttention<bf16_t>(stream_, 64, 10);
  TimeAttention<bf16_t>(stream_, 64, 10, AttentionKernel::kMma32RowsK32);
  TimeAttention<bf16_t>(stream_, 64, 10, AttentionKernel::kMma32RowsK64);
  TimeAttention<float>(stream_, 128, 1);
}

// Shapes and options outside attention.h's limits are INVALID_ARGUMENT before any CUDA call (no GPU needed;
// the pointers are never read).
TEST(AttentionArgumentsTest, RejectsBadShapesAndOptions) {
  alignas(16) static bf16_t buffer[64];
  static const int32_t cu[2] = {0, 1};
  auto shape_with = [](int32_t hd, float scale, float softcap, int32_t window) {
    AttentionShape s;
    s.num_tokens = 1;
    s.num_seqs = 1;
    s.max_seqlen = 1;
    s.num_heads = 1;
    s.num_kv_heads = 1;
    s.head_dim = hd;
    s.q_stride = s.kv_stride = 256;
    s.scale = scale;
    s.softcap = softcap;
    s.window = window;
    return s;
  };
  const std::vector<AttentionShape> bad = {
      shape_with(20, 0.0f, 0.0f, 0),  shape_with(264, 0.0f, 0.0f, 0), shape_with(0, 0.0f, 0.0f, 0),
      shape_with(64, -1.0f, 0.0f, 0), shape_with(64, NAN, 0.0f, 0),   shape_with(64, INFINITY, 0.0f, 0),
      shape_with(64, 0.0f, -5.0f, 0), shape_with(64, 0.0f, NAN, 0),   shape_with(64, 0.0f, 0.0f, -1)};
  for (const AttentionShape& s : bad) {
    const absl::Status st = CausalAttention<bf16_t>(buffer, buffer, buffer, cu, s, buffer, nullptr);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument)
        << "hd=" << s.head_dim << " scale=" << s.scale << " softcap=" << s.softcap << " window=" << s.window;
    EXPECT_FALSE(CausalAttentionSupports(AttentionKernel::kSimt, buffer, buffer, buffer, buffer, s));
  }
}

}  // namespace
}  // namespace scored::kernels
