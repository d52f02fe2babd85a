// How the forward runs one linear (a DeviceLinear: dense, expanded from a quantized format, FP8- or
// INT8-resident, with or without online rotations and activation quantization): the plan, decided once per
// linear and use by PlanLinear and read both by the GEMM pinning (rank.cc TuneLayerGemms, PinGemms) and by
// the forward (LinearRunner), and the runner that enqueues its kernels on one row chunk.
// Thread-safety: none (one forward thread).
#ifndef SCORED_ENGINE_CUDA_FORWARD_LINEAR_H_
#define SCORED_ENGINE_CUDA_FORWARD_LINEAR_H_

#include <cuda_runtime_api.h>

#include <cstdint>
#include <type_traits>

#include "absl/status/status.h"
#include "engine/cuda/activations.h"
#include "engine/cuda/device_weights.h"
#include "engine/cuda/gemm.h"
#include "engine/cuda/row_chunks.h"
#include "engine/cuda/tp_context.h"
#include "engine/cuda/weight_stream.h"
#include "engine/engine.h"

namespace scored::cuda {

// Row-parallel sums at tp 1. The one-GPU forward computes o_proj and down_proj over the two halves of their
// input columns, [0, in/2) then [in/2, in), each GEMM adding into the fp32 residual in its epilogue:
// residual = (residual + x_a . W_a^T) + x_b . W_b^T. That is bitwise what tp 2 computes: rank 0 adds x_a .
// W_a^T to the residual, rank 1 writes x_b . W_b^T, and a two-rank fp32 all-reduce is one (commutative) add;
// the column-parallel GEMMs of a shard give bitwise tp 1's columns (cuBLASLt without split-K sums each output
// over k in the same order whatever the algorithm; gemm_test checks a shard planned on its own). So a model
// scores bitwise the same on one GPU and on two (the vocab-parallel log-softmax aside: its per-token
// statistics combine in another order, ~1e-7 relative). Linears that run FP8 GEMMs or fake-quantize their
// input (W8A8) keep one GEMM, as does an input width whose half is not 16-byte aligned. Cost: each half
// re-reads and re-writes the residual rows in the epilogue (tests/bench/RESULTS.md).
// Activations::row_parallel_halves turns it off.
bool SumsInHalves(const DeviceLinear& linear, ComputeDtype dtype);

// Where a linear's output goes.
enum class LinearOut {
  kComputeDtype,  // y in the compute dtype: q|k|v, gate|up, a routed expert's gate|up and down
  kFp32,          // y fp32: the router's logits, the shared expert's down
  kResidual,      // y fp32, the residual stream (or the Gemma block's proj): o_proj, down_proj
};

// Which GEMM a linear runs.
enum class LinearKernel {
  kGemm,      // bf16 / fp32 cuBLASLt GEMM on the resident or expanded weight (inputs fake-quantized first)
  kFp8Gemm,   // FP8-resident: x quantized per token, a real FP8 GEMM (GemmRunner::Fp8Linear)
  kInt8Gemm,  // INT8-resident: x quantized per token, kernels::Int8ScaledGemm
};

// Where the forward runs: what a plan depends on besides the linear and its use.
struct LinearSite {
  ComputeDtype dtype = ComputeDtype::kBf16;  // the model's
  bool tensor_parallel = false;              // a rank of tp > 1 (its shard's linears)
  bool row_parallel_halves = true;           // Activations::row_parallel_halves
};

// How one linear runs for one use (LinearOut), decided once (PlanLinear).
struct LinearPlan {
  LinearKernel kernel = LinearKernel::kGemm;
  // y's types: the compute dtype's kBf16ToBf16 / kFp32, or fp32 output kBf16ToFp32 / kFp32.
  GemmTypes types = GemmTypes::kBf16ToBf16;
  // The cuBLASLt GEMM's types (what PinGemms prepares and TuneLayerGemms times): `types`, or for kFp8Gemm
  // kFp8ToBf16 / kFp8ToFp32 after y's type. kInt8Gemm: `types` (prepared though the int8 kernel reads none).
  GemmTypes gemm_types = GemmTypes::kBf16ToBf16;
  // kResidual at tp 1 with Activations::row_parallel_halves: two GEMMs over the input column halves, each
  // adding into y (SumsInHalves), in_features / 2 columns with row stride in_features.
  bool in_halves = false;
  // W8A8 fusions (bf16 mode): a real FP8 GEMM whose input quantization needs only its own rank's columns
  // (column-parallel, or tp 1) takes its input straight from the fused RmsNorm + FP8 kernel, and down_proj
  // from the fused scales + SwiGLU + FP8 kernel. Results are bitwise those of the unfused kernels. Not with
  // an input rotation (it must run on the input first) or output rotations (they need the scaled output).
  bool fed_fp8 = false;
};

// The one decision of how `linear` runs for `out` at `site`.
LinearPlan PlanLinear(const DeviceLinear& linear, LinearOut out, const LinearSite& site);

// What one call of LinearRunner::Run does besides y = x . W^T on the chunk's rows. Set by named field.
struct LinearInOut {
  // y += x . W^T (fp32 y: the residual stream). A real FP8 GEMM writes proj and AddFp8Scaled joins it to y.
  bool add_to_output = false;
  // Real FP8 GEMM only: x is already in act_fp8 with these per-token scales [num_tokens] (a fused norm /
  // SwiGLU kernel wrote them); x itself is unused.
  const float* fp8_input_scales = nullptr;
  // Real FP8 GEMM only: where the scales come after the GEMM, leave y unscaled (the next op applies them;
  // GemmRunner::Fp8ScalesInEpilogue says which).
  bool unscaled_fp8_output = false;
  // LinearOptions::plan_rows of the bf16 / fp32 GEMMs (0: max_tokens): a mixture-of-experts expert's.
  int64_t plan_rows = 0;
};

// Runs linears for activation type T (kernels::bf16_t or float) on the forward's stream, with the
// activations' scratch rows (act_fp8, act_scale, act_amax, proj) as the quantized paths need them.
// Borrows everything; one per forward pass.
template <typename T>
class LinearRunner {
 public:
  // tp: null at tp 1. dtype: the model's (T's).
  LinearRunner(GemmRunner& gemm, Activations* acts, const TensorParallelContext* tp, ComputeDtype dtype,
               cudaStream_t stream);

  // PlanLinear at this forward's site.
  LinearPlan Plan(const DeviceLinear& linear, LinearOut out) const;

  // y [rows, out] = x [rows, in] . W^T on chunk ch's rows (io.add_to_output: y += x . W^T), x and y the
  // whole batch's (row ch.begin first), W the lease's, as `plan` says (plan of use.linear). The linear's
  // input rotations run in place on x's rows first, its output rotations on y's after. W8A8 resident in FP8
  // (bf16 mode, per-token activations): a real FP8 GEMM. Other W8A8 (fp32 mode, per-group activations,
  // shapes FP8 GEMMs cannot take): x is fake-quantized to FP8 first, one scale per token or per
  // act_group_size columns of a token (x is contiguous, so a group is a row of the [rows * in / group,
  // group] view), then the bf16 / fp32 GEMM runs on the dequantized weight. INTERNAL for a request the
  // linear's kernel cannot serve (FP8 input of a linear without a real FP8 GEMM, an accumulating bf16
  // output, an output rotation of an output not in the compute dtype).
  absl::Status Run(const WeightStream::Lease& use, const LinearPlan& plan, T* x, void* y,
                   const LinearInOut& io, const RowChunk& ch);

 private:
  static constexpr bool kFp32 = std::is_same_v<T, float>;

  // Run without the rotations.
  absl::Status Product(const WeightStream::Lease& use, const LinearPlan& plan, T* x, void* y,
                       const LinearInOut& io, const RowChunk& ch);
  absl::Status Int8FakeQuantize(const DeviceLinear& w, T* x_rows, const RowChunk& ch);
  absl::Status Int8Linear(const DeviceLinear& w, const LinearPlan& plan, T* x_rows, void* y_rows,
                          const LinearInOut& io, const RowChunk& ch);
  absl::Status Fp8Linear(const DeviceLinear& w, const LinearPlan& plan, T* x_rows, void* y_rows,
                         const LinearInOut& io, const RowChunk& ch);

  GemmRunner& gemm_;
  const TensorParallelContext* const tp_;
  const LinearSite site_;
  const cudaStream_t stream_;
  const GemmTypes types_ = kFp32 ? GemmTypes::kFp32 : GemmTypes::kBf16ToBf16;
  float* const proj_;            // [n, hidden]: a W8A8 o / down GEMM's own output
  float* const act_amax_;        // [n, 2] (tp only)
  uint8_t* const act_fp8_;       // [n, in] W8A8: a real FP8 GEMM's input
  float* const fp8_scale_norm_;  // [n]: its per-token scales
};

}  // namespace scored::cuda

#endif  // SCORED_ENGINE_CUDA_FORWARD_LINEAR_H_
