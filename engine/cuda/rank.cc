#include "engine/cuda/rank.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/base/logging.h"
#include "engine/base/status_macros.h"
#include "engine/cuda/forward/linear.h"
#include "engine/kernels/cuda_check.h"
#include "engine/kernels/fp8_quant.h"
#include "engine/kernels/kernel_types.h"

namespace scored::cuda {
namespace {

// Device memory left free beyond what the engine sizes itself for (cuBLASLt and CUDA internals).
constexpr int64_t kReserveBytes = int64_t{512} << 20;

double GiB(int64_t bytes) { return static_cast<double>(bytes) / (1 << 30); }

// Fills `dst` with copies of the token embedding table (finite, non-zero, weight-like values: GEMM timing
// on zeros runs faster than on real data).
absl::Status FillFromEmbedding(const DeviceModel& model, const DeviceBuffer& dst, cudaStream_t stream) {
  const int64_t chunk = model.embed.bytes();
  for (int64_t off = 0; off < dst.bytes(); off += chunk) {
    SCORED_CUDA_CHECK(cudaMemcpyAsync(dst.as<char>() + off, model.embed.data(),
                                      static_cast<size_t>(std::min(chunk, dst.bytes() - off)),
                                      cudaMemcpyDeviceToDevice, stream));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status TuneLayerGemms(const DeviceModel& model, GemmRunner& gemm, Activations& acts,
                            cudaStream_t stream, bool one_gpu) {
  if (model.dtype != ComputeDtype::kBf16 || model.layers.empty()) return absl::OkStatus();
  for (const DeviceBuffer* b : {&acts.normed, &acts.attn, &acts.mlp}) {
    SCORED_RETURN_IF_ERROR(FillFromEmbedding(model, *b, stream));
  }
  const DeviceLayer& layer = model.layers.front();
  // The forward's plans of layer 0's linears (forward/linear.h): bf16 mode, y in the compute dtype or
  // added into the residual.
  const LinearSite site{model.dtype, !one_gpu, acts.row_parallel_halves};
  struct Job {
    const DeviceLinear* linear;
    const DeviceBuffer* x;
    const DeviceBuffer* y;
    LinearOut out;
  };
  const Job jobs[] = {{&layer.qkv, &acts.normed, &acts.qkv, LinearOut::kComputeDtype},
                      {&layer.o, &acts.attn, &acts.proj, LinearOut::kResidual},
                      {&layer.gate_up, &acts.normed, &acts.gate_up, LinearOut::kComputeDtype},
                      {&layer.down, &acts.mlp, &acts.proj, LinearOut::kResidual}};
  for (const Job& job : jobs) {
    const int64_t out = job.linear->out_features(), in = job.linear->in_features();
    if (out == 0) continue;  // a sparse layer's gate|up / down: its experts are planned lazily
    const LinearPlan plan = PlanLinear(*job.linear, job.out, site);
    const GemmTypes types = plan.gemm_types;
    if (plan.kernel == LinearKernel::kFp8Gemm) {
      // FP8: the input buffer quantized per token (real codes and scales), the resident FP8 weight.
      SCORED_RETURN_IF_ERROR(kernels::QuantizeFp8PerToken(job.x->as<kernels::bf16_t>(), in, acts.max_tokens,
                                                          in, acts.act_fp8.as<uint8_t>(),
                                                          acts.act_scale.as<float>(), stream));
      SCORED_RETURN_IF_ERROR(gemm.Tune(acts.act_fp8.data(), job.linear->fp8_weight(), job.y->data(), out, in,
                                       types, stream, acts.act_scale.as<float>(), job.linear->fp8_scale()));
    } else if (plan.kernel == LinearKernel::kInt8Gemm) {
      continue;  // the int8 GEMM has one fixed configuration: nothing to tune
    } else {
      SCORED_ASSIGN_OR_RETURN(const void* w,
                              job.linear->Materialize(model.dtype, acts.scratch.data(), stream));
      if (plan.in_halves) {
        SCORED_RETURN_IF_ERROR(
            gemm.Tune(job.x->data(), w, job.y->data(), out, in / 2, types, stream, nullptr, nullptr, in));
        SCORED_LOG(INFO) << "GEMM [" << acts.max_tokens << ", " << in / 2 << " of " << in << "] x [" << out
                         << ", " << in / 2 << " of " << in
                         << "]^T (each half): " << gemm.Choice(out, in / 2, types, in);
        continue;
      }
      SCORED_RETURN_IF_ERROR(gemm.Tune(job.x->data(), w, job.y->data(), out, in, types, stream));
    }
    SCORED_LOG(INFO) << "GEMM [" << acts.max_tokens << ", " << in << "] x [" << out << ", " << in
                     << "]^T: " << gemm.Choice(out, in, types);
  }
  return absl::OkStatus();
}

std::string DeviceName(int device) {
  cudaDeviceProp prop;
  if (cudaGetDeviceProperties(&prop, device) != cudaSuccess) return absl::StrCat("GPU ", device);
  return absl::StrCat("GPU ", device, " (", prop.name, ")");
}

int SmallestTpThatFits(int64_t weights_at_tp, int tp, int64_t activations, int64_t usable) {
  for (int larger = tp * 2; larger <= 8; larger *= 2) {
    if (weights_at_tp * tp / larger + activations <= usable) return larger;
  }
  return 0;
}

namespace {

// With a reference model, before its upload: whether its weights and the activations of both models fit the
// free memory left after the model's weights; otherwise RESOURCE_EXHAUSTED naming both models' weights, the
// activations and the --tp that would spread them (or the max_batch_tokens that would fit).
absl::Status CheckBaselineFits(const ModelWeights& reference, const EngineOptions& options, int tp_size,
                               const BaselineModel& shapes, const Rank& rank) {
  size_t free_bytes = 0, total_bytes = 0;
  SCORED_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  const int64_t ref_bytes = EstimateDeviceBytes(reference, options.dtype, tp_size);
  const int64_t per_token = ActivationBytesPerToken(rank.config, options.dtype, &shapes);
  const int64_t acts =
      per_token * options.max_batch_tokens +
      FixedActivationBytes(rank.config, *rank.model, options.max_batch_tokens, tp_size, &shapes);
  const int64_t available = static_cast<int64_t>(free_bytes) - kReserveBytes;
  if (ref_bytes + acts <= available) return absl::OkStatus();
  const int64_t weights_here = rank.model->resident_bytes + ref_bytes;
  const int tp =
      SmallestTpThatFits(weights_here, tp_size, acts, static_cast<int64_t>(total_bytes) - kReserveBytes);
  std::string advice;
  if (tp > 0) {
    advice = absl::StrFormat("; at --tp %d each GPU would hold about %.1f GiB of weights: run on %d GPUs", tp,
                             GiB(weights_here * tp_size / tp), tp);
  }
  if (advice.empty() && ref_bytes < available) {
    advice = absl::StrFormat(
        "; a smaller --max_batch_tokens (at most %d) leaves room for the activations",
        std::max<int64_t>(
            0, (available - ref_bytes - (acts - per_token * options.max_batch_tokens)) / per_token));
  }
  return absl::ResourceExhaustedError(absl::StrFormat(
      "%s: --model and --reference_model do not fit together at --tp %d: the model's weights take %.2f GiB, "
      "the reference model's need about %.2f GiB and the activations of both for max_batch_tokens %d "
      "%.2f GiB, but %.2f GiB of the GPU's %.2f GiB are free after the model%s",
      DeviceName(rank.device), tp_size, GiB(rank.model->resident_bytes), GiB(ref_bytes),
      options.max_batch_tokens, GiB(acts), GiB(available), GiB(static_cast<int64_t>(total_bytes)), advice));
}

// Uploads the reference model (its shard of the same tp) after the fit check.
absl::Status UploadBaseline(const ModelWeights& reference, const EngineOptions& options,
                            const ShardPlan* plan, Rank* rank) {
  const int tp_size = plan != nullptr ? plan->tp_size : 1;
  std::optional<ShardPlan> ref_plan;
  rank->ref_config = reference.config();
  if (plan != nullptr) {
    SCORED_ASSIGN_OR_RETURN(ref_plan, ShardPlan::Create(reference.config(), plan->tp_size, plan->tp_rank));
    rank->ref_config = LocalConfig(reference.config(), *ref_plan);
  }
  BaselineModel shapes;
  shapes.config = &rank->ref_config;
  SCORED_RETURN_IF_ERROR(CheckBaselineFits(reference, options, tp_size, shapes, *rank));
  SCORED_ASSIGN_OR_RETURN(rank->ref_model,
                          UploadModel(reference, options.dtype, ref_plan.has_value() ? &*ref_plan : nullptr,
                                      UploadOptionsFor(options)));
  return absl::OkStatus();
}

// Reserves the activations of max_batch_tokens (both models' with a reference) and the peer-copy buffers,
// or says what would fit.
absl::Status ReserveActivations(const EngineOptions& options, int tp_size, PeerLink* link, Rank* rank,
                                int64_t* activation_bytes) {
  const int64_t max_tokens = options.max_batch_tokens;
  const DeviceModel& model = *rank->model;
  const ModelConfig& config = rank->config;
  BaselineModel reference;
  reference.config = &rank->ref_config;
  reference.model = rank->ref_model.get();
  const BaselineModel* with = rank->ref_model != nullptr ? &reference : nullptr;
  size_t free_bytes = 0, total_bytes = 0;
  SCORED_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  const int64_t per_token = ActivationBytesPerToken(config, options.dtype, with);
  const int64_t link_elements =
      max_tokens * std::max(config.hidden_size, with != nullptr ? rank->ref_config.hidden_size : 0);
  const int64_t fixed = FixedActivationBytes(config, model, max_tokens, tp_size, with) +
                        (link != nullptr ? PeerLink::BytesPerRank(link_elements) : 0);
  const int64_t available = static_cast<int64_t>(free_bytes) - kReserveBytes;
  const int64_t weights = model.resident_bytes + (with != nullptr ? rank->ref_model->resident_bytes : 0);
  const auto too_big = [&]() {
    const int64_t fits = std::max<int64_t>(0, (available - fixed) / per_token);
    return absl::ResourceExhaustedError(absl::StrFormat(
        "%s: max_batch_tokens %d needs %.2f GiB of activations (%.2f MiB per token + %.2f GiB "
        "fixed) but only %.2f GiB "
        "of GPU memory is free after the %.2f GiB of weights; at most %d tokens fit",
        DeviceName(rank->device), max_tokens, GiB(fixed + per_token * max_tokens), per_token / 1048576.0,
        GiB(fixed), GiB(available), GiB(weights), fits));
  };
  if (fixed + per_token * max_tokens > available) return too_big();
  absl::StatusOr<Activations> acts = AllocateActivations(config, model, max_tokens, tp_size, with);
  if (absl::IsResourceExhausted(acts.status())) return too_big();
  if (!acts.ok()) return acts.status();
  rank->acts = *std::move(acts);
  if (link != nullptr) {
    const absl::Status linked = link->InitRank(rank->index, link_elements);
    if (absl::IsResourceExhausted(linked)) return too_big();
    SCORED_RETURN_IF_ERROR(linked);
    rank->tp.peer = link;
  }
  *activation_bytes = fixed + per_token * max_tokens;
  return absl::OkStatus();
}

// Pins every GEMM algorithm of `model` before the first batch: the decoder-layer shapes timed (a shape the
// other model of the rank already tuned keeps its choice), the rest by heuristic.
absl::Status PinGemms(const DeviceModel& model, const EngineOptions& options, bool one_gpu, Rank* rank) {
  SCORED_RETURN_IF_ERROR(TuneLayerGemms(model, *rank->gemm, rank->acts, rank->stream.get(), one_gpu));
  // The forward's plans (forward/linear.h): q|k|v and gate|up in the compute dtype, o and down added into
  // the residual (over their input column halves at tp 1 where SumsInHalves), lm_head fp32.
  const LinearSite site{options.dtype, !one_gpu, rank->acts.row_parallel_halves};
  const GemmTypes head_types =
      options.dtype == ComputeDtype::kBf16 ? GemmTypes::kBf16ToFp32 : GemmTypes::kFp32;
  for (const DeviceLayer& layer : model.layers) {
    for (const DeviceLinear* linear : {&layer.qkv, &layer.gate_up, &layer.o, &layer.down}) {
      if (linear->out_features() == 0) continue;  // sparse layer: experts planned lazily by the forward
      const bool row_parallel = linear == &layer.o || linear == &layer.down;
      const LinearPlan plan =
          PlanLinear(*linear, row_parallel ? LinearOut::kResidual : LinearOut::kComputeDtype, site);
      const int64_t in = linear->in_features();
      if (plan.in_halves) {
        SCORED_RETURN_IF_ERROR(rank->gemm->Prepare(linear->out_features(), in / 2, plan.gemm_types, in));
        continue;
      }
      SCORED_RETURN_IF_ERROR(rank->gemm->Prepare(linear->out_features(), in, plan.gemm_types));
    }
  }
  return rank->gemm->Prepare(model.lm_head.out_features(), model.lm_head.in_features(), head_types);
}

void LogW8a8(const DeviceModel& model, int device) {
  int fp8_linears = 0, w8a8_linears = 0, int8_linears = 0, int8_resident = 0;
  for (const DeviceLayer& layer : model.layers) {
    for (const DeviceLinear* linear : LinearsInOrder(layer)) {
      fp8_linears += linear->fp8_resident() ? 1 : 0;
      w8a8_linears += linear->w8a8_dynamic_fp8() ? 1 : 0;
      int8_linears += linear->w8a8_dynamic_int8() ? 1 : 0;
      int8_resident += linear->int8_resident() ? 1 : 0;
    }
  }
  if (int8_linears > 0) {
    SCORED_LOG(INFO) << DeviceName(device) << ": W8A8 INT8: " << int8_resident << " of " << int8_linears
                     << " linear groups run as int8 tensor-core GEMMs, the rest emulated (int8 per-token "
                        "quantize-dequantized inputs, bf16 / fp32 GEMMs on the int8 weights expanded)";
  }
  if (w8a8_linears > 0) {
    SCORED_LOG(INFO)
        << DeviceName(device) << ": W8A8 " << fp8_linears << " of " << w8a8_linears
        << " linear groups run as FP8 GEMMs, the rest emulated (bf16 GEMM on fake-quantized inputs)";
  }
}

}  // namespace

absl::Status BuildRank(const ModelWeights& weights, const ModelWeights* reference,
                       const EngineOptions& options, const ShardPlan* plan, PeerLink* link, Rank* rank,
                       int64_t* activation_bytes) {
  const int tp_size = plan != nullptr ? plan->tp_size : 1;
  SCORED_ASSIGN_OR_RETURN(rank->stream, CudaStream::Create());
  SCORED_ASSIGN_OR_RETURN(rank->gemm, GemmRunner::Create(options.max_batch_tokens));
  SCORED_ASSIGN_OR_RETURN(rank->model, UploadModel(weights, options.dtype, plan, UploadOptionsFor(options)));
  if (reference != nullptr) SCORED_RETURN_IF_ERROR(UploadBaseline(*reference, options, plan, rank));
  SCORED_RETURN_IF_ERROR(ReserveActivations(options, tp_size, link, rank, activation_bytes));
  // EngineOptions' execution settings (validated by the engine before anything loads).
  if (tp_size > 1) rank->acts.tp_row_chunks = options.tp_row_chunks;
  rank->acts.row_parallel_halves = options.row_parallel_halves;
  LogW8a8(*rank->model, rank->device);
  SCORED_RETURN_IF_ERROR(PinGemms(*rank->model, options, plan == nullptr, rank));
  if (rank->ref_model != nullptr) {
    LogW8a8(*rank->ref_model, rank->device);
    SCORED_RETURN_IF_ERROR(PinGemms(*rank->ref_model, options, plan == nullptr, rank));
  }
  return absl::OkStatus();
}

absl::Status RunRank(Rank& rank, const PackedBatch& batch, HostResults* out) {
  const int64_t n = batch.fb.num_tokens;
  const cudaStream_t stream = rank.stream.get();
  Activations& acts = rank.acts;
  SCORED_CUDA_CHECK(
      cudaMemcpyAsync(acts.tokens.data(), batch.tokens.data(), n * 4, cudaMemcpyHostToDevice, stream));
  SCORED_CUDA_CHECK(
      cudaMemcpyAsync(acts.positions.data(), batch.positions.data(), n * 4, cudaMemcpyHostToDevice, stream));
  SCORED_CUDA_CHECK(
      cudaMemcpyAsync(acts.targets.data(), batch.targets.data(), n * 4, cudaMemcpyHostToDevice, stream));
  SCORED_CUDA_CHECK(cudaMemcpyAsync(acts.cu_seqlens.data(), batch.fb.cu_seqlens.data(),
                                    batch.fb.cu_seqlens.size() * 4, cudaMemcpyHostToDevice, stream));
  const int64_t candidates = batch.fb.options.num_candidates;
  if (candidates > 0) {
    SCORED_CUDA_CHECK(cudaMemcpyAsync(acts.candidate_ids.data(), batch.candidate_ids.data(),
                                      n * candidates * 4, cudaMemcpyHostToDevice, stream));
  }
  BaselineModel reference;
  reference.config = &rank.ref_config;
  reference.model = rank.ref_model.get();
  SCORED_RETURN_IF_ERROR(Forward(rank.config, *rank.model, *rank.gemm, batch.fb, &acts, stream,
                                 rank.comm != nullptr ? &rank.tp : nullptr,
                                 rank.ref_model != nullptr ? &reference : nullptr));
  if (out != nullptr) {
    // Only per-row results come back.
    const int64_t top_k = batch.fb.options.top_k;
    out->Resize(batch);
    SCORED_CUDA_CHECK(
        cudaMemcpyAsync(out->logprob.data(), acts.logprob.data(), n * 8, cudaMemcpyDeviceToHost, stream));
    SCORED_CUDA_CHECK(
        cudaMemcpyAsync(out->greedy.data(), acts.greedy.data(), n, cudaMemcpyDeviceToHost, stream));
    if (!out->rank.empty()) {
      SCORED_CUDA_CHECK(
          cudaMemcpyAsync(out->rank.data(), acts.rank.data(), n * 4, cudaMemcpyDeviceToHost, stream));
    }
    if (!out->entropy.empty()) {
      SCORED_CUDA_CHECK(
          cudaMemcpyAsync(out->entropy.data(), acts.entropy.data(), n * 4, cudaMemcpyDeviceToHost, stream));
    }
    if (top_k > 0) {
      SCORED_CUDA_CHECK(cudaMemcpyAsync(out->top_ids.data(), acts.top_k_ids.data(), n * top_k * 4,
                                        cudaMemcpyDeviceToHost, stream));
      SCORED_CUDA_CHECK(cudaMemcpyAsync(out->top_lps.data(), acts.top_k_logprobs.data(), n * top_k * 4,
                                        cudaMemcpyDeviceToHost, stream));
    }
    if (candidates > 0) {
      SCORED_CUDA_CHECK(cudaMemcpyAsync(out->candidate_logprobs.data(), acts.candidate_logprobs.data(),
                                        n * candidates * 4, cudaMemcpyDeviceToHost, stream));
    }
    if (!out->min_logprob.empty()) {
      SCORED_CUDA_CHECK(cudaMemcpyAsync(out->min_logprob.data(), acts.min_logprob.data(), n * 4,
                                        cudaMemcpyDeviceToHost, stream));
    }
    if (!out->kld.empty()) {
      SCORED_CUDA_CHECK(cudaMemcpyAsync(out->ref_logprob.data(), acts.ref_logprob.data(), n * 8,
                                        cudaMemcpyDeviceToHost, stream));
      SCORED_CUDA_CHECK(
          cudaMemcpyAsync(out->kld.data(), acts.kld.data(), n * 8, cudaMemcpyDeviceToHost, stream));
      SCORED_CUDA_CHECK(
          cudaMemcpyAsync(out->ref_greedy.data(), acts.ref_greedy.data(), n, cudaMemcpyDeviceToHost, stream));
      SCORED_CUDA_CHECK(
          cudaMemcpyAsync(out->same_top.data(), acts.same_top.data(), n, cudaMemcpyDeviceToHost, stream));
    }
  }
  // A rank waits with a deadline and the communicator's error in view: a lost peer cannot hang it.
  if (rank.comm != nullptr) return rank.comm->Synchronize(stream);
  return rank.stream.Synchronize();
}

}  // namespace scored::cuda
