// The scaled INT8 GEMM of kernels/int8_gemm.h: CUTLASS 3's SM90 collective builders (TMA loads, wgmma
// s32.s8.s8, warp-specialized ping-pong consumers) with an epilogue visitor tree that multiplies the int32
// accumulator, converted to fp32, by the weight's channel scale (a row vector broadcast over the tile's
// rows), then by the token's scale (a column vector broadcast over its columns), and for kFp32Accumulate adds
// the output's previous value.
#include <array>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/epilogue/fusion/sm90_callbacks_tma_warpspecialized.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/util/packed_stride.hpp"
#include "engine/kernels/int8_gemm.h"
#include "engine/kernels/kernel_support.cuh"

namespace scored::kernels {
namespace {

using cute::_1;
using cute::_128;
using cute::_2;
using cute::Shape;

// 128 x 128 output tiles with 128-byte k slices (one 128-byte swizzle row of int8), clusters of two CTAs
// along m sharing each weight tile's multicast load. Ping-pong: two consumer warp groups alternate tiles so
// one's epilogue overlaps the other's math.
using TileShape = Shape<_128, _128, _128>;
using ClusterShape = Shape<_2, _1, _1>;
using MainloopSchedule = cutlass::gemm::KernelTmaWarpSpecializedPingpong;
using EpilogueSchedule = cutlass::epilogue::TmaWarpSpecialized;

// acc (int32 -> fp32) * w_scale[column], then * x_scale[row] (+ y for the accumulating variant).
using AccFetch = cutlass::epilogue::fusion::Sm90AccFetch;
using SrcFetch = cutlass::epilogue::fusion::Sm90SrcFetch<float>;
using WScale = cutlass::epilogue::fusion::Sm90RowBroadcast<0, TileShape, float>;
using XScale = cutlass::epilogue::fusion::Sm90ColBroadcast<0, TileShape, float>;
constexpr auto kRound = cutlass::FloatRoundStyle::round_to_nearest;
using ScaleByW = cutlass::epilogue::fusion::Sm90EVT<
    cutlass::epilogue::fusion::Sm90Compute<cutlass::multiplies, float, float, kRound>, WScale, AccFetch>;
template <typename ElementD>
using ScaleByXW = cutlass::epilogue::fusion::Sm90EVT<
    cutlass::epilogue::fusion::Sm90Compute<cutlass::multiplies, ElementD, float, kRound>, XScale, ScaleByW>;
using ScaleByXWPlusY = cutlass::epilogue::fusion::Sm90EVT<
    cutlass::epilogue::fusion::Sm90Compute<cutlass::homogeneous_multiply_add, float, float, kRound>, XScale,
    ScaleByW, SrcFetch>;

template <typename ElementD, typename ElementC, typename Fusion>
struct ScaledGemm {
  using LayoutA = cutlass::layout::RowMajor;     // x [m, k]
  using LayoutB = cutlass::layout::ColumnMajor;  // w [n, k] row-major = [k, n] column-major
  using LayoutD = cutlass::layout::RowMajor;     // y [m, n]
  static constexpr int kAlignAB = 16;            // int8 elements per 16-byte access
  static constexpr int kAlignD = 16 / sizeof(ElementD);

  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, int32_t, float, ElementC, LayoutD, kAlignD, ElementD,
      LayoutD, kAlignD, EpilogueSchedule, Fusion>::CollectiveOp;
  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, int8_t, LayoutA, kAlignAB, int8_t, LayoutB,
      kAlignAB, int32_t, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(
          sizeof(typename Epilogue::SharedStorage))>,
      MainloopSchedule>::CollectiveOp;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, Mainloop, Epilogue,
                                                      cutlass::gemm::PersistentScheduler>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
};

// The device's SM count, asked once per device (the kernel's persistent grid is sized by it).
int SmCount(int device) {
  static std::mutex mu;
  static std::array<int, 64> counts{};
  std::lock_guard<std::mutex> lock(mu);
  if (device < 0 || device >= static_cast<int>(counts.size())) return 0;
  if (counts[device] == 0) {
    cudaDeviceGetAttribute(&counts[device], cudaDevAttrMultiProcessorCount, device);
  }
  return counts[device];
}

template <typename G>
absl::Status Run(const typename G::Gemm::Arguments& args, cudaStream_t stream) {
  typename G::Gemm gemm;
  if (gemm.can_implement(args) != cutlass::Status::kSuccess) {
    return absl::InvalidArgumentError("the int8 GEMM cannot take this problem (alignment or shape)");
  }
  if (G::Gemm::get_workspace_size(args) != 0) {
    return absl::InternalError("the int8 GEMM asked for a workspace (not provided)");
  }
  cutlass::Status s = gemm.initialize(args, nullptr, stream);
  if (s == cutlass::Status::kSuccess) s = gemm.run(stream);
  if (s != cutlass::Status::kSuccess) {
    return absl::InternalError(absl::StrCat("int8 GEMM launch failed: ", cutlassGetStatusString(s), " (",
                                            cudaGetErrorString(cudaGetLastError()), ")"));
  }
  return absl::OkStatus();
}

template <typename G, typename FusionArgs>
typename G::Gemm::Arguments MakeArguments(const int8_t* x, const int8_t* w, const void* c, void* y, int m,
                                          int n, int k, FusionArgs fusion, int device) {
  using StrideA = typename G::Gemm::GemmKernel::StrideA;
  using StrideB = typename G::Gemm::GemmKernel::StrideB;
  using StrideC = typename G::Gemm::GemmKernel::StrideC;
  using StrideD = typename G::Gemm::GemmKernel::StrideD;
  using ElementC = typename G::Gemm::GemmKernel::ElementC;
  using ElementD = typename G::Gemm::GemmKernel::ElementD;
  typename G::Gemm::Arguments args{
      cutlass::gemm::GemmUniversalMode::kGemm,
      {m, n, k, 1},
      {x, cutlass::make_cute_packed_stride(StrideA{}, {m, k, 1}), w,
       cutlass::make_cute_packed_stride(StrideB{}, {n, k, 1})},
      {fusion, static_cast<const ElementC*>(c), cutlass::make_cute_packed_stride(StrideC{}, {m, n, 1}),
       static_cast<ElementD*>(y), cutlass::make_cute_packed_stride(StrideD{}, {m, n, 1})}};
  args.hw_info.device_id = device;
  args.hw_info.sm_count = SmCount(device);
  return args;
}

#if defined(SCORED_INT8_GEMM_SM90)
// This file's module probe: ModuleIsSm90a (kernel_support.cuh).
__global__ void Int8GemmModuleProbe() {}

bool LoadedSm90aCode() {
  static const bool sm90a = ModuleIsSm90a(reinterpret_cast<const void*>(Int8GemmModuleProbe));
  return sm90a;
}
#endif

}  // namespace

bool Int8GemmSupported(int device) {
#if defined(SCORED_INT8_GEMM_SM90)
  return LoadedSm90aCode() && DeviceIsSm90(device);
#else
  (void)device;
  return false;
#endif
}

absl::Status CheckInt8GemmShape(int64_t m, int64_t n, int64_t k) {
  if (m < 1 || n < 16 || k < 16 || n % 16 != 0 || k % 16 != 0 || k >= 131072 || m > (int64_t{1} << 30) ||
      n > (int64_t{1} << 30)) {
    return absl::InvalidArgumentError(absl::StrCat("int8 GEMM shape m ", m, " n ", n, " k ", k,
                                                   ": needs m >= 1, n and k multiples of 16, k < 131072"));
  }
  return absl::OkStatus();
}

absl::Status Int8ScaledGemm(const int8_t* x, const float* x_scale, const int8_t* w, const float* w_scale,
                            void* y, int64_t m, int64_t n, int64_t k, Int8GemmOutput output,
                            cudaStream_t stream) {
  const absl::Status shape = CheckInt8GemmShape(m, n, k);
  if (!shape.ok()) return shape;
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess || !Int8GemmSupported(device)) {
    cudaGetLastError();
    return absl::FailedPreconditionError("int8 tensor-core GEMMs need an sm_90 device and a build for 90a");
  }
  const int mi = static_cast<int>(m), ni = static_cast<int>(n), ki = static_cast<int>(k);
  const typename WScale::Arguments ws{w_scale, 0.0f, {}};
  const typename XScale::Arguments xs{x_scale, 0.0f, {}};
  const typename ScaleByW::Arguments by_w{ws, {}, {}};
  switch (output) {
    case Int8GemmOutput::kBf16: {
      using G = ScaledGemm<cutlass::bfloat16_t, void, ScaleByXW<cutlass::bfloat16_t>>;
      const typename ScaleByXW<cutlass::bfloat16_t>::Arguments fusion{xs, by_w, {}};
      return Run<G>(MakeArguments<G>(x, w, nullptr, y, mi, ni, ki, fusion, device), stream);
    }
    case Int8GemmOutput::kFp32: {
      using G = ScaledGemm<float, void, ScaleByXW<float>>;
      const typename ScaleByXW<float>::Arguments fusion{xs, by_w, {}};
      return Run<G>(MakeArguments<G>(x, w, nullptr, y, mi, ni, ki, fusion, device), stream);
    }
    case Int8GemmOutput::kFp32Accumulate: {
      using G = ScaledGemm<float, float, ScaleByXWPlusY>;
      const typename ScaleByXWPlusY::Arguments fusion{xs, by_w, {}, {}};
      return Run<G>(MakeArguments<G>(x, w, y, y, mi, ni, ki, fusion, device), stream);
    }
  }
  return absl::InvalidArgumentError("unknown int8 GEMM output");
}

}  // namespace scored::kernels
