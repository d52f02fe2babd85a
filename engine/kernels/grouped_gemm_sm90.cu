// The Hopper grouped expert GEMM of kernels/grouped_gemm.h (GroupedGemmSm90): CUTLASS 3's SM90 ptr-array
// grouped GEMM (TMA loads whose descriptors the kernel rewrites per expert, wgmma bf16 x bf16 -> fp32,
// warp-specialized cooperative or ping-pong consumers, a persistent grid over every expert's tiles) with the
// problem shapes only on the device: a small kernel (a thread per expert) first writes the arrays CUTLASS
// reads (its {m_e, n, k} from the device offsets, the A / B / D pointers, the strides) into the caller's
// workspace, so nothing is read back to the host and the pair can be captured in a CUDA graph.
//
// Batch invariance: GroupProblemShape kernels have no split-K or stream-K (PersistentTileSchedulerSm90Group
// hands out whole output tiles): each output tile is one CTA's, its k loop is the tiles in ascending order,
// each a fixed sequence of wgmma k16 steps, and rows past the expert's count are TMA's zero fill. So a row's
// result depends only on its input row and its expert's weight.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/epilogue/fusion/operations.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/group_array_problem_shape.hpp"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "engine/base/status_macros.h"
#include "engine/kernels/dequant_decode.cuh"
#include "engine/kernels/grouped_gemm.h"
#include "engine/kernels/kernel_support.cuh"

namespace scored::kernels {
namespace {

using cute::_1;
using cute::_128;
using cute::_2;
using cute::_256;
using cute::_64;
using cute::Shape;

using ProblemShape = cutlass::gemm::GroupProblemShape<Shape<int, int, int>>;  // {m_e, n, k} per expert
using UnderlyingShape = ProblemShape::UnderlyingProblemShape;

// 64-column k slices (one 128-byte swizzle row of bf16). Cooperative: 128 x 256 output tiles, both consumer
// warp groups on one (64 x 256 each); without clusters (a small expert's tile never waits for a partner CTA)
// or in clusters of two CTAs along m, which share each weight tile's load (TMA multicast: half the weight
// traffic from L2; an expert's odd last row tile pairs with an empty one). Ping-pong: 128 x 128 tiles, no
// clusters, the two consumer warp groups on alternate tiles, one's epilogue overlapping the other's math
// (short k loops: the down GEMM's k 768 is 12 slices).
struct Cooperative {
  using TileShape = Shape<_128, _256, _64>;
  using ClusterShape = Shape<_1, _1, _1>;
  using MainloopSchedule = cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperative;
  using EpilogueSchedule = cutlass::epilogue::PtrArrayTmaWarpSpecializedCooperative;
};
struct Cooperative2x1 : Cooperative {
  using ClusterShape = Shape<_2, _1, _1>;
};
struct Pingpong {
  using TileShape = Shape<_128, _128, _64>;
  using ClusterShape = Shape<_1, _1, _1>;
  using MainloopSchedule = cutlass::gemm::KernelPtrArrayTmaWarpSpecializedPingpong;
  using EpilogueSchedule = cutlass::epilogue::PtrArrayTmaWarpSpecializedPingpong;
};

template <typename OutT, typename Config>
struct Sm90Grouped {
  using TileShape = typename Config::TileShape;
  using ClusterShape = typename Config::ClusterShape;
  using MainloopSchedule = typename Config::MainloopSchedule;
  using EpilogueSchedule = typename Config::EpilogueSchedule;
  using ElementD = std::conditional_t<std::is_same_v<OutT, float>, float, cutlass::bfloat16_t>;
  using LayoutA = cutlass::layout::RowMajor;     // x rows [m_e, k], leading dimension ldx
  using LayoutB = cutlass::layout::ColumnMajor;  // W_e [n, k] row-major = [k, n] column-major
  using LayoutD = cutlass::layout::RowMajor;     // y rows [m_e, n], leading dimension ldy
  static constexpr int kAlignAB = 8;             // bf16 elements per 16-byte access
  static constexpr int kAlignD = 16 / sizeof(ElementD);
  // D = 1 * acc, one rounding to ElementD (round to nearest even); no source (C is void).
  using Fusion = cutlass::epilogue::fusion::LinearCombination<ElementD, float, void, float>;

  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, void, LayoutD*, kAlignD, ElementD,
      LayoutD*, kAlignD, EpilogueSchedule, Fusion>::CollectiveOp;
  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, cutlass::bfloat16_t, LayoutA*, kAlignAB,
      cutlass::bfloat16_t, LayoutB*, kAlignAB, float, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(
          sizeof(typename Epilogue::SharedStorage))>,
      MainloopSchedule>::CollectiveOp;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<ProblemShape, Mainloop, Epilogue>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
  using StrideA = typename Kernel::InternalStrideA;
  using StrideB = typename Kernel::InternalStrideB;
  using StrideD = typename Kernel::InternalStrideD;
  // FillTablesKernel sets only mode 0 of each stride (the row step); the others are the layouts' constants.
  static_assert(cute::is_static_v<decltype(cute::get<1>(StrideA{}))> &&
                    cute::is_static_v<decltype(cute::get<1>(StrideB{}))> &&
                    cute::is_static_v<decltype(cute::get<1>(StrideD{}))>,
                "unit column strides expected");
};

// The per-expert arrays at the front of the workspace (each 256-byte aligned), CUTLASS's own workspace after.
struct Tables {
  int64_t shapes = 0, ptr_a = 0, ptr_b = 0, ptr_d = 0, stride_a = 0, stride_b = 0, stride_d = 0, cutlass = 0;
};

constexpr int64_t kAlign = 256;
int64_t RoundUp(int64_t v) { return (v + kAlign - 1) / kAlign * kAlign; }

template <typename G>
Tables TableOffsets(int64_t num_experts) {
  Tables t;
  int64_t at = 0;
  const auto take = [&](int64_t bytes_each) {
    const int64_t begin = at;
    at = RoundUp(at + bytes_each * num_experts);
    return begin;
  };
  t.shapes = take(sizeof(UnderlyingShape));
  t.ptr_a = take(sizeof(void*));
  t.ptr_b = take(sizeof(void*));
  t.ptr_d = take(sizeof(void*));
  t.stride_a = take(sizeof(typename G::StrideA));
  t.stride_b = take(sizeof(typename G::StrideB));
  t.stride_d = take(sizeof(typename G::StrideD));
  t.cutlass = at;
  return t;
}

// The device's SM count, asked once per device (the persistent grid's size and the tensor-map workspace's).
int SmCount(int device) {
  static std::mutex mu;
  static std::array<int, 64> counts{};
  std::lock_guard<std::mutex> lock(mu);
  if (device < 0 || device >= static_cast<int>(counts.size())) return 0;
  if (counts[device] == 0) {
    if (cudaDeviceGetAttribute(&counts[device], cudaDevAttrMultiProcessorCount, device) != cudaSuccess) {
      cudaGetLastError();
      counts[device] = 0;
    }
  }
  return counts[device];
}

template <typename G>
typename G::Gemm::Arguments MakeArguments(void* workspace, int64_t num_experts, int device, int sm_count) {
  using ElementD = typename G::ElementD;
  const Tables t = TableOffsets<G>(num_experts);
  char* const base = static_cast<char*>(workspace);
  // The table at byte `offset` of the workspace (null without one: sizing only).
  const auto at = [base](int64_t offset) -> void* { return base != nullptr ? base + offset : nullptr; };
  typename G::Gemm::Arguments args{
      cutlass::gemm::GemmUniversalMode::kGrouped,
      {static_cast<int>(num_experts), static_cast<UnderlyingShape*>(at(t.shapes)), nullptr},
      {static_cast<const cutlass::bfloat16_t**>(at(t.ptr_a)),
       static_cast<typename G::StrideA*>(at(t.stride_a)),
       static_cast<const cutlass::bfloat16_t**>(at(t.ptr_b)),
       static_cast<typename G::StrideB*>(at(t.stride_b))},
      {{},
       nullptr,
       nullptr,
       static_cast<ElementD**>(at(t.ptr_d)),
       static_cast<typename G::StrideD*>(at(t.stride_d))}};
  args.epilogue.thread.alpha = 1.0f;
  args.epilogue.thread.beta = 0.0f;
  args.hw_info.device_id = device;
  args.hw_info.sm_count = sm_count;
  return args;
}

template <typename G>
int64_t WorkspaceBytesFor(int64_t num_experts, int device, int sm_count) {
  const Tables t = TableOffsets<G>(num_experts);
  const auto args = MakeArguments<G>(nullptr, num_experts, device, sm_count);
  return t.cutlass + RoundUp(static_cast<int64_t>(G::Gemm::get_workspace_size(args)));
}

// One thread per expert: CUTLASS's per-group arguments from the device offsets. weights (a table) or stacked
// ([num_experts, n, k] contiguous) gives W_e.
template <typename G>
__global__ void FillTablesKernel(const bf16_t* x, const int32_t* __restrict__ offsets,
                                 const bf16_t* const* __restrict__ weights, const bf16_t* stacked,
                                 GroupedGemmShape s, typename G::ElementD* y, char* workspace, Tables t) {
  const int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= s.num_experts) return;
  const int64_t begin = offsets[e], end = offsets[e + 1];
  reinterpret_cast<UnderlyingShape*>(workspace + t.shapes)[e] =
      UnderlyingShape{static_cast<int>(end - begin), static_cast<int>(s.n), static_cast<int>(s.k)};
  reinterpret_cast<const bf16_t**>(workspace + t.ptr_a)[e] = x + begin * s.ldx;
  reinterpret_cast<const bf16_t**>(workspace + t.ptr_b)[e] =
      weights != nullptr ? weights[e] : stacked + e * s.n * s.k;
  reinterpret_cast<typename G::ElementD**>(workspace + t.ptr_d)[e] = y + begin * s.ldy;
  typename G::StrideA stride_a{};
  cute::get<0>(stride_a) = s.ldx;
  reinterpret_cast<typename G::StrideA*>(workspace + t.stride_a)[e] = stride_a;
  typename G::StrideB stride_b{};
  cute::get<0>(stride_b) = s.k;
  reinterpret_cast<typename G::StrideB*>(workspace + t.stride_b)[e] = stride_b;
  typename G::StrideD stride_d{};
  cute::get<0>(stride_d) = s.ldy;
  reinterpret_cast<typename G::StrideD*>(workspace + t.stride_d)[e] = stride_d;
}

// A block of kDequantThreads threads per kDequantTile consecutive packed words of the flat (expert, row,
// word) space, a thread per kDequantPerThread of them at a stride of kDequantThreads: word W (8 weights)
// becomes stacked's 16 bytes at W * 16, the 4-bit decode of GroupedGemmInt4 (dequant_decode.cuh's
// PackedIntValue rounded to nearest even bf16). So every load (4 bytes a lane) and every store (16 bytes a
// lane) of a warp is contiguous, and a thread issues all its word loads (the packed word, the scale and zero
// point) before it decodes. A whole tile inside one part of one expert (every tile, when each part's words
// are a multiple of the tile, as in Qwen3-30B-A3B's and Mixtral's shapes) reads the expert's table entry and
// offsets once, together, then its words with no branch between the loads: 0.26 ms for the Qwen3-30B-A3B
// gate|up experts on an H200, 3.9 TB/s, the rate of the same traffic without any decode (looking each word's
// expert up, as the other tiles do: 0.36 ms). Experts without rows (offsets, where given) are skipped. Index:
// uint32_t where every word index fits (int64_t otherwise, slower: 0.34 ms).
constexpr int kDequantThreads = 256;
constexpr int kDequantPerThread = 8;
constexpr int64_t kDequantTile = int64_t{kDequantThreads} * kDequantPerThread;

// One packed word's loads.
struct WordLoads {
  uint32_t packed = 0;
  float scale = 0.0f;
  int32_t zp = 8;
};

// The word `c` of the part's row `local`, its scale and zero point, in Index arithmetic (32-bit where the
// kernel's word indices fit: the scale and zero-point indices are smaller).
template <typename Index>
__device__ __forceinline__ WordLoads LoadWord(const GroupedInt4Part& part, const GroupedInt4Format& f,
                                              Index local, Index c, Index words, Index group_words,
                                              Index scale_cols) {
  WordLoads l;
  const Index g = group_words > 0 ? c / group_words : 0;
  l.scale = FloatAt(part.scale, f.scale_dtype, static_cast<int64_t>(local * scale_cols + g));
  if (!f.symmetric) {
    const uint32_t z = static_cast<uint32_t>(part.zero_point[(local >> 3) * scale_cols + g]);
    l.zp = static_cast<int32_t>((z >> ((local & 7) * 4)) & 0xfu);
  }
  l.packed = static_cast<uint32_t>(part.packed[local * words + c]);
  return l;
}

// A word's 16 bytes of stacked (8 bf16 weights) from its loads.
__device__ __forceinline__ void DecodeStore(const WordLoads& l, uint4* to) {
  uint32_t out[4];
#pragma unroll
  for (int h = 0; h < 4; ++h) {
    const int32_t u0 = static_cast<int32_t>((l.packed >> (8 * h)) & 0xfu);
    const int32_t u1 = static_cast<int32_t>((l.packed >> (8 * h + 4)) & 0xfu);
    const __nv_bfloat162 pair =
        __floats2bfloat162_rn(PackedIntValue(u0, l.zp, l.scale), PackedIntValue(u1, l.zp, l.scale));
    out[h] = *reinterpret_cast<const uint32_t*>(&pair);
  }
  *to = make_uint4(out[0], out[1], out[2], out[3]);
}

template <typename Index>
__global__ void __launch_bounds__(kDequantThreads)
    DequantizeGroupedInt4Kernel(const GroupedInt4Expert* __restrict__ experts,
                                const int32_t* __restrict__ offsets, const GroupedInt4Format f,
                                int64_t num_experts, int64_t n64, int64_t k, bf16_t* __restrict__ stacked) {
  const Index words = static_cast<Index>(k / 8), n = static_cast<Index>(n64);  // words per row
  const Index group_words = static_cast<Index>(f.group_size / 8);
  const Index scale_cols = static_cast<Index>(f.group_size > 0 ? k / f.group_size : 1);
  const Index total = static_cast<Index>(num_experts * n64 * (k / 8));
  const Index tile = static_cast<Index>(blockIdx.x) * static_cast<Index>(kDequantTile);
  const Index tile_last = min(tile + static_cast<Index>(kDequantTile), total) - 1;
  const Index base = tile + threadIdx.x;
  uint4* const to = reinterpret_cast<uint4*>(stacked);
  WordLoads loads[kDequantPerThread];
  // The tile's first expert, its entry and offsets loaded at once (the same addresses in every thread).
  const Index e0 = tile / words / n;
  const GroupedInt4Expert first = experts[e0];
  const bool first_empty = offsets != nullptr && offsets[e0] == offsets[e0 + 1];
  const Index row0 = tile / words - e0 * n, row1 = tile_last / words - e0 * n;
  const Index split = static_cast<Index>(first.split);
  if (tile_last - tile + 1 == static_cast<Index>(kDequantTile) && row1 < n &&
      (row0 >= split) == (row1 >= split)) {
    // A whole tile in one part: the words' loads only, no branch between them.
    if (first_empty) return;
    // The tile's part, chosen once by value (a reference into `first` would put it in local memory).
    const bool second = row0 >= split;
    const GroupedInt4Part part = second ? first.parts[1] : first.parts[0];
    const Index part_row0 = e0 * n + (second ? split : 0);
#pragma unroll
    for (int j = 0; j < kDequantPerThread; ++j) {
      const Index w = base + static_cast<Index>(j * kDequantThreads), row = w / words;
      loads[j] = LoadWord<Index>(part, f, row - part_row0, w - row * words, words, group_words, scale_cols);
    }
#pragma unroll
    for (int j = 0; j < kDequantPerThread; ++j) {
      DecodeStore(loads[j], to + static_cast<int64_t>(base + static_cast<Index>(j * kDequantThreads)));
    }
    return;
  }
  // Else each word's expert looked up.
  bool live[kDequantPerThread];
#pragma unroll
  for (int j = 0; j < kDequantPerThread; ++j) {
    const Index w = base + static_cast<Index>(j * kDequantThreads);
    live[j] = w <= tile_last;
    if (!live[j]) continue;
    const Index row = w / words, c = w - row * words;
    const Index e = row / n, o = row - e * n;
    if (offsets != nullptr && offsets[e] == offsets[e + 1]) {
      live[j] = false;
      continue;
    }
    const GroupedInt4Expert& ex = experts[e];
    const bool second = o >= static_cast<Index>(ex.split);
    const Index local = second ? o - static_cast<Index>(ex.split) : o;
    loads[j] =
        LoadWord<Index>(second ? ex.parts[1] : ex.parts[0], f, local, c, words, group_words, scale_cols);
  }
#pragma unroll
  for (int j = 0; j < kDequantPerThread; ++j) {
    if (live[j]) {
      DecodeStore(loads[j], to + static_cast<int64_t>(base + static_cast<Index>(j * kDequantThreads)));
    }
  }
}

#if defined(SCORED_GROUPED_GEMM_SM90)
// This file's module probe: ModuleIsSm90a (kernel_support.cuh).
__global__ void GroupedGemmSm90ModuleProbe() {}

bool LoadedSm90aCode() {
  static const bool sm90a = ModuleIsSm90a(reinterpret_cast<const void*>(GroupedGemmSm90ModuleProbe));
  return sm90a;
}
#endif

template <typename OutT>
absl::Status CheckSm90(const bf16_t* x, const int32_t* offsets, const GroupedGemmShape& s, const OutT* y,
                       const void* workspace) {
  if (x == nullptr || offsets == nullptr || y == nullptr || workspace == nullptr) {
    return absl::InvalidArgumentError("GroupedGemmSm90: null pointer");
  }
  if (!GroupedGemmSm90Supports(s, sizeof(OutT) == 4)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "GroupedGemmSm90: shape n ", s.n, " k ", s.k, " ldx ", s.ldx, " ldy ", s.ldy, " rows ", s.rows,
        " experts ", s.num_experts, " not supported (n, k, ldx multiples of 8; ldy of 16 bytes)"));
  }
  if (reinterpret_cast<uintptr_t>(x) % 16 != 0 || reinterpret_cast<uintptr_t>(y) % 16 != 0 ||
      reinterpret_cast<uintptr_t>(workspace) % kAlign != 0) {
    return absl::InvalidArgumentError("GroupedGemmSm90: x and y must be 16-byte aligned, the workspace 256");
  }
  return absl::OkStatus();
}

template <typename OutT, typename Config>
absl::Status RunSm90(const bf16_t* x, const int32_t* offsets, const bf16_t* const* weights,
                     const bf16_t* stacked, const GroupedGemmShape& shape, OutT* y, void* workspace,
                     int64_t workspace_bytes, cudaStream_t stream) {
  using G = Sm90Grouped<OutT, Config>;
  SCORED_RETURN_IF_ERROR(CheckSm90(x, offsets, shape, y, workspace));
  if (weights == nullptr && stacked == nullptr) {
    return absl::InvalidArgumentError("GroupedGemmSm90: null weights");
  }
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess || !GroupedGemmSm90Supported(device)) {
    cudaGetLastError();
    return absl::FailedPreconditionError("GroupedGemmSm90 needs an sm_90 device and a build for 90a");
  }
  const int sm_count = SmCount(device);
  if (workspace_bytes < WorkspaceBytesFor<G>(shape.num_experts, device, sm_count)) {
    return absl::InvalidArgumentError(
        absl::StrCat("GroupedGemmSm90: workspace of ", workspace_bytes, " bytes, needs ",
                     WorkspaceBytesFor<G>(shape.num_experts, device, sm_count)));
  }
  const Tables t = TableOffsets<G>(shape.num_experts);
  constexpr int kFillThreads = 128;
  const int blocks = static_cast<int>((shape.num_experts + kFillThreads - 1) / kFillThreads);
  FillTablesKernel<G><<<blocks, kFillThreads, 0, stream>>>(x, offsets, weights, stacked, shape,
                                                           reinterpret_cast<typename G::ElementD*>(y),
                                                           static_cast<char*>(workspace), t);
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) {
    return absl::InternalError(absl::StrCat("GroupedGemmSm90 table launch failed: ", cudaGetErrorString(e)));
  }
  const auto args = MakeArguments<G>(workspace, shape.num_experts, device, sm_count);
  typename G::Gemm gemm;
  if (gemm.can_implement(args) != cutlass::Status::kSuccess) {
    return absl::InvalidArgumentError("GroupedGemmSm90: CUTLASS cannot take this problem");
  }
  cutlass::Status s = gemm.initialize(args, static_cast<char*>(workspace) + t.cutlass, stream);
  if (s == cutlass::Status::kSuccess) s = gemm.run(stream);
  if (s != cutlass::Status::kSuccess) {
    return absl::InternalError(absl::StrCat("GroupedGemmSm90 launch failed: ", cutlassGetStatusString(s),
                                            " (", cudaGetErrorString(cudaGetLastError()), ")"));
  }
  return absl::OkStatus();
}

template <typename OutT>
absl::Status RunSm90(const bf16_t* x, const int32_t* offsets, const bf16_t* const* weights,
                     const bf16_t* stacked, const GroupedGemmShape& shape, OutT* y, void* workspace,
                     int64_t workspace_bytes, GroupedGemmSm90Schedule schedule, cudaStream_t stream) {
  switch (schedule) {
    case GroupedGemmSm90Schedule::kCooperative:
      return RunSm90<OutT, Cooperative>(x, offsets, weights, stacked, shape, y, workspace, workspace_bytes,
                                        stream);
    case GroupedGemmSm90Schedule::kCooperative2x1:
      return RunSm90<OutT, Cooperative2x1>(x, offsets, weights, stacked, shape, y, workspace, workspace_bytes,
                                           stream);
    case GroupedGemmSm90Schedule::kPingpong:
      return RunSm90<OutT, Pingpong>(x, offsets, weights, stacked, shape, y, workspace, workspace_bytes,
                                     stream);
  }
  return absl::InvalidArgumentError("GroupedGemmSm90: unknown schedule");
}

}  // namespace

bool GroupedGemmSm90Supported(int device) {
#if defined(SCORED_GROUPED_GEMM_SM90)
  return LoadedSm90aCode() && DeviceIsSm90(device);
#else
  (void)device;
  return false;
#endif
}

bool GroupedGemmSm90Supports(const GroupedGemmShape& s, bool fp32_out) {
  const int64_t out_align = fp32_out ? 4 : 8;  // elements of a 16-byte row step
  return s.num_experts >= 1 && s.num_experts <= 65535 && s.rows >= 0 && s.rows <= int64_t{0x7fffffff} &&
         s.n > 0 && s.k > 0 && s.n % 8 == 0 && s.k % 8 == 0 && s.n <= int64_t{0x7fffffff} &&
         s.k <= int64_t{0x7fffffff} && s.ldx >= s.k && s.ldx % 8 == 0 && s.ldy >= s.n &&
         s.ldy % out_align == 0;
}

int64_t GroupedGemmSm90WorkspaceBytes(int64_t num_experts) {
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) {
    cudaGetLastError();
    device = 0;
  }
  // Sized for the device's SM count (CUTLASS keeps tensor maps per SM), at least 132 (an H100 SXM).
  const int sm_count = std::max(SmCount(device), 132);
  return std::max({WorkspaceBytesFor<Sm90Grouped<bf16_t, Cooperative>>(num_experts, device, sm_count),
                   WorkspaceBytesFor<Sm90Grouped<float, Cooperative>>(num_experts, device, sm_count),
                   WorkspaceBytesFor<Sm90Grouped<bf16_t, Cooperative2x1>>(num_experts, device, sm_count),
                   WorkspaceBytesFor<Sm90Grouped<float, Cooperative2x1>>(num_experts, device, sm_count),
                   WorkspaceBytesFor<Sm90Grouped<bf16_t, Pingpong>>(num_experts, device, sm_count),
                   WorkspaceBytesFor<Sm90Grouped<float, Pingpong>>(num_experts, device, sm_count)});
}

template <typename OutT>
absl::Status GroupedGemmSm90(const bf16_t* x, const int32_t* offsets, const bf16_t* const* weights,
                             const GroupedGemmShape& shape, OutT* y, void* workspace, int64_t workspace_bytes,
                             cudaStream_t stream, GroupedGemmSm90Schedule schedule) {
  if (weights == nullptr) return absl::InvalidArgumentError("GroupedGemmSm90: null weight table");
  return RunSm90<OutT>(x, offsets, weights, nullptr, shape, y, workspace, workspace_bytes, schedule, stream);
}

template <typename OutT>
absl::Status GroupedGemmSm90Stacked(const bf16_t* x, const int32_t* offsets, const bf16_t* stacked,
                                    const GroupedGemmShape& shape, OutT* y, void* workspace,
                                    int64_t workspace_bytes, cudaStream_t stream,
                                    GroupedGemmSm90Schedule schedule) {
  if (stacked == nullptr) return absl::InvalidArgumentError("GroupedGemmSm90Stacked: null weights");
  return RunSm90<OutT>(x, offsets, nullptr, stacked, shape, y, workspace, workspace_bytes, schedule, stream);
}

absl::Status DequantizeGroupedInt4(const GroupedInt4Expert* experts, const int32_t* offsets,
                                   const GroupedInt4Format& format, int64_t num_experts, int64_t n, int64_t k,
                                   bf16_t* stacked, cudaStream_t stream) {
  if (experts == nullptr || stacked == nullptr) {
    return absl::InvalidArgumentError("DequantizeGroupedInt4: null pointer");
  }
  if (num_experts < 1 || num_experts > 65535 || !GroupedGemmSupports(n, k, true) ||
      (format.group_size != 0 && format.group_size != 32 && format.group_size != 64 &&
       format.group_size != 128) ||
      (format.group_size > 0 && k % format.group_size != 0) ||
      reinterpret_cast<uintptr_t>(stacked) % 16 != 0) {
    return absl::InvalidArgumentError(absl::StrCat("DequantizeGroupedInt4: experts ", num_experts, " n ", n,
                                                   " k ", k, " group ", format.group_size,
                                                   " (or a stacked buffer not 16-byte aligned)"));
  }
  const int64_t words = num_experts * n * (k / 8);
  const int64_t blocks = (words + kDequantTile - 1) / kDequantTile;
  if (words + kDequantTile <= int64_t{0xffffffff}) {  // every word index of the last tile fits 32 bits
    DequantizeGroupedInt4Kernel<uint32_t><<<static_cast<unsigned>(blocks), kDequantThreads, 0, stream>>>(
        experts, offsets, format, num_experts, n, k, stacked);
  } else {
    DequantizeGroupedInt4Kernel<int64_t><<<static_cast<unsigned>(blocks), kDequantThreads, 0, stream>>>(
        experts, offsets, format, num_experts, n, k, stacked);
  }
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) {
    return absl::InternalError(absl::StrCat("DequantizeGroupedInt4 launch failed: ", cudaGetErrorString(e)));
  }
  return absl::OkStatus();
}

template absl::Status GroupedGemmSm90<bf16_t>(const bf16_t*, const int32_t*, const bf16_t* const*,
                                              const GroupedGemmShape&, bf16_t*, void*, int64_t, cudaStream_t,
                                              GroupedGemmSm90Schedule);
template absl::Status GroupedGemmSm90<float>(const bf16_t*, const int32_t*, const bf16_t* const*,
                                             const GroupedGemmShape&, float*, void*, int64_t, cudaStream_t,
                                             GroupedGemmSm90Schedule);
template absl::Status GroupedGemmSm90Stacked<bf16_t>(const bf16_t*, const int32_t*, const bf16_t*,
                                                     const GroupedGemmShape&, bf16_t*, void*, int64_t,
                                                     cudaStream_t, GroupedGemmSm90Schedule);
template absl::Status GroupedGemmSm90Stacked<float>(const bf16_t*, const int32_t*, const bf16_t*,
                                                    const GroupedGemmShape&, float*, void*, int64_t,
                                                    cudaStream_t, GroupedGemmSm90Schedule);

}  // namespace scored::kernels
