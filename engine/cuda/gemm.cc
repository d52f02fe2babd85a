#include "engine/cuda/gemm.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/base/dtype.h"
#include "engine/base/logging.h"
#include "engine/base/status_macros.h"
#include "engine/kernels/cuda_check.h"
#include "engine/kernels/fp8_scale.h"
#include "engine/kernels/kernel_types.h"

namespace scored::cuda {
namespace {

// 32 MiB: what cuBLAS documents as enough for every Hopper kernel.
constexpr int64_t kWorkspaceBytes = int64_t{32} << 20;
// Candidates asked of the heuristic; the first without split-K is pinned unless Tune() finds a faster one.
constexpr int kHeuristicCandidates = 32;
// Tune(): how many of the heuristic's candidates without split-K are timed, runs per candidate (the median
// counts), and the gain over the first candidate below which the first is kept (timing noise). The
// heuristic's order is a prediction: on an H200 the four it ranks first for the 8B layer shapes were
// within 3% of each other (down_proj at ~680 TFLOP/s against gate|up's ~775), so more are timed.
constexpr int kTuneCandidates = 16;
constexpr int kTuneRuns = 5;
constexpr double kTuneMinGain = 0.02;
// Below this median (ms) the first candidate is kept: tiny GEMMs (stories260K: 14-15 us, candidates within
// 10% of each other, measured on an H200) are timing noise, and a noise-driven choice made two loads of
// one model disagree in the last bit.
constexpr double kTuneMinMs = 0.05;

absl::Status CublasStatus(cublasStatus_t status, const char* what) {
  if (status == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, " failed: cuBLAS status ", static_cast<int>(status)));
}

cudaDataType_t InputType(GemmTypes types) {
  if (IsFp8(types)) return CUDA_R_8F_E4M3;
  return types == GemmTypes::kFp32 ? CUDA_R_32F : CUDA_R_16BF;
}
cudaDataType_t OutputType(GemmTypes types) {
  return types == GemmTypes::kBf16ToBf16 || types == GemmTypes::kFp8ToBf16 ? CUDA_R_16BF : CUDA_R_32F;
}

// FP8: one fp32 scale per row of A (w: per output channel, cuBLASLt's M) and per column of B (x: per token,
// cuBLASLt's N), applied to the fp32 accumulator in the epilogue.
absl::Status SetFp8ScaleModes(cublasLtMatmulDesc_t desc) {
  const int32_t mode = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
  SCORED_RETURN_IF_ERROR(CublasStatus(
      cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &mode, sizeof(mode)),
      "set A_SCALE_MODE"));
  return CublasStatus(
      cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mode, sizeof(mode)),
      "set B_SCALE_MODE");
}

// B (x) and C (y) layouts for num_tokens rows: col-major [in, num_tokens] and [out, num_tokens].
struct TokenLayouts {
  cublasLtMatrixLayout_t x = nullptr;
  cublasLtMatrixLayout_t y = nullptr;
  ~TokenLayouts() {
    if (x != nullptr) cublasLtMatrixLayoutDestroy(x);
    if (y != nullptr) cublasLtMatrixLayoutDestroy(y);
  }
  absl::Status Init(int64_t num_tokens, int64_t out_features, int64_t in_features, int64_t ld,
                    GemmTypes types) {
    SCORED_RETURN_IF_ERROR(
        CublasStatus(cublasLtMatrixLayoutCreate(&x, InputType(types), static_cast<uint64_t>(in_features),
                                                static_cast<uint64_t>(num_tokens), ld),
                     "cublasLtMatrixLayoutCreate(x)"));
    return CublasStatus(cublasLtMatrixLayoutCreate(&y, OutputType(types), static_cast<uint64_t>(out_features),
                                                   static_cast<uint64_t>(num_tokens), out_features),
                        "cublasLtMatrixLayoutCreate(y)");
  }
};

}  // namespace

absl::StatusOr<std::unique_ptr<GemmRunner>> GemmRunner::Create(int64_t max_tokens) {
  if (max_tokens <= 0) return absl::InvalidArgumentError("GemmRunner: max_tokens must be positive");
  std::unique_ptr<GemmRunner> runner(new GemmRunner());
  runner->max_tokens_ = max_tokens;
  SCORED_RETURN_IF_ERROR(CublasStatus(cublasLtCreate(&runner->handle_), "cublasLtCreate"));
  SCORED_ASSIGN_OR_RETURN(runner->workspace_,
                          DeviceBuffer::Allocate(kWorkspaceBytes, "the cuBLASLt workspace"));
  return runner;
}

GemmRunner::~GemmRunner() {
  for (auto& [key, plan] : plans_) {
    if (plan.w_layout != nullptr) cublasLtMatrixLayoutDestroy(plan.w_layout);
    if (plan.desc != nullptr) cublasLtMatmulDescDestroy(plan.desc);
  }
  if (handle_ != nullptr) cublasLtDestroy(handle_);
}

absl::Status GemmRunner::Prepare(int64_t out_features, int64_t in_features, GemmTypes types, int64_t ld) {
  return GetPlan(out_features, in_features, types, ld).status();
}

absl::StatusOr<const GemmRunner::Plan*> GemmRunner::GetPlan(int64_t out_features, int64_t in_features,
                                                            GemmTypes types, int64_t ld, int64_t plan_rows) {
  if (ld == 0) ld = in_features;
  plan_rows = plan_rows <= 0 ? max_tokens_ : std::min(plan_rows, max_tokens_);
  const Key key{out_features, in_features, types, ld, plan_rows};
  if (auto it = plans_.find(key); it != plans_.end()) return &it->second;
  if (out_features <= 0 || in_features <= 0 || ld < in_features) {
    return absl::InvalidArgumentError(
        absl::StrCat("GEMM shape [", out_features, ", ", in_features, "] with row stride ", ld));
  }

  if (IsFp8(types) && (out_features % 16 != 0 || in_features % 16 != 0)) {
    return absl::InvalidArgumentError(absl::StrCat("FP8 GEMM shape [", out_features, ", ", in_features,
                                                   "]: both dimensions must be multiples of 16"));
  }

  // FP8 first asks for outer-vector scales in the epilogue; where cuBLASLt offers no algorithm for them, a
  // plain FP8 GEMM (unit scales) whose output ApplyFp8Scales scales afterwards.
  absl::Status status;
  std::string failures;
  // Probe runners (Fp8Supported) are told which mode to try; others take the mode the probe found.
  const bool try_outer_vec =
      IsFp8(types) && (probe_outer_vec_ >= 0 ? probe_outer_vec_ == 1 : Fp8OuterVec(types));
  for (const bool outer_vec : try_outer_vec ? std::vector<bool>{true, false} : std::vector<bool>{false}) {
    if (probe_outer_vec_ == 1 && !outer_vec) break;  // a probe of the outer-vector mode tries nothing else
    Plan plan;
    plan.out_features = out_features;
    plan.in_features = in_features;
    plan.ld = ld;
    plan.plan_rows = plan_rows;
    plan.fp8_outer_vec = outer_vec;
    status = FindCandidates(&plan, types);
    if (!status.ok()) {
      absl::StrAppend(&failures, failures.empty() ? "" : "; ", status.message());
      continue;
    }
    plan.algo = plan.candidates.front();
    plan.choice = IsFp8(types) ? (outer_vec ? "outer-vector scales; heuristic first"
                                            : "scales after the GEMM; heuristic first")
                               : "heuristic first";
    auto [it, inserted] = plans_.emplace(key, plan);
    return &it->second;
  }
  return absl::Status(status.code(), failures);
}

absl::Status GemmRunner::FindCandidates(Plan* out, GemmTypes types) {
  Plan& plan = *out;
  const int64_t out_features = plan.out_features, in_features = plan.in_features, ld = plan.ld;
  const cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  SCORED_RETURN_IF_ERROR(
      CublasStatus(cublasLtMatmulDescCreate(&plan.desc, compute, CUDA_R_32F), "cublasLtMatmulDescCreate"));
  if (plan.fp8_outer_vec) {
    if (absl::Status s = SetFp8ScaleModes(plan.desc); !s.ok()) {
      cublasLtMatmulDescDestroy(plan.desc);
      return s;
    }
  }
  const cublasOperation_t trans_w = CUBLAS_OP_T, trans_x = CUBLAS_OP_N;
  SCORED_RETURN_IF_ERROR(CublasStatus(
      cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSA, &trans_w, sizeof(trans_w)),
      "set TRANSA"));
  SCORED_RETURN_IF_ERROR(CublasStatus(
      cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSB, &trans_x, sizeof(trans_x)),
      "set TRANSB"));
  SCORED_RETURN_IF_ERROR(CublasStatus(
      cublasLtMatrixLayoutCreate(&plan.w_layout, InputType(types), static_cast<uint64_t>(in_features),
                                 static_cast<uint64_t>(out_features), ld),
      "cublasLtMatrixLayoutCreate(w)"));

  TokenLayouts layouts;
  SCORED_RETURN_IF_ERROR(layouts.Init(plan.plan_rows, out_features, in_features, ld, types));

  cublasLtMatmulPreference_t pref = nullptr;
  SCORED_RETURN_IF_ERROR(
      CublasStatus(cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate"));
  const uint64_t workspace = static_cast<uint64_t>(workspace_.bytes());
  const uint32_t reduction_mask = CUBLASLT_REDUCTION_SCHEME_NONE;
  absl::Status status =
      CublasStatus(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                        &workspace, sizeof(workspace)),
                   "set MAX_WORKSPACE_BYTES");
  if (status.ok()) {
    status =
        CublasStatus(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
                                                          &reduction_mask, sizeof(reduction_mask)),
                     "set REDUCTION_SCHEME_MASK");
  }
  std::vector<cublasLtMatmulHeuristicResult_t> results(kHeuristicCandidates);
  int returned = 0;
  if (status.ok()) {
    status = CublasStatus(
        cublasLtMatmulAlgoGetHeuristic(handle_, plan.desc, plan.w_layout, layouts.x, layouts.y, layouts.y,
                                       pref, kHeuristicCandidates, results.data(), &returned),
        "cublasLtMatmulAlgoGetHeuristic");
  }
  cublasLtMatmulPreferenceDestroy(pref);
  for (int i = 0; status.ok() && i < returned; ++i) {
    if (results[i].state != CUBLAS_STATUS_SUCCESS) continue;
    int32_t splitk = 1;
    size_t written = 0;
    if (cublasLtMatmulAlgoConfigGetAttribute(&results[i].algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splitk,
                                             sizeof(splitk), &written) == CUBLAS_STATUS_SUCCESS &&
        splitk > 1) {
      continue;
    }
    plan.candidates.push_back(results[i].algo);
  }
  if (status.ok() && plan.candidates.empty()) {
    status = absl::InternalError(absl::StrCat(
        "cuBLASLt offers no algorithm without split-K for the ",
        IsFp8(types) ? (plan.fp8_outer_vec ? "FP8 (outer-vector scales) " : "FP8 (unit scales) ") : "",
        "GEMM [", max_tokens_, ", ", in_features, "] x [", out_features, ", ", in_features, "]^T"));
  }
  if (!status.ok()) {
    cublasLtMatrixLayoutDestroy(plan.w_layout);
    cublasLtMatmulDescDestroy(plan.desc);
    return status;
  }
  return absl::OkStatus();
}

cublasStatus_t GemmRunner::Run(const Plan& plan, const cublasLtMatmulAlgo_t& algo, const void* x,
                               const void* w, void* y, int64_t num_tokens, GemmTypes types,
                               const float* x_scale, const float* w_scale, cudaStream_t stream,
                               bool accumulate) {
  if (plan.fp8_outer_vec) {
    // A is w (scales per output channel), B is x (scales per token).
    cublasStatus_t set = cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER,
                                                        &w_scale, sizeof(w_scale));
    if (set != CUBLAS_STATUS_SUCCESS) return set;
    set = cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &x_scale,
                                         sizeof(x_scale));
    if (set != CUBLAS_STATUS_SUCCESS) return set;
  }
  TokenLayouts layouts;
  if (!layouts.Init(num_tokens, plan.out_features, plan.in_features, plan.ld, types).ok()) {
    return CUBLAS_STATUS_INTERNAL_ERROR;
  }
  const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
  return cublasLtMatmul(handle_, plan.desc, &alpha, w, plan.w_layout, x, layouts.x, &beta, y, layouts.y, y,
                        layouts.y, &algo, workspace_.data(), static_cast<size_t>(workspace_.bytes()), stream);
}

absl::Status GemmRunner::Tune(const void* x, const void* w, void* y, int64_t out_features,
                              int64_t in_features, GemmTypes types, cudaStream_t stream, const float* x_scale,
                              const float* w_scale, int64_t ld) {
  if (IsFp8(types) && (x_scale == nullptr || w_scale == nullptr)) {
    return absl::InvalidArgumentError("GemmRunner::Tune: FP8 needs both scale vectors");
  }
  SCORED_ASSIGN_OR_RETURN(const Plan* found, GetPlan(out_features, in_features, types, ld));
  Plan& plan = plans_.at(Key{out_features, in_features, types, found->ld, found->plan_rows});
  if (found->tuned) return absl::OkStatus();
  cudaEvent_t start = nullptr, stop = nullptr;
  SCORED_CUDA_CHECK(cudaEventCreate(&start));
  SCORED_CUDA_CHECK(cudaEventCreate(&stop));
  const int count = std::min<int>(kTuneCandidates, static_cast<int>(plan.candidates.size()));
  std::vector<double> medians(count, -1.0);
  absl::Status status;
  for (int c = 0; c < count && status.ok(); ++c) {
    std::vector<double> times;
    for (int r = 0; r <= kTuneRuns && status.ok(); ++r) {  // run 0 warms up
      if (cudaEventRecord(start, stream) != cudaSuccess) status = absl::InternalError("cudaEventRecord");
      const cublasStatus_t run =
          Run(plan, plan.candidates[c], x, w, y, max_tokens_, types, x_scale, w_scale, stream);
      if (run != CUBLAS_STATUS_SUCCESS) break;  // this candidate cannot run here: not timed
      if (cudaEventRecord(stop, stream) != cudaSuccess || cudaEventSynchronize(stop) != cudaSuccess) {
        status = absl::InternalError("timing a GEMM candidate failed");
        break;
      }
      float ms = 0.0f;
      cudaEventElapsedTime(&ms, start, stop);
      if (r > 0) times.push_back(ms);
    }
    if (static_cast<int>(times.size()) == kTuneRuns) {
      std::sort(times.begin(), times.end());
      medians[c] = times[times.size() / 2];
    }
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  SCORED_RETURN_IF_ERROR(status);
  int best = 0;
  for (int c = 1; c < count; ++c) {
    if (medians[c] > 0 && (medians[best] <= 0 || medians[c] < medians[best])) best = c;
  }
  if (best != 0 && medians[0] > 0 && medians[best] > medians[0] * (1.0 - kTuneMinGain)) best = 0;
  if (medians[0] > 0 && medians[0] < kTuneMinMs) best = 0;
  plan.algo = plan.candidates[best];
  plan.tuned = true;
  plan.choice = absl::StrCat(
      IsFp8(types) ? (plan.fp8_outer_vec ? "outer-vector scales; " : "scales after the GEMM; ") : "",
      "heuristic candidate ", best, " of ", count, " (ms:");
  for (int c = 0; c < count; ++c) absl::StrAppend(&plan.choice, " ", absl::SixDigits(medians[c]));
  absl::StrAppend(&plan.choice, ")");
  return absl::OkStatus();
}

std::string GemmRunner::Choice(int64_t out_features, int64_t in_features, GemmTypes types, int64_t ld) const {
  auto it = plans_.find(Key{out_features, in_features, types, ld == 0 ? in_features : ld, max_tokens_});
  return it == plans_.end() ? std::string() : it->second.choice;
}

absl::Status GemmRunner::Linear(const void* x, const void* w, void* y, int64_t num_tokens,
                                int64_t out_features, int64_t in_features, GemmTypes types,
                                cudaStream_t stream, const LinearOptions& options) {
  if (IsFp8(types)) return absl::InvalidArgumentError("GemmRunner::Linear: FP8 types go through Fp8Linear");
  if (num_tokens < 0 || num_tokens > max_tokens_) {
    return absl::OutOfRangeError(
        absl::StrCat("GEMM with ", num_tokens, " tokens; the engine was sized for ", max_tokens_));
  }
  if (num_tokens == 0) return absl::OkStatus();
  SCORED_ASSIGN_OR_RETURN(const Plan* plan,
                          GetPlan(out_features, in_features, types, options.row_stride, options.plan_rows));
  return CublasStatus(
      Run(*plan, plan->algo, x, w, y, num_tokens, types, nullptr, nullptr, stream, options.accumulate),
      "cublasLtMatmul");
}

absl::Status GemmRunner::Fp8Linear(const uint8_t* x, const float* x_scale, const uint8_t* w,
                                   const float* w_scale, void* y, int64_t num_tokens, int64_t out_features,
                                   int64_t in_features, GemmTypes types, cudaStream_t stream,
                                   const Fp8LinearOptions& options) {
  if (!IsFp8(types)) return absl::InvalidArgumentError("GemmRunner::Fp8Linear: needs an FP8 GemmTypes");
  if (num_tokens < 0 || num_tokens > max_tokens_) {
    return absl::OutOfRangeError(
        absl::StrCat("GEMM with ", num_tokens, " tokens; the engine was sized for ", max_tokens_));
  }
  if (num_tokens == 0) return absl::OkStatus();
  if (x_scale == nullptr || w_scale == nullptr) {
    return absl::InvalidArgumentError("GemmRunner::Fp8Linear: null scale vector");
  }
  SCORED_ASSIGN_OR_RETURN(const Plan* plan, GetPlan(out_features, in_features, types));
  SCORED_RETURN_IF_ERROR(CublasStatus(
      Run(*plan, plan->algo, x, w, y, num_tokens, types, x_scale, w_scale, stream), "cublasLtMatmul (FP8)"));
  if (plan->fp8_outer_vec || options.leave_unscaled) return absl::OkStatus();
  if (types == GemmTypes::kFp8ToBf16) {
    return kernels::ApplyFp8Scales(static_cast<kernels::bf16_t*>(y), num_tokens, out_features, x_scale,
                                   w_scale, stream);
  }
  return kernels::ApplyFp8Scales(static_cast<float*>(y), num_tokens, out_features, x_scale, w_scale, stream);
}

absl::StatusOr<bool> GemmRunner::Fp8ScalesInEpilogue(int64_t out_features, int64_t in_features,
                                                     GemmTypes types) {
  if (!IsFp8(types))
    return absl::InvalidArgumentError("GemmRunner::Fp8ScalesInEpilogue: needs an FP8 GemmTypes");
  SCORED_ASSIGN_OR_RETURN(const Plan* plan, GetPlan(out_features, in_features, types));
  return plan->fp8_outer_vec;
}

namespace {

// FP8 mode per (CUDA ordinal, output type), found once by Fp8Supported.
enum class Fp8Mode { kNone, kOuterVec, kUnitScales };
std::mutex fp8_mu;
std::map<std::pair<int, GemmTypes>, Fp8Mode>& Fp8Modes() {
  static auto* modes = new std::map<std::pair<int, GemmTypes>, Fp8Mode>();
  return *modes;
}

// Runs one 256 x 256 x 256 FP8 GEMM with `runner` (x = w = 0.5, x_scale[t] = 2^-(t % 4), w_scale[o] =
// 2^-(o % 2): y[t, o] = 64 * x_scale[t] * w_scale[o], exact in both modes and telling the two scale vectors
// apart) and checks every output.
absl::Status ProbeFp8(GemmRunner& runner, GemmTypes types) {
  constexpr int64_t kN = 256;
  const bool bf16 = types == GemmTypes::kFp8ToBf16;
  SCORED_ASSIGN_OR_RETURN(DeviceBuffer x, DeviceBuffer::Allocate(kN * kN, "FP8 probe x"));
  SCORED_ASSIGN_OR_RETURN(DeviceBuffer w, DeviceBuffer::Allocate(kN * kN, "FP8 probe w"));
  SCORED_ASSIGN_OR_RETURN(DeviceBuffer y, DeviceBuffer::Allocate(kN * kN * 4, "FP8 probe y"));
  std::vector<float> xs(kN), ws(kN);
  for (int64_t i = 0; i < kN; ++i) {
    xs[i] = 1.0f / static_cast<float>(1 << (i % 4));
    ws[i] = 1.0f / static_cast<float>(1 << (i % 2));
  }
  SCORED_ASSIGN_OR_RETURN(DeviceBuffer dxs, UploadToDevice(xs.data(), kN * 4, "FP8 probe x scale"));
  SCORED_ASSIGN_OR_RETURN(DeviceBuffer dws, UploadToDevice(ws.data(), kN * 4, "FP8 probe w scale"));
  SCORED_CUDA_CHECK(cudaMemset(x.data(), 0x30, kN * kN));  // E4M3 0x30 = 0.5
  SCORED_CUDA_CHECK(cudaMemset(w.data(), 0x30, kN * kN));
  SCORED_CUDA_CHECK(cudaMemset(y.data(), 0, kN * kN * 4));
  SCORED_RETURN_IF_ERROR(runner.Fp8Linear(x.as<uint8_t>(), dxs.as<float>(), w.as<uint8_t>(), dws.as<float>(),
                                          y.data(), kN, kN, kN, types, nullptr));
  SCORED_CUDA_CHECK(cudaStreamSynchronize(nullptr));
  std::vector<float> got(kN * kN);
  if (bf16) {
    std::vector<uint16_t> bits(kN * kN);
    SCORED_CUDA_CHECK(cudaMemcpy(bits.data(), y.data(), kN * kN * 2, cudaMemcpyDeviceToHost));
    for (int64_t i = 0; i < kN * kN; ++i) got[i] = Bf16ToFloat(bits[i]);
  } else {
    SCORED_CUDA_CHECK(cudaMemcpy(got.data(), y.data(), kN * kN * 4, cudaMemcpyDeviceToHost));
  }
  for (int64_t t = 0; t < kN; ++t) {
    for (int64_t o = 0; o < kN; ++o) {
      const float want = 64.0f * xs[t] * ws[o];
      if (got[t * kN + o] != want) {
        return absl::InternalError(
            absl::StrCat("FP8 probe GEMM gave ", got[t * kN + o], " at [", t, ", ", o, "], expected ", want));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

bool GemmRunner::Fp8Supported(GemmTypes types) {
  int device = 0;
  if (!IsFp8(types) || cudaGetDevice(&device) != cudaSuccess) return false;
  std::lock_guard<std::mutex> lock(fp8_mu);
  auto& modes = Fp8Modes();
  if (auto it = modes.find({device, types}); it != modes.end()) return it->second != Fp8Mode::kNone;
  Fp8Mode mode = Fp8Mode::kNone;
  std::string failures;
  cudaDeviceProp prop;
  if (cudaGetDeviceProperties(&prop, device) == cudaSuccess && prop.major >= 9) {
    // Outer-vector scales first, then unit scales + ApplyFp8Scales; each must plan AND compute correctly.
    for (const bool outer_vec : {true, false}) {
      absl::StatusOr<std::unique_ptr<GemmRunner>> probe = Create(256);
      absl::Status status = probe.status();
      if (status.ok()) {
        (*probe)->probe_outer_vec_ = outer_vec ? 1 : 0;
        status = ProbeFp8(**probe, types);
      }
      if (status.ok()) {
        mode = outer_vec ? Fp8Mode::kOuterVec : Fp8Mode::kUnitScales;
        break;
      }
      absl::StrAppend(&failures, failures.empty() ? "" : "; ",
                      outer_vec ? "outer-vector scales: " : "unit scales: ", status.message());
    }
  } else {
    failures = "needs compute capability 9.0 or newer";
  }
  const char* out = types == GemmTypes::kFp8ToBf16 ? "bf16" : "fp32";
  if (mode == Fp8Mode::kNone) {
    SCORED_LOG(WARNING) << "GPU " << device << ": no FP8 GEMM to " << out
                        << " (those W8A8 linears run emulated): " << failures;
  } else {
    SCORED_LOG(INFO) << "GPU " << device << ": FP8 GEMMs to " << out << " with "
                     << (mode == Fp8Mode::kOuterVec ? "outer-vector scales in cuBLASLt's epilogue"
                                                    : "unit scales, then ApplyFp8Scales")
                     << (failures.empty() ? "" : " (") << failures << (failures.empty() ? "" : ")");
  }
  modes[{device, types}] = mode;
  return mode != Fp8Mode::kNone;
}

bool GemmRunner::Fp8OuterVec(GemmTypes types) {
  if (!Fp8Supported(types)) return false;
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return false;
  std::lock_guard<std::mutex> lock(fp8_mu);
  return Fp8Modes()[{device, types}] == Fp8Mode::kOuterVec;
}

bool GemmRunner::Fp8Supported() {
  return Fp8Supported(GemmTypes::kFp8ToBf16) && Fp8Supported(GemmTypes::kFp8ToFp32);
}

}  // namespace scored::cuda
