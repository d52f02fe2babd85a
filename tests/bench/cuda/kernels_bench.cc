// kernels_bench: the attention and element-wise kernels alone, at the engine's Llama-3-8B shapes, old path
// against new where both exist.
//
//   kernels_bench [--reps 5] [--only attention|attention_models|swiglu|add_rms_norm|hadamard|grouped_gemm]
//
// Every case: two warm-up launches, then --reps launches each timed with its own pair of CUDA events on one
// stream; the median is printed. Shapes:
//   attention  bf16, fused q|k|v rows [tokens, (32 + 2 * 8) * 128] as the engine passes them, 32 heads,
//              8 kv heads, head_dim 128, 8 and 16 windows of 2048 tokens; TFLOP/s counted causally
//              (4 * head_dim * heads * len * (len + 1) / 2 per window, the count of the engine's profile).
//              Old: the 32-rows-per-warp mma.sync kernel (the previous default); new: the wgmma kernel.
//              After timing, the largest |new - old| over the 8-window output (both bf16).
//   attention_models (also run by `attention`)  bf16, fused q|k|v, every kernel that takes the shape and
//              kAuto (named with the kernel it picks), at 8 x 2048 and 2 x 8192 tokens: head_dim 96 with
//              32 / 32 heads (Phi-3-mini); head_dim 256 with 16 / 8 and 8 / 4 heads (Gemma 2 9B, Gemma 3
//              4B), causal and with Gemma 2's window 4096, cap 50, scale 256^-1/2; head_dim 128 32 / 8
//              with a 4096 window. TFLOP/s count the (query, key) pairs in reach: 4 * head_dim * heads *
//              sum_i min(i + 1, window) per sequence (a 4096 window on 8192 tokens is ~3/4 of the causal
//              work's pairs, and the kernels should take about that share of the causal time).
//   swiglu     bf16 fused gate|up [32768, 2 * 14336] -> [32768, 14336]; GB/s = bytes read + written.
//   add_rms_norm  fp32 x [32768, 4096] into the fp32 residual (read and written), bf16 out (the engine's
//              call); GB/s counts x, residual twice, out and the weight.
//   hadamard   transform_config's online rotation (kernels/hadamard_rotate.h) of bf16 rows in place, 16384
//              tokens (8 x 2048): a 4096-wide input whole (one Walsh-Hadamard transform, K = 1) and in 128
//              blocks, the 14336-wide down_proj input whole (compressed-tensors' 224 x 64 factors: a K = 224
//              core, random signs) and in 128 blocks; GB/s = bytes read + written.
//   grouped_gemm  mixture-of-experts grouped GEMMs (kernels/grouped_gemm.h) at the Qwen3-30B-A3B
//              expert shapes: 16384 tokens x 8 slots = 131072 rows over 128 experts, gate|up [1536, 2048]
//              -> bf16 and down [2048, 768] -> fp32, dense bf16 and W4A16 (symmetric, group 128, bf16
//              scales) weights, with uniform counts (1024 rows each) and skewed ones (expert e drawn with
//              weight (e + 1)^-1: the largest expert gets ~24k rows, the smallest ~190); next to them, in the
//              same run, one dense cuBLASLt GEMM (engine/cuda/gemm.h, pinned algorithm, no split-K) of the
//              same total FLOPs: 131072 x n x k. Where the device offers GroupedGemmSm90 (sm_90a), its rows
//              too, for its cooperative (co), cooperative 2x1-cluster (c2) and ping-pong (pp) schedules:
//              "sm90co" etc. (dense bf16 experts), "w4 dq+co" etc. (DequantizeGroupedInt4 of all 128 experts
//              into a stacked bf16 buffer, then GroupedGemmSm90Stacked: the engine's sm90_dequant path per
//              GEMM; TFLOP/s of the pair) and "dequant only" (GB/s: packed words and scales read, bf16
//              written).
// Inputs are pseudo-random (a fixed 16 Mi-value block, repeated), bf16-representable.
// Exit status 1 when a launch fails or no CUDA device is visible.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "engine/base/dtype.h"
#include "engine/cuda/gemm.h"
#include "engine/kernels/attention.h"
#include "engine/kernels/grouped_gemm.h"
#include "engine/kernels/hadamard_rotate.h"
#include "engine/kernels/kernel_types.h"
#include "engine/kernels/rms_norm.h"
#include "engine/kernels/swiglu.h"

namespace scored::kernels {
namespace {

constexpr int32_t kHeads = 32, kKvHeads = 8, kHeadDim = 128, kWindow = 2048;
constexpr int64_t kHidden = 4096, kInter = 14336, kElementwiseTokens = 32768;
constexpr size_t kBlockValues = size_t{1} << 24;

bool Check(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return true;
  std::fprintf(stderr, "kernels_bench: %s: %s\n", what, cudaGetErrorString(err));
  return false;
}

// A device buffer of n elements of T; freed on destruction.
template <typename T>
class Buffer {
 public:
  explicit Buffer(size_t n) : n_(n) {
    void* p = nullptr;
    if (cudaMalloc(&p, n * sizeof(T)) == cudaSuccess) ptr_ = static_cast<T*>(p);
  }
  ~Buffer() {
    if (ptr_ != nullptr) cudaFree(ptr_);
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  T* get() const { return ptr_; }
  size_t size() const { return n_; }
  bool ok() const { return ptr_ != nullptr; }

 private:
  T* ptr_ = nullptr;
  size_t n_;
};

// Fills buf with a repeated block of N(0, stddev) values (bf16-rounded for bf16_t).
template <typename T>
bool FillRandom(Buffer<T>& buf, float stddev, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, stddev);
  const size_t block = std::min(buf.size(), kBlockValues);
  std::vector<T> host(block);
  for (size_t i = 0; i < block; ++i) {
    const float x = dist(rng);
    if constexpr (sizeof(T) == 2) {
      host[i].bits = FloatToBf16(x);
    } else {
      host[i] = Bf16ToFloat(FloatToBf16(x));
    }
  }
  for (size_t off = 0; off < buf.size(); off += block) {
    const size_t n = std::min(block, buf.size() - off);
    if (!Check(cudaMemcpy(buf.get() + off, host.data(), n * sizeof(T), cudaMemcpyHostToDevice), "upload")) {
      return false;
    }
  }
  return true;
}

// Median of `reps` event-timed launches after two warm-ups; -1 on failure.
float MedianMs(cudaStream_t stream, const std::function<absl::Status()>& launch, int reps) {
  for (int i = 0; i < 2; ++i) {
    const absl::Status st = launch();
    if (!st.ok()) {
      std::fprintf(stderr, "kernels_bench: %s\n", std::string(st.message()).c_str());
      return -1.0f;
    }
  }
  cudaEvent_t start, stop;
  if (!Check(cudaEventCreate(&start), "event") || !Check(cudaEventCreate(&stop), "event")) return -1.0f;
  std::vector<float> times;
  for (int i = 0; i < reps; ++i) {
    cudaEventRecord(start, stream);
    const absl::Status st = launch();
    cudaEventRecord(stop, stream);
    if (!st.ok() || !Check(cudaEventSynchronize(stop), "launch")) return -1.0f;
    float ms = 0.0f;
    cudaEventElapsedTime(&ms, start, stop);
    times.push_back(ms);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

void PrintRate(const char* what, const char* path, float ms, double flops, double bytes) {
  if (flops > 0) {
    std::printf("%-34s %-14s %9.3f ms %8.1f TFLOP/s\n", what, path, ms, flops / ms / 1e9);
  } else {
    std::printf("%-34s %-14s %9.3f ms %8.1f GB/s\n", what, path, ms, bytes / ms / 1e6);
  }
}

bool BenchAttention(cudaStream_t stream, int32_t windows, int reps) {
  const int64_t tokens = static_cast<int64_t>(windows) * kWindow;
  const int64_t stride = static_cast<int64_t>(kHeads + 2 * kKvHeads) * kHeadDim;
  Buffer<bf16_t> qkv(tokens * stride), out_old(tokens * kHeads * kHeadDim),
      out_new(tokens * kHeads * kHeadDim);
  Buffer<int32_t> cu(windows + 1);
  if (!qkv.ok() || !out_old.ok() || !out_new.ok() || !cu.ok() || !FillRandom(qkv, 1.0f, 400 + windows))
    return false;
  std::vector<int32_t> cu_host(windows + 1);
  for (int32_t i = 0; i <= windows; ++i) cu_host[i] = i * kWindow;
  if (!Check(cudaMemcpy(cu.get(), cu_host.data(), cu_host.size() * sizeof(int32_t), cudaMemcpyHostToDevice),
             "cu")) {
    return false;
  }
  AttentionShape s;
  s.num_tokens = tokens;
  s.num_seqs = windows;
  s.max_seqlen = kWindow;
  s.num_heads = kHeads;
  s.num_kv_heads = kKvHeads;
  s.head_dim = kHeadDim;
  s.q_stride = s.kv_stride = stride;
  const bf16_t* q = qkv.get();
  const bf16_t* k = q + kHeads * kHeadDim;
  const bf16_t* v = k + kKvHeads * kHeadDim;
  const double flops = 4.0 * kHeadDim * kHeads * windows * (static_cast<double>(kWindow) * (kWindow + 1) / 2);
  const std::string what = "attention " + std::to_string(windows) + "x2048 32/8 hd128";
  bool ok = true;
  const struct {
    AttentionKernel kernel;
    const char* name;
    bf16_t* out;
  } paths[] = {{AttentionKernel::kMma32RowsK64, "old mma32_k64", out_old.get()},
               {AttentionKernel::kWgmma, "new wgmma", out_new.get()},
               {AttentionKernel::kAuto, "default", out_new.get()}};
  for (const auto& p : paths) {
    const float ms = MedianMs(
        stream, [&] { return CausalAttentionWith(p.kernel, q, k, v, cu.get(), s, p.out, stream); }, reps);
    if (ms <= 0) {
      ok = false;
      continue;
    }
    PrintRate(what.c_str(), p.name, ms, flops, 0);
  }
  if (ok && windows == 8) {
    const size_t n = out_old.size();
    std::vector<bf16_t> a(n), b(n);
    if (!Check(cudaMemcpy(a.data(), out_old.get(), n * 2, cudaMemcpyDeviceToHost), "download") ||
        !Check(cudaMemcpy(b.data(), out_new.get(), n * 2, cudaMemcpyDeviceToHost), "download")) {
      return false;
    }
    double max_diff = 0.0, sum_diff = 0.0;
    int64_t not_finite = 0;
    for (size_t i = 0; i < n; ++i) {
      const float x = Bf16ToFloat(a[i].bits), y = Bf16ToFloat(b[i].bits);
      if (!std::isfinite(y)) ++not_finite;
      const double d = std::fabs(static_cast<double>(x) - y);
      max_diff = std::max(max_diff, d);
      sum_diff += d;
    }
    std::printf("attention 8x2048 new vs old: max |diff| %.3g, mean %.3g, non-finite %lld\n", max_diff,
                sum_diff / static_cast<double>(n), static_cast<long long>(not_finite));
  }
  return ok;
}

const char* AttentionKernelName(AttentionKernel kernel) {
  switch (kernel) {
    case AttentionKernel::kAuto:
      return "auto";
    case AttentionKernel::kSimt:
      return "simt";
    case AttentionKernel::kMma16Rows:
      return "mma16";
    case AttentionKernel::kMma32RowsK32:
      return "mma32_k32";
    case AttentionKernel::kMma32RowsK64:
      return "mma32_k64";
    case AttentionKernel::kWgmma:
      return "wgmma";
  }
  return "?";
}

struct ModelAttention {
  const char* name;
  int32_t heads, kv_heads, head_dim;
  float scale, softcap;
  int32_t window;
};

// One model shape at seqs x len tokens through every kernel that takes it but SIMT (too slow to matter),
// and kAuto.
bool BenchModelAttention(cudaStream_t stream, const ModelAttention& m, int32_t seqs, int32_t len, int reps) {
  const int64_t tokens = static_cast<int64_t>(seqs) * len;
  const int64_t stride = static_cast<int64_t>(m.heads + 2 * m.kv_heads) * m.head_dim;
  Buffer<bf16_t> qkv(tokens * stride), out(tokens * m.heads * m.head_dim);
  Buffer<int32_t> cu(seqs + 1);
  if (!qkv.ok() || !out.ok() || !cu.ok() || !FillRandom(qkv, 1.0f, 410 + m.head_dim)) return false;
  std::vector<int32_t> cu_host(seqs + 1);
  for (int32_t i = 0; i <= seqs; ++i) cu_host[i] = i * len;
  if (!Check(cudaMemcpy(cu.get(), cu_host.data(), cu_host.size() * sizeof(int32_t), cudaMemcpyHostToDevice),
             "cu")) {
    return false;
  }
  AttentionShape s;
  s.num_tokens = tokens;
  s.num_seqs = seqs;
  s.max_seqlen = len;
  s.num_heads = m.heads;
  s.num_kv_heads = m.kv_heads;
  s.head_dim = m.head_dim;
  s.q_stride = s.kv_stride = stride;
  s.scale = m.scale;
  s.softcap = m.softcap;
  s.window = m.window;
  const bf16_t* q = qkv.get();
  const bf16_t* k = q + static_cast<int64_t>(m.heads) * m.head_dim;
  const bf16_t* v = k + static_cast<int64_t>(m.kv_heads) * m.head_dim;
  double pairs = 0.0;  // (query, key) pairs in reach, per sequence and head
  for (int64_t i = 0; i < len; ++i) pairs += m.window > 0 ? std::min<int64_t>(i + 1, m.window) : i + 1;
  const double flops = 4.0 * m.head_dim * m.heads * seqs * pairs;
  const std::string what =
      std::string("attention ") + std::to_string(seqs) + "x" + std::to_string(len) + " " + m.name;
  const std::string auto_name =
      std::string("auto=") + AttentionKernelName(CausalAttentionAutoKernel(q, k, v, out.get(), s));
  bool ok = true;
  for (AttentionKernel kernel :
       {AttentionKernel::kMma16Rows, AttentionKernel::kMma32RowsK32, AttentionKernel::kMma32RowsK64,
        AttentionKernel::kWgmma, AttentionKernel::kAuto}) {
    if (!CausalAttentionSupports(kernel, q, k, v, out.get(), s)) continue;
    const float ms = MedianMs(
        stream, [&] { return CausalAttentionWith(kernel, q, k, v, cu.get(), s, out.get(), stream); }, reps);
    if (ms <= 0) {
      ok = false;
      continue;
    }
    PrintRate(what.c_str(),
              kernel == AttentionKernel::kAuto ? auto_name.c_str() : AttentionKernelName(kernel), ms, flops,
              0);
  }
  return ok;
}

bool BenchModelAttentions(cudaStream_t stream, int reps) {
  const float gemma2_scale = 1.0f / 16.0f;  // query_pre_attn_scalar 256
  const ModelAttention models[] = {
      {"32/32 hd96", 32, 32, 96, 0.0f, 0.0f, 0},
      {"16/8 hd256", 16, 8, 256, 0.0f, 0.0f, 0},
      {"16/8 hd256 w4096 cap50", 16, 8, 256, gemma2_scale, 50.0f, 4096},
      {"8/4 hd256", 8, 4, 256, 0.0f, 0.0f, 0},
      {"32/8 hd128 w4096", 32, 8, 128, 0.0f, 0.0f, 4096},
      {"32/8 hd128", 32, 8, 128, 0.0f, 0.0f, 0},
  };
  bool ok = true;
  for (const ModelAttention& m : models) {
    ok = BenchModelAttention(stream, m, 8, 2048, reps) && ok;
    ok = BenchModelAttention(stream, m, 2, 8192, reps) && ok;
  }
  return ok;
}

bool BenchSwiGlu(cudaStream_t stream, int reps) {
  Buffer<bf16_t> gate_up(kElementwiseTokens * 2 * kInter), out(kElementwiseTokens * kInter);
  if (!gate_up.ok() || !out.ok() || !FillRandom(gate_up, 2.0f, 500)) return false;
  const double bytes = 3.0 * kElementwiseTokens * kInter * 2;
  const float ms = MedianMs(
      stream,
      [&] {
        return SwiGlu(gate_up.get(), gate_up.get() + kInter, 2 * kInter, kElementwiseTokens, kInter,
                      out.get(), stream);
      },
      reps);
  if (ms <= 0) return false;
  PrintRate("swiglu bf16 32768x14336 fused", "current", ms, 0, bytes);
  return true;
}

bool BenchAddRmsNorm(cudaStream_t stream, int reps) {
  Buffer<float> x(kElementwiseTokens * kHidden), residual(kElementwiseTokens * kHidden), weight(kHidden);
  Buffer<bf16_t> out(kElementwiseTokens * kHidden);
  if (!x.ok() || !residual.ok() || !weight.ok() || !out.ok() || !FillRandom(x, 0.1f, 600) ||
      !FillRandom(residual, 1.0f, 601) || !FillRandom(weight, 1.0f, 602)) {
    return false;
  }
  const double bytes = kElementwiseTokens * kHidden * (4.0 + 4.0 + 4.0 + 2.0) + kHidden * 4.0;
  const float ms = MedianMs(
      stream,
      [&] {
        return AddRmsNorm<float, bf16_t>(x.get(), kHidden, residual.get(), weight.get(), kElementwiseTokens,
                                         kHidden, 1e-5f, out.get(), kHidden, stream);
      },
      reps);
  if (ms <= 0) return false;
  PrintRate("add_rms_norm f32->bf16 32768x4096", "current", ms, 0, bytes);
  return true;
}

bool BenchHadamard(cudaStream_t stream, int reps) {
  constexpr int64_t kTokens = 8 * 2048;
  bool ok = true;
  const struct {
    int64_t width, n, core_size;
    const char* what;
  } cases[] = {{kHidden, kHidden, 1, "hadamard 16384x4096 n 4096 K 1"},
               {kHidden, 128, 1, "hadamard 16384x4096 n 128 K 1"},
               {kInter, kInter, 224, "hadamard 16384x14336 n 14336 K 224"},
               {kInter, 128, 1, "hadamard 16384x14336 n 128 K 1"}};
  std::mt19937 rng(700);
  for (const auto& c : cases) {
    Buffer<bf16_t> x(kTokens * c.width);
    Buffer<int8_t> signs(c.n);
    std::vector<int8_t> host_signs(c.n), core(c.core_size * c.core_size);
    for (int8_t& v : host_signs) v = (rng() & 1) ? 1 : -1;
    for (int8_t& v : core) v = (rng() & 1) ? 1 : -1;
    const std::vector<uint8_t> bits = PackHadamardCore(core, static_cast<int32_t>(c.core_size), false);
    Buffer<uint8_t> core_bits(bits.size());
    if (!x.ok() || !signs.ok() || !core_bits.ok() || !FillRandom(x, 1.0f, 701) ||
        !Check(cudaMemcpy(signs.get(), host_signs.data(), c.n, cudaMemcpyHostToDevice), "signs") ||
        !Check(cudaMemcpy(core_bits.get(), bits.data(), bits.size(), cudaMemcpyHostToDevice), "core")) {
      return false;
    }
    HadamardRotation r;
    r.size = static_cast<int32_t>(c.n);
    r.chunk = static_cast<int32_t>(c.n / c.core_size);
    r.core_size = static_cast<int32_t>(c.core_size);
    r.signs = signs.get();
    r.core_bits = core_bits.get();
    const float ms = MedianMs(
        stream, [&] { return HadamardRotate(x.get(), c.width, kTokens, c.width, r, stream); }, reps);
    if (ms <= 0) {
      ok = false;
      continue;
    }
    PrintRate(c.what, "current", ms, 0, 2.0 * kTokens * c.width * 2);
  }
  return ok;
}

// Expert row counts of `slots` slots over `experts` experts: uniform, or drawn with weight (e + 1)^-1.
std::vector<int32_t> ExpertOffsets(int64_t slots, int64_t experts, bool skewed) {
  std::vector<int32_t> counts(experts, static_cast<int32_t>(slots / experts));
  if (skewed) {
    std::vector<double> weights(experts);
    for (int64_t e = 0; e < experts; ++e) weights[e] = 1.0 / static_cast<double>(e + 1);
    std::mt19937 rng(900);
    std::discrete_distribution<int64_t> pick(weights.begin(), weights.end());
    std::fill(counts.begin(), counts.end(), 0);
    for (int64_t s = 0; s < slots; ++s) ++counts[pick(rng)];
  }
  std::vector<int32_t> offsets(experts + 1, 0);
  for (int64_t e = 0; e < experts; ++e) offsets[e + 1] = offsets[e] + counts[e];
  return offsets;
}

// The sm90 rows of BenchGroupedGemm for one shape and one set of counts (the stacked dequantized experts
// reuse one [E, n, k] bf16 buffer).
bool BenchGroupedSm90(cudaStream_t stream, int reps, Buffer<bf16_t>& x, Buffer<int32_t>& offsets,
                      Buffer<const bf16_t*>& ptr_table, Buffer<GroupedInt4Expert>& expert_table,
                      const GroupedInt4Format& format, const GroupedGemmShape& shape, bool fp32_out,
                      Buffer<float>& y_fp32, Buffer<bf16_t>& y_bf16, void* workspace, int64_t ws_bytes,
                      bool skewed, const char* what) {
  const double flops = 2.0 * shape.rows * shape.n * shape.k;
  Buffer<bf16_t> stacked(shape.num_experts * shape.n * shape.k);
  if (!stacked.ok()) return false;
  const auto dequant = [&] {
    return DequantizeGroupedInt4(expert_table.get(), offsets.get(), format, shape.num_experts, shape.n,
                                 shape.k, stacked.get(), stream);
  };
  const float dequant_ms = MedianMs(stream, dequant, reps);
  if (dequant_ms <= 0) return false;
  const double weights = static_cast<double>(shape.num_experts) * shape.n * shape.k;
  if (!skewed) PrintRate(what, "dequant only", dequant_ms, 0, weights / 2 + weights / 128 * 2 + weights * 2);
  for (const GroupedGemmSm90Schedule schedule :
       {GroupedGemmSm90Schedule::kCooperative, GroupedGemmSm90Schedule::kCooperative2x1,
        GroupedGemmSm90Schedule::kPingpong}) {
    const char* tag = schedule == GroupedGemmSm90Schedule::kCooperative      ? "co"
                      : schedule == GroupedGemmSm90Schedule::kCooperative2x1 ? "c2"
                                                                             : "pp";
    const float dense_ms = MedianMs(
        stream,
        [&] {
          return fp32_out ? GroupedGemmSm90<float>(x.get(), offsets.get(), ptr_table.get(), shape,
                                                   y_fp32.get(), workspace, ws_bytes, stream, schedule)
                          : GroupedGemmSm90<bf16_t>(x.get(), offsets.get(), ptr_table.get(), shape,
                                                    y_bf16.get(), workspace, ws_bytes, stream, schedule);
        },
        reps);
    const float dq_ms = MedianMs(
        stream,
        [&] {
          const absl::Status st = dequant();
          if (!st.ok()) return st;
          return fp32_out
                     ? GroupedGemmSm90Stacked<float>(x.get(), offsets.get(), stacked.get(), shape,
                                                     y_fp32.get(), workspace, ws_bytes, stream, schedule)
                     : GroupedGemmSm90Stacked<bf16_t>(x.get(), offsets.get(), stacked.get(), shape,
                                                      y_bf16.get(), workspace, ws_bytes, stream, schedule);
        },
        reps);
    if (dense_ms <= 0 || dq_ms <= 0) return false;
    const std::string dense_row = std::string("sm90") + tag + (skewed ? " skewed" : " unif.");
    const std::string dq_row = std::string("w4 dq+") + tag + (skewed ? " sk" : " un");
    PrintRate(what, dense_row.c_str(), dense_ms, flops, 0);
    PrintRate(what, dq_row.c_str(), dq_ms, flops, 0);
  }
  return true;
}

bool BenchGroupedGemm(cudaStream_t stream, int reps) {
  constexpr int64_t kExperts = 128, kRows = 16384 * 8, kModelHidden = 2048, kMoeInter = 768;
  const struct {
    int64_t n, k;
    bool fp32_out;
    const char* what;
  } shapes[] = {{2 * kMoeInter, kModelHidden, false, "gate|up 131072x1536x2048"},
                {kModelHidden, kMoeInter, true, "down 131072x2048x768"}};
  Buffer<bf16_t> x(kRows * kModelHidden), y_bf16(kRows * kModelHidden);
  Buffer<float> y_fp32(kRows * kModelHidden);
  Buffer<int32_t> offsets(kExperts + 1);
  if (!x.ok() || !y_bf16.ok() || !y_fp32.ok() || !offsets.ok() || !FillRandom(x, 1.0f, 901)) return false;
  absl::StatusOr<std::unique_ptr<cuda::GemmRunner>> gemm = cuda::GemmRunner::Create(kRows);
  if (!gemm.ok()) {
    std::fprintf(stderr, "kernels_bench: %s\n", std::string(gemm.status().message()).c_str());
    return false;
  }
  int device = 0;
  const bool sm90 = cudaGetDevice(&device) == cudaSuccess && GroupedGemmSm90Supported(device);
  Buffer<uint8_t> workspace(static_cast<size_t>(sm90 ? GroupedGemmSm90WorkspaceBytes(kExperts) : 1));
  if (!workspace.ok()) return false;
  const int64_t ws_bytes = static_cast<int64_t>(workspace.size());
  if (!sm90) std::printf("grouped_gemm: GroupedGemmSm90 not offered on this device / build (no sm90 rows)\n");
  bool ok = true;
  for (const auto& s : shapes) {
    // Dense bf16 experts (one allocation, kExperts slices) and W4A16 ones (packed words + bf16 scales).
    Buffer<bf16_t> w(kExperts * s.n * s.k);
    Buffer<int32_t> packed(kExperts * s.n * s.k / 8);
    Buffer<bf16_t> scales(kExperts * s.n * s.k / 128);
    if (!w.ok() || !packed.ok() || !scales.ok() || !FillRandom(w, 0.02f, 902) ||
        !FillRandom(scales, 0.01f, 903)) {
      return false;
    }
    std::vector<int32_t> words(std::min<size_t>(packed.size(), kBlockValues));
    std::mt19937 rng(904);
    for (int32_t& v : words) v = static_cast<int32_t>(rng());
    for (size_t off = 0; off < packed.size(); off += words.size()) {
      const size_t n = std::min(words.size(), packed.size() - off);
      if (!Check(cudaMemcpy(packed.get() + off, words.data(), n * 4, cudaMemcpyHostToDevice), "upload")) {
        return false;
      }
    }
    std::vector<const bf16_t*> ptrs(kExperts);
    std::vector<GroupedInt4Expert> experts(kExperts);
    for (int64_t e = 0; e < kExperts; ++e) {
      ptrs[e] = w.get() + e * s.n * s.k;
      experts[e].parts[0].packed = packed.get() + e * s.n * s.k / 8;
      experts[e].parts[0].scale = scales.get() + e * s.n * s.k / 128;
      experts[e].split = s.n;
    }
    Buffer<const bf16_t*> ptr_table(kExperts);
    Buffer<GroupedInt4Expert> expert_table(kExperts);
    if (!ptr_table.ok() || !expert_table.ok() ||
        !Check(cudaMemcpy(ptr_table.get(), ptrs.data(), kExperts * sizeof(ptrs[0]), cudaMemcpyHostToDevice),
               "upload") ||
        !Check(cudaMemcpy(expert_table.get(), experts.data(), kExperts * sizeof(experts[0]),
                          cudaMemcpyHostToDevice),
               "upload")) {
      return false;
    }
    GroupedGemmShape shape;
    shape.num_experts = kExperts;
    shape.rows = kRows;
    shape.n = s.n;
    shape.k = s.k;
    shape.ldx = s.k;
    shape.ldy = s.n;
    GroupedInt4Format format;
    format.scale_dtype = DType::kBF16;
    format.group_size = 128;
    const double flops = 2.0 * kRows * s.n * s.k;
    void* y = s.fp32_out ? static_cast<void*>(y_fp32.get()) : static_cast<void*>(y_bf16.get());
    const float dense_ms = MedianMs(
        stream,
        [&] {
          return (*gemm)->Linear(x.get(), w.get(), y, kRows, s.n, s.k,
                                 s.fp32_out ? cuda::GemmTypes::kBf16ToFp32 : cuda::GemmTypes::kBf16ToBf16,
                                 stream);
        },
        reps);
    if (dense_ms <= 0) return false;
    PrintRate(s.what, "cuBLASLt dense", dense_ms, flops, 0);
    for (bool skewed : {false, true}) {
      const std::vector<int32_t> host_offsets = ExpertOffsets(kRows, kExperts, skewed);
      if (!Check(
              cudaMemcpy(offsets.get(), host_offsets.data(), host_offsets.size() * 4, cudaMemcpyHostToDevice),
              "upload")) {
        return false;
      }
      const float bf16_ms = MedianMs(
          stream,
          [&] {
            return s.fp32_out ? GroupedGemm<float>(x.get(), offsets.get(), ptr_table.get(), shape,
                                                   y_fp32.get(), stream)
                              : GroupedGemm<bf16_t>(x.get(), offsets.get(), ptr_table.get(), shape,
                                                    y_bf16.get(), stream);
          },
          reps);
      const float int4_ms = MedianMs(
          stream,
          [&] {
            return s.fp32_out ? GroupedGemmInt4<float>(x.get(), offsets.get(), expert_table.get(), format,
                                                       shape, y_fp32.get(), stream)
                              : GroupedGemmInt4<bf16_t>(x.get(), offsets.get(), expert_table.get(), format,
                                                        shape, y_bf16.get(), stream);
          },
          reps);
      if (bf16_ms <= 0 || int4_ms <= 0) {
        ok = false;
        continue;
      }
      PrintRate(s.what, skewed ? "grouped skewed" : "grouped unif.", bf16_ms, flops, 0);
      PrintRate(s.what, skewed ? "w4a16 skewed" : "w4a16 unif.", int4_ms, flops, 0);
      if (sm90 && !BenchGroupedSm90(stream, reps, x, offsets, ptr_table, expert_table, format, shape,
                                    s.fp32_out, y_fp32, y_bf16, workspace.get(), ws_bytes, skewed, s.what)) {
        ok = false;
      }
    }
  }
  return ok;
}

int Main(int argc, char** argv) {
  int reps = 5;
  std::string only;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--reps") == 0) {
      reps = std::max(1, std::atoi(argv[i + 1]));
    } else if (std::strcmp(argv[i], "--only") == 0) {
      only = argv[i + 1];
    } else {
      std::fprintf(stderr,
                   "usage: kernels_bench [--reps N] [--only "
                   "attention|attention_models|swiglu|add_rms_norm|hadamard|grouped_gemm]\n");
      return 2;
    }
  }
  const auto wanted = [&](const char* name) { return only.empty() || only == name; };
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::fprintf(stderr, "kernels_bench: no CUDA device\n");
    return 1;
  }
  cudaDeviceProp prop;
  if (!Check(cudaGetDeviceProperties(&prop, 0), "device")) return 1;
  std::printf("device: %s (%d SMs), median of %d after 2 warm-ups\n", prop.name, prop.multiProcessorCount,
              reps);
  cudaStream_t stream;
  if (!Check(cudaStreamCreate(&stream), "stream")) return 1;
  bool ok = true;
  if (wanted("attention")) ok = BenchAttention(stream, 8, reps) && BenchAttention(stream, 16, reps) && ok;
  if (wanted("attention") || only == "attention_models") ok = BenchModelAttentions(stream, reps) && ok;
  if (wanted("swiglu")) ok = BenchSwiGlu(stream, reps) && ok;
  if (wanted("add_rms_norm")) ok = BenchAddRmsNorm(stream, reps) && ok;
  if (wanted("hadamard")) ok = BenchHadamard(stream, reps) && ok;
  if (wanted("grouped_gemm")) ok = BenchGroupedGemm(stream, reps) && ok;
  cudaStreamDestroy(stream);
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace scored::kernels

int main(int argc, char** argv) { return scored::kernels::Main(argc, argv); }
