#include "engine/cuda/forward/linear.h"

#include "engine/base/status_macros.h"
#include "engine/dist/nccl_communicator.h"
#include "engine/kernels/cuda_check.h"
#include "engine/kernels/fp8_quant.h"
#include "engine/kernels/fp8_scale.h"
#include "engine/kernels/hadamard_rotate.h"
#include "engine/kernels/int8_gemm.h"
#include "engine/kernels/int8_quant.h"
#include "engine/kernels/kernel_types.h"
#include "engine/kernels/static_act_quant.h"

namespace scored::cuda {
namespace {

int64_t ActBytes(ComputeDtype dtype) { return dtype == ComputeDtype::kBf16 ? 2 : 4; }

}  // namespace

bool SumsInHalves(const DeviceLinear& linear, ComputeDtype dtype) {
  const int64_t in = linear.in_features();
  return !linear.fp8_resident() && !linear.w8a8_dynamic_fp8() && !linear.w8a8_dynamic_int8() && in % 2 == 0 &&
         (in / 2 * ActBytes(dtype)) % 16 == 0;
}

LinearPlan PlanLinear(const DeviceLinear& linear, LinearOut out, const LinearSite& site) {
  const bool bf16 = site.dtype == ComputeDtype::kBf16;
  LinearPlan plan;
  if (linear.fp8_resident()) {
    plan.kernel = LinearKernel::kFp8Gemm;
  } else if (linear.int8_resident()) {
    plan.kernel = LinearKernel::kInt8Gemm;
  }
  if (out == LinearOut::kComputeDtype) {
    plan.types = bf16 ? GemmTypes::kBf16ToBf16 : GemmTypes::kFp32;
  } else {
    plan.types = bf16 ? GemmTypes::kBf16ToFp32 : GemmTypes::kFp32;
  }
  plan.gemm_types = plan.types;
  if (plan.kernel == LinearKernel::kFp8Gemm) {
    plan.gemm_types = plan.types == GemmTypes::kBf16ToBf16 ? GemmTypes::kFp8ToBf16 : GemmTypes::kFp8ToFp32;
  }
  plan.in_halves = out == LinearOut::kResidual && !site.tensor_parallel && site.row_parallel_halves &&
                   SumsInHalves(linear, site.dtype);
  plan.fed_fp8 = bf16 && linear.fp8_resident() && !(site.tensor_parallel && linear.act_amax_all_reduce()) &&
                 linear.input_rotations().empty() && linear.output_rotations().empty();
  return plan;
}

template <typename T>
LinearRunner<T>::LinearRunner(GemmRunner& gemm, Activations* acts, const TensorParallelContext* tp,
                              ComputeDtype dtype, cudaStream_t stream)
    : gemm_(gemm),
      tp_(tp),
      site_{dtype, tp != nullptr, acts->row_parallel_halves},
      stream_(stream),
      proj_(acts->proj.as<float>()),
      act_amax_(acts->act_amax.as<float>()),
      act_fp8_(acts->act_fp8.as<uint8_t>()),
      fp8_scale_norm_(acts->act_scale.as<float>()) {}

template <typename T>
LinearPlan LinearRunner<T>::Plan(const DeviceLinear& linear, LinearOut out) const {
  return PlanLinear(linear, out, site_);
}

template <typename T>
absl::Status LinearRunner<T>::Run(const WeightStream::Lease& use, const LinearPlan& plan, T* x, void* y,
                                  const LinearInOut& io, const RowChunk& ch) {
  const DeviceLinear& w = *use.linear;
  if (w.input_rotations().empty() && w.output_rotations().empty()) return Product(use, plan, x, y, io, ch);
  // transform_config's online rotations (device_weights.h DeviceRotation): the input's in place before the
  // product, the outputs' on their parts' columns after it.
  const int64_t m = ch.rows, in = w.in_features(), out = w.out_features();
  for (const DeviceRotation& r : w.input_rotations()) {
    SCORED_RETURN_IF_ERROR(kernels::HadamardRotate<T>(x + ch.begin * in, in, m, r.width, r.view, stream_));
  }
  SCORED_RETURN_IF_ERROR(Product(use, plan, x, y, io, ch));
  if (w.output_rotations().empty()) return absl::OkStatus();
  if (io.add_to_output || io.unscaled_fp8_output || plan.types != types_) {
    return absl::InternalError(
        "an output rotation of a linear whose output is not written in the compute dtype");
  }
  for (const DeviceRotation& r : w.output_rotations()) {
    SCORED_RETURN_IF_ERROR(kernels::HadamardRotate<T>(static_cast<T*>(y) + ch.begin * out + r.col_offset, out,
                                                      m, r.width, r.view, stream_));
  }
  return absl::OkStatus();
}

template <typename T>
absl::Status LinearRunner<T>::Product(const WeightStream::Lease& use, const LinearPlan& plan, T* x, void* y,
                                      const LinearInOut& io, const RowChunk& ch) {
  const DeviceLinear& w = *use.linear;
  const int64_t m = ch.rows, in = w.in_features(), out = w.out_features();
  const int64_t y_elem = plan.types == GemmTypes::kBf16ToBf16 ? 2 : 4;
  T* x_rows = x + ch.begin * in;                                   // [m, in]
  void* y_rows = static_cast<char*>(y) + ch.begin * out * y_elem;  // [m, out]
  if (plan.kernel == LinearKernel::kFp8Gemm) return Fp8Linear(w, plan, x_rows, y_rows, io, ch);
  if (plan.kernel == LinearKernel::kInt8Gemm) return Int8Linear(w, plan, x_rows, y_rows, io, ch);
  if (io.fp8_input_scales != nullptr || io.unscaled_fp8_output) {
    return absl::InternalError("FP8 input / output requested of a linear without a real FP8 GEMM");
  }
  if (w.w8a8_dynamic_fp8() && w.act_amax_all_reduce() && tp_ != nullptr) {
    // Row-parallel shard: the token's scale is the amax over every rank's columns.
    float* amax = act_amax_ + ch.begin;
    SCORED_RETURN_IF_ERROR(kernels::Fp8RowAmax<T>(x_rows, in, m, in, amax, stream_));
    SCORED_RETURN_IF_ERROR(
        tp_->comm->AllReduce(amax, amax, m, dist::ReduceDType::kF32, dist::ReduceOp::kMax, stream_));
    SCORED_RETURN_IF_ERROR(kernels::FakeQuantizeFp8PerTokenWithAmax<T>(x_rows, in, m, in, amax, stream_));
  } else if (w.w8a8_dynamic_fp8()) {
    const int64_t group = w.act_group_size() > 0 ? w.act_group_size() : in;
    SCORED_RETURN_IF_ERROR(
        kernels::FakeQuantizeFp8PerToken<T>(x_rows, group, m * (in / group), group, stream_));
  } else if (w.w8a8_dynamic_int8()) {
    SCORED_RETURN_IF_ERROR(Int8FakeQuantize(w, x_rows, ch));
  } else if (w.static_act() == DeviceLinear::StaticAct::kFp8) {
    SCORED_RETURN_IF_ERROR(kernels::FakeQuantizeFp8Static<T>(x_rows, in, m, in, w.static_scale(), stream_));
  } else if (w.static_act() == DeviceLinear::StaticAct::kInt8) {
    SCORED_RETURN_IF_ERROR(kernels::FakeQuantizeInt8Static<T>(x_rows, in, m, in, w.static_scale(),
                                                              w.static_zero_point(), stream_));
  }
  if (plan.in_halves) {
    // Two GEMMs over the input column halves, each adding into y (SumsInHalves): tp 2's order of sums.
    const int64_t half = in / 2;
    LinearOptions halves = LinearOptions::AccumulateColumns(in);
    halves.plan_rows = io.plan_rows;
    SCORED_RETURN_IF_ERROR(
        gemm_.Linear(x_rows, use.weight, y_rows, m, out, half, plan.types, stream_, halves));
    return gemm_.Linear(x_rows + half, static_cast<const T*>(use.weight) + half, y_rows, m, out, half,
                        plan.types, stream_, halves);
  }
  LinearOptions options;
  options.accumulate = io.add_to_output;
  options.plan_rows = io.plan_rows;
  return gemm_.Linear(x_rows, use.weight, y_rows, m, out, in, plan.types, stream_, options);
}

// W8A8 INT8: x_rows [m, in] quantize-dequantized to int8 per token in place (kernels/int8_quant.h); on a
// row-parallel shard with each token's (hi, -lo) all-reduced (max) over the ranks first.
template <typename T>
absl::Status LinearRunner<T>::Int8FakeQuantize(const DeviceLinear& w, T* x_rows, const RowChunk& ch) {
  const int64_t m = ch.rows, in = w.in_features();
  if (!(w.act_amax_all_reduce() && tp_ != nullptr)) {
    return kernels::FakeQuantizeInt8PerToken<T>(x_rows, in, m, in, w.act_symmetric(), stream_);
  }
  float* range = act_amax_ + 2 * ch.begin;  // [m, 2]
  SCORED_RETURN_IF_ERROR(kernels::Int8RowRange<T>(x_rows, in, m, in, range, stream_));
  SCORED_RETURN_IF_ERROR(
      tp_->comm->AllReduce(range, range, 2 * m, dist::ReduceDType::kF32, dist::ReduceOp::kMax, stream_));
  return kernels::FakeQuantizeInt8PerTokenWithRange<T>(x_rows, in, m, in, w.act_symmetric(), range, stream_);
}

// INT8 GEMM on int8 tensor cores of chunk ch's rows x_rows [m, in] into y_rows [m, out]
// (kernels/int8_gemm.h): x quantized per token into act_fp8's bytes (int8) and a per-token scale, on a
// row-parallel shard with each token's (hi, -lo) all-reduced (max) over the ranks first; with
// io.add_to_output y (fp32) += the result.
template <typename T>
absl::Status LinearRunner<T>::Int8Linear(const DeviceLinear& w, const LinearPlan& plan, T* x_rows,
                                         void* y_rows, const LinearInOut& io, const RowChunk& ch) {
  if (io.fp8_input_scales != nullptr || io.unscaled_fp8_output) {
    return absl::InternalError("FP8 input / output requested of an INT8 linear");
  }
  const int64_t m = ch.rows, in = w.in_features(), out = w.out_features();
  int8_t* x_q = reinterpret_cast<int8_t*>(act_fp8_ + ch.begin * in);  // [m, in]
  float* scale_rows = fp8_scale_norm_ + ch.begin;                     // [m]
  const float* range = nullptr;
  if (w.act_amax_all_reduce() && tp_ != nullptr) {
    float* r = act_amax_ + 2 * ch.begin;  // [m, 2]
    SCORED_RETURN_IF_ERROR(kernels::Int8RowRange<T>(x_rows, in, m, in, r, stream_));
    SCORED_RETURN_IF_ERROR(
        tp_->comm->AllReduce(r, r, 2 * m, dist::ReduceDType::kF32, dist::ReduceOp::kMax, stream_));
    range = r;
  }
  SCORED_RETURN_IF_ERROR(
      kernels::QuantizeInt8PerToken<T>(x_rows, in, m, in, range, x_q, scale_rows, stream_));
  kernels::Int8GemmOutput output = kernels::Int8GemmOutput::kFp32;
  if (plan.types == GemmTypes::kBf16ToBf16) {
    if (io.add_to_output) return absl::InternalError("INT8 accumulation needs an fp32 output");
    output = kernels::Int8GemmOutput::kBf16;
  } else if (io.add_to_output) {
    output = kernels::Int8GemmOutput::kFp32Accumulate;
  }
  return kernels::Int8ScaledGemm(x_q, scale_rows, w.int8_weight(), w.int8_scale(), y_rows, m, out, in, output,
                                 stream_);
}

// Real FP8 GEMM of chunk ch's rows x_rows [m, in] into y_rows [m, out]: x quantized per token into act_fp8
// / a per-token scale (unless a fused kernel did: io.fp8_input_scales); the GEMM applies both scales. With
// io.add_to_output the GEMM writes proj and AddFp8Scaled joins it to y (fp32).
template <typename T>
absl::Status LinearRunner<T>::Fp8Linear(const DeviceLinear& w, const LinearPlan& plan, T* x_rows,
                                        void* y_rows, const LinearInOut& io, const RowChunk& ch) {
  const int64_t m = ch.rows, in = w.in_features(), out = w.out_features();
  uint8_t* x_fp8 = act_fp8_ + ch.begin * in;       // [m, in]
  float* scale_rows = fp8_scale_norm_ + ch.begin;  // [m]
  const float* x_scale = io.fp8_input_scales != nullptr ? io.fp8_input_scales + ch.begin : nullptr;  // [m]
  if (x_scale == nullptr && w.act_amax_all_reduce() && tp_ != nullptr) {
    // Row-parallel shard: the token's scale is the amax over every rank's columns.
    float* amax = act_amax_ + ch.begin;
    SCORED_RETURN_IF_ERROR(kernels::Fp8RowAmax<T>(x_rows, in, m, in, amax, stream_));
    SCORED_RETURN_IF_ERROR(
        tp_->comm->AllReduce(amax, amax, m, dist::ReduceDType::kF32, dist::ReduceOp::kMax, stream_));
    SCORED_RETURN_IF_ERROR(
        kernels::QuantizeFp8PerTokenWithAmax<T>(x_rows, in, m, in, amax, x_fp8, scale_rows, stream_));
    x_scale = scale_rows;
  } else if (x_scale == nullptr) {
    SCORED_RETURN_IF_ERROR(kernels::QuantizeFp8PerToken<T>(x_rows, in, m, in, x_fp8, scale_rows, stream_));
    x_scale = scale_rows;
  }
  const GemmTypes fp8_types = plan.gemm_types;
  if (!io.add_to_output) {
    Fp8LinearOptions options;
    options.leave_unscaled = io.unscaled_fp8_output;
    return gemm_.Fp8Linear(x_fp8, x_scale, w.fp8_weight(), w.fp8_scale(), y_rows, m, out, in, fp8_types,
                           stream_, options);
  }
  if (fp8_types != GemmTypes::kFp8ToFp32) return absl::InternalError("FP8 accumulation needs an fp32 output");
  SCORED_ASSIGN_OR_RETURN(const bool scaled, gemm_.Fp8ScalesInEpilogue(out, in, fp8_types));
  float* proj_rows = proj_ + ch.begin * out;  // [m, out]
  SCORED_RETURN_IF_ERROR(gemm_.Fp8Linear(x_fp8, x_scale, w.fp8_weight(), w.fp8_scale(), proj_rows, m, out, in,
                                         fp8_types, stream_, Fp8LinearOptions::LeaveUnscaled()));
  return kernels::AddFp8Scaled(proj_rows, m, out, scaled ? nullptr : x_scale,
                               scaled ? nullptr : w.fp8_scale(), static_cast<float*>(y_rows), stream_);
}

template class LinearRunner<kernels::bf16_t>;
template class LinearRunner<float>;

}  // namespace scored::cuda
