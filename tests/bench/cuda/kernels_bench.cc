// kernels_bench: the attention and element-wise kernels alone, at the engine's Llama-3-8B shapes, old path
// against new where both exist.
//
//   kernels_bench [--reps 5]
//
// Every case: two warm-up launches, then --reps launches each timed with its own pair of CUDA events on one
// stream; the median is printed. Shapes:
//   attention  bf16, fused q|k|v rows [tokens, (32 + 2 * 8) * 128] as the engine passes them, 32 heads,
//              8 kv heads, head_dim 128, 8 and 16 windows of 2048 tokens; TFLOP/s counted causally
//              (4 * head_dim * heads * len * (len + 1) / 2 per window, the count of the engine's profile).
//              Old: the 32-rows-per-warp mma.sync kernel (the previous default); new: the wgmma kernel.
//              After timing, the largest |new - old| over the 8-window output (both bf16).
//   swiglu     bf16 fused gate|up [32768, 2 * 14336] -> [32768, 14336]; GB/s = bytes read + written.
//   add_rms_norm  fp32 x [32768, 4096] into the fp32 residual (read and written), bf16 out (the engine's
//              call); GB/s counts x, residual twice, out and the weight.
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
#include "engine/kernels/attention.h"
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

int Main(int argc, char** argv) {
  int reps = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--reps") == 0) {
      reps = std::max(1, std::atoi(argv[i + 1]));
    } else {
      std::fprintf(stderr, "usage: kernels_bench [--reps N]\n");
      return 2;
    }
  }
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
  bool ok = BenchAttention(stream, 8, reps);
  ok = BenchAttention(stream, 16, reps) && ok;
  ok = BenchSwiGlu(stream, reps) && ok;
  ok = BenchAddRmsNorm(stream, reps) && ok;
  cudaStreamDestroy(stream);
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace scored::kernels

int main(int argc, char** argv) { return scored::kernels::Main(argc, argv); }
