// cuBLASLt wrapper for the engine's linears: y[num_tokens, out_features] = x[num_tokens, in_features] ·
// w[out_features, in_features]^T, all row-major (the PyTorch nn.Linear layout).
//
// Types (GemmTypes): bf16 x and w with fp32 accumulation writing bf16 or fp32 y (the bf16 engine; fp32 y
// for the lm_head logits), or fp32 everywhere with plain fp32 math, no TF32 (the fp32 engine).
// FP8 (W8A8, Fp8Linear): x and w FP8 E4M3 with fp32 accumulation, one fp32 scale per row of x (per token)
// and one per row of w (per output channel) applied in cuBLASLt's epilogue (outer-vector scaling,
// CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F): y[t, o] = (sum_k x[t, k] w[o, k]) * x_scale[t] * w_scale[o],
// rounded once to bf16 or written as fp32. Where cuBLASLt offers no outer-vector-scaled algorithm for a
// shape, the plan falls back to a plain FP8 GEMM
// with unit scales writing the output type, and kernels::ApplyFp8Scales (engine/kernels/fp8_scale.h)
// scales it in place right after (for bf16 out: one more bf16 rounding). Choice() names the mode.
// Fp8Supported() says whether either mode is offered on the current device; callers fall back to the
// emulated bf16 path otherwise.
//
// Batch invariance: for each (out_features, in_features, types) the algorithm is chosen ONCE, by
// cuBLASLt's heuristic for num_tokens = max_tokens, restricted to no split-K and no reduction scheme,
// and then pinned for every later call whatever its num_tokens. With one kernel and an unsplit K loop
// every output element is the same sequence of fused multiply-adds whatever the other rows are, so a
// row's result does not depend on what it is batched with.
//
// Tune() may replace the heuristic's first choice for one shape by a faster one among the heuristic's top
// kTuneCandidates (still no split-K, no reduction scheme), timed once at num_tokens = max_tokens on caller
// buffers; it is then pinned the same way. The choice can differ between two loads (timing), never between
// two calls of one runner; shapes faster than kTuneMinMs (gemm.cc) keep the heuristic's first choice.
//
// The workspace is allocated once at Create(). Thread-safety: none (one engine thread).
#ifndef SCORED_ENGINE_CUDA_GEMM_H_
#define SCORED_ENGINE_CUDA_GEMM_H_

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/cuda/device_buffer.h"

namespace scored::cuda {

enum class GemmTypes {
  kBf16ToBf16,  // x, w bf16; y bf16; fp32 accumulate
  kBf16ToFp32,  // x, w bf16; y fp32; fp32 accumulate
  kFp32,        // x, w, y fp32; fp32 math (CUBLAS_COMPUTE_32F, never TF32)
  kFp8ToBf16,   // x, w FP8 E4M3 with fp32 outer-vector scales; y bf16; fp32 accumulate (Fp8Linear only)
  kFp8ToFp32,   // x, w FP8 E4M3 with fp32 outer-vector scales; y fp32; fp32 accumulate (Fp8Linear only)
};

inline bool IsFp8(GemmTypes types) {
  return types == GemmTypes::kFp8ToBf16 || types == GemmTypes::kFp8ToFp32;
}

// How GemmRunner::Linear writes y and reads x and w. The default is y = x · w^T over contiguous rows; build
// others with the factories below or by named assignment (opts.accumulate = true), never positionally.
struct LinearOptions {
  // y += x · w^T instead of y = x · w^T (cuBLASLt's epilogue with beta = 1 and C = y: each element is
  // acc + y rounded once to y's type, the same value as writing acc and adding y in a separate pass; the
  // pinned algorithm is the same).
  bool accumulate = false;
  // The row stride (elements) of both x and w, >= in_features; 0: in_features. So that a GEMM can run over a
  // block of input columns [k0, k0 + in_features) of wider x and w (pointers offset by k0); each stride is
  // planned (and its algorithm pinned) as its own shape.
  int64_t row_stride = 0;
  // The row count the algorithm is chosen for (0: the runner's max_tokens), planned and pinned as its own
  // shape like row_stride: for GEMMs whose row count is usually far below max_tokens (a mixture-of-experts
  // expert gets about max_tokens * top_k / num_experts rows), so that the pinned algorithm's tiles fit them.
  // Any row count up to max_tokens still runs, with that algorithm (batch invariance holds per shape).
  int64_t plan_rows = 0;

  // y += x · w^T.
  static LinearOptions Accumulate() {
    LinearOptions options;
    options.accumulate = true;
    return options;
  }
  // y += x · w^T over in_features of every row_stride columns of x and w.
  static LinearOptions AccumulateColumns(int64_t row_stride) {
    LinearOptions options = Accumulate();
    options.row_stride = row_stride;
    return options;
  }
};

// How GemmRunner::Fp8Linear finishes y (default: scaled, y = (x · w^T) * x_scale * w_scale).
struct Fp8LinearOptions {
  // Where the shape's plan uses unit scales (Fp8ScalesInEpilogue false), y keeps the raw GEMM result and the
  // caller applies the scales in its next op (kernels::AddFp8Scaled, SwiGluQuantFp8); with outer-vector
  // scales y is scaled either way.
  bool leave_unscaled = false;

  static Fp8LinearOptions LeaveUnscaled() {
    Fp8LinearOptions options;
    options.leave_unscaled = true;
    return options;
  }
};

class GemmRunner {
 public:
  // max_tokens: the largest num_tokens any call will pass (algorithms are chosen for it).
  static absl::StatusOr<std::unique_ptr<GemmRunner>> Create(int64_t max_tokens);
  ~GemmRunner();
  GemmRunner(const GemmRunner&) = delete;
  GemmRunner& operator=(const GemmRunner&) = delete;

  // Whether cuBLASLt offers an FP8 GEMM of `types` (kFp8ToBf16 / kFp8ToFp32), either mode, on the current
  // device (probed once per process, device and type with a small shape's heuristic; false without a
  // usable device, before Hopper, or for a non-FP8 type). The no-argument form: both output types.
  // The probe runs a small FP8 GEMM end to end in each mode (outer-vector scales first) and checks its
  // result; the mode that passed is the one every runner on this device then plans for `types`.
  static bool Fp8Supported(GemmTypes types);
  static bool Fp8Supported();
  // Whether that mode is outer-vector scales (false: unit scales + ApplyFp8Scales, or unsupported).
  static bool Fp8OuterVec(GemmTypes types);

  // Chooses and pins the algorithm for one weight shape (also done lazily by Linear()). INTERNAL when
  // cuBLASLt offers no algorithm without split-K for it.
  // ld: the row stride of x and w, as LinearOptions::row_stride.
  absl::Status Prepare(int64_t out_features, int64_t in_features, GemmTypes types, int64_t ld = 0);

  // Times the heuristic's top candidates without split-K at max_tokens rows (a few runs each on `stream`,
  // synchronizing it) and pins the fastest, unless it beats the heuristic's first choice by less than
  // kTuneMinGain. Call before the shape's first Linear(); a shape already tuned is left as it is.
  // x, w, y hold any finite values (their results are discarded), sized for max_tokens rows. FP8 types
  // also need the scales (any finite values).
  absl::Status Tune(const void* x,  // [max_tokens, in_features]
                    const void* w,  // [out_features, in_features]
                    void* y,        // [max_tokens, out_features]
                    int64_t out_features, int64_t in_features, GemmTypes types, cudaStream_t stream,
                    const float* x_scale = nullptr,  // [max_tokens], FP8 types only
                    const float* w_scale = nullptr,  // [out_features], FP8 types only
                    int64_t ld = 0);                 // LinearOptions::row_stride

  // The algorithm pinned for a shape, as "heuristic candidate i of n, t ms" (tuned) or "heuristic first"
  // (not tuned); empty for a shape never prepared.
  std::string Choice(int64_t out_features, int64_t in_features, GemmTypes types, int64_t ld = 0) const;

  // y = x · w^T on `stream`, or y += x · w^T and / or a row stride per `options` (LinearOptions).
  // 0 <= num_tokens <= max_tokens. Pointers 16-byte aligned; x, w, y must not overlap. Asynchronous: errors
  // of the launch itself are returned, execution errors surface at the next synchronization.
  absl::Status Linear(const void* x,  // [num_tokens, in_features], row stride options.row_stride
                      const void* w,  // [out_features, in_features], row stride options.row_stride
                      void* y,        // [num_tokens, out_features], bf16 or fp32 per `types`
                      int64_t num_tokens, int64_t out_features, int64_t in_features, GemmTypes types,
                      cudaStream_t stream, const LinearOptions& options = LinearOptions());

  // FP8 W8A8: y[t, o] = bf16 or fp32 of (sum_k x[t, k] * w[o, k]) * x_scale[t] * w_scale[o] on `stream`,
  // types kFp8ToBf16 or kFp8ToFp32; x and w FP8 E4M3FN bit patterns. in_features and out_features must be
  // multiples of 16 (cuBLASLt's FP8 alignment). Batch-invariant like Linear(); same errors.
  absl::Status Fp8Linear(const uint8_t* x,      // [num_tokens, in_features] FP8 E4M3
                         const float* x_scale,  // [num_tokens]
                         const uint8_t* w,      // [out_features, in_features] FP8 E4M3
                         const float* w_scale,  // [out_features]
                         void* y,               // [num_tokens, out_features] bf16 or fp32 per `types`
                         int64_t num_tokens, int64_t out_features, int64_t in_features, GemmTypes types,
                         cudaStream_t stream, const Fp8LinearOptions& options = Fp8LinearOptions());

  // Whether the FP8 plan of this shape applies the scales in cuBLASLt's epilogue (outer-vector mode) rather
  // than in a pass after the GEMM; plans the shape if needed (errors as Prepare).
  absl::StatusOr<bool> Fp8ScalesInEpilogue(int64_t out_features, int64_t in_features, GemmTypes types);

  int64_t max_tokens() const { return max_tokens_; }
  int64_t workspace_bytes() const { return workspace_.bytes(); }

 private:
  struct Plan {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t w_layout = nullptr;  // A: col-major [in, out], used transposed
    int64_t out_features = 0;
    int64_t in_features = 0;
    int64_t ld = 0;         // row stride of x and w (elements)
    int64_t plan_rows = 0;  // rows the heuristic chose for (LinearOptions::plan_rows resolved)
    // FP8 only: scales in cuBLASLt's epilogue (outer vectors); false: unit scales, then ApplyFp8Scales.
    bool fp8_outer_vec = false;
    cublasLtMatmulAlgo_t algo;
    std::vector<cublasLtMatmulAlgo_t> candidates;  // heuristic order, no split-K; candidates[0] == algo
    bool tuned = false;
    std::string choice;
  };
  using Key = std::tuple<int64_t, int64_t, GemmTypes, int64_t, int64_t>;  // out, in, types, ld, plan rows

  GemmRunner() = default;
  absl::StatusOr<const Plan*> GetPlan(int64_t out_features, int64_t in_features, GemmTypes types,
                                      int64_t ld = 0, int64_t plan_rows = 0);
  // Creates plan->desc and w_layout (FP8: with outer-vector scale modes when plan->fp8_outer_vec) and fills
  // plan->candidates; on error nothing is left allocated.
  absl::Status FindCandidates(Plan* plan, GemmTypes types);
  // The matmul of one plan with algorithm `algo`; FP8 types set the scale pointers on the plan first.
  // accumulate: y += instead of y = (beta 1, C = y).
  cublasStatus_t Run(const Plan& plan, const cublasLtMatmulAlgo_t& algo, const void* x, const void* w,
                     void* y, int64_t num_tokens, GemmTypes types, const float* x_scale, const float* w_scale,
                     cudaStream_t stream, bool accumulate = false);

  // Fp8Supported's probe runners: 1 = FP8 plans with outer-vector scales only, 0 = unit scales only;
  // -1 (every other runner) = the mode the probe found for the device.
  int probe_outer_vec_ = -1;
  cublasLtHandle_t handle_ = nullptr;
  int64_t max_tokens_ = 0;
  DeviceBuffer workspace_;
  std::map<Key, Plan> plans_;
};

}  // namespace scored::cuda

#endif  // SCORED_ENGINE_CUDA_GEMM_H_
