#include "engine/cuda/cuda_engine.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "engine/base/logging.h"
#include "engine/base/status_macros.h"
#include "engine/cuda/device_buffer.h"
#include "engine/cuda/device_weights.h"
#include "engine/cuda/gemm.h"
#include "engine/cuda/transformer.h"
#include "engine/kernels/cuda_check.h"
#include "engine/model/fingerprint.h"
#include "engine/model/weights.h"

namespace scored {
namespace {

using cuda::Activations;
using cuda::CudaStream;
using cuda::DeviceModel;
using cuda::ForwardBatch;
using cuda::GemmRunner;
using cuda::RowSpan;

// Rows between two sequences' lm_head spans up to which the spans are merged into one GEMM: computing a
// few unneeded rows costs less than another launch of the 128k-column lm_head.
constexpr int64_t kMaxSpanGap = 64;
// Device memory left free beyond what the engine sizes itself for (cuBLASLt and CUDA internals).
constexpr int64_t kReserveBytes = int64_t{512} << 20;

constexpr int kSupportedHeadDims[] = {8, 16, 32, 64, 128, 256};

double GiB(int64_t bytes) { return static_cast<double>(bytes) / (1 << 30); }

// Fills `dst` with copies of the token embedding table (finite, non-zero, weight-like values: GEMM timing
// on zeros runs faster than on real data).
absl::Status FillFromEmbedding(const DeviceModel& model, const cuda::DeviceBuffer& dst, cudaStream_t stream) {
  const int64_t chunk = model.embed.bytes();
  for (int64_t off = 0; off < dst.bytes(); off += chunk) {
    SCORED_CUDA_CHECK(cudaMemcpyAsync(dst.as<char>() + off, model.embed.data(),
                                      static_cast<size_t>(std::min(chunk, dst.bytes() - off)),
                                      cudaMemcpyDeviceToDevice, stream));
  }
  return absl::OkStatus();
}

// bf16 only: times the heuristic's top GEMM candidates of each decoder-layer shape at max_tokens rows on the
// activation buffers (their contents are overwritten later by every forward) with layer 0's weights, and
// pins the fastest (GemmRunner::Tune).
absl::Status TuneLayerGemms(const DeviceModel& model, GemmRunner& gemm, Activations& acts,
                            cudaStream_t stream) {
  if (model.dtype != ComputeDtype::kBf16 || model.layers.empty()) return absl::OkStatus();
  for (const cuda::DeviceBuffer* b : {&acts.normed, &acts.attn, &acts.mlp}) {
    SCORED_RETURN_IF_ERROR(FillFromEmbedding(model, *b, stream));
  }
  const cuda::DeviceLayer& layer = model.layers.front();
  struct Job {
    const cuda::DeviceLinear* linear;
    const cuda::DeviceBuffer* x;
    const cuda::DeviceBuffer* y;
    cuda::GemmTypes types;
  };
  const Job jobs[] = {{&layer.qkv, &acts.normed, &acts.qkv, cuda::GemmTypes::kBf16ToBf16},
                      {&layer.o, &acts.attn, &acts.proj, cuda::GemmTypes::kBf16ToFp32},
                      {&layer.gate_up, &acts.normed, &acts.gate_up, cuda::GemmTypes::kBf16ToBf16},
                      {&layer.down, &acts.mlp, &acts.proj, cuda::GemmTypes::kBf16ToFp32}};
  for (const Job& job : jobs) {
    SCORED_ASSIGN_OR_RETURN(const void* w, job.linear->Materialize(model.dtype, acts.scratch.data(), stream));
    SCORED_RETURN_IF_ERROR(gemm.Tune(job.x->data(), w, job.y->data(), job.linear->out_features(),
                                     job.linear->in_features(), job.types, stream));
    SCORED_LOG(INFO) << "GEMM [" << acts.max_tokens << ", " << job.linear->in_features() << "] x ["
                     << job.linear->out_features() << ", " << job.linear->in_features() << "]^T: "
                     << gemm.Choice(job.linear->out_features(), job.linear->in_features(), job.types);
  }
  return absl::OkStatus();
}

class CudaEngine final : public Engine {
 public:
  static absl::StatusOr<std::unique_ptr<Engine>> Create(const EngineOptions& options);

  absl::StatusOr<std::vector<ScoreResult>> Score(absl::Span<const ScoreRequest> batch) override;
  const ModelInfo& info() const override { return info_; }
  absl::Status fatal_status() const override {
    absl::MutexLock lock(&mu_);
    return fatal_;
  }
  std::vector<std::pair<int64_t, int64_t>> DeviceMemory() const override;

 private:
  CudaEngine() = default;
  absl::Status ValidateRequest(const ScoreRequest& r, size_t index) const;
  // One varlen forward over batch[begin, end) (whose tokens fit max_batch_tokens), appending the results.
  absl::Status ScoreGroup(absl::Span<const ScoreRequest> group, std::vector<ScoreResult>* results);
  // Turns a failure into the sticky fatal status when the CUDA context is gone.
  absl::Status CheckSticky(absl::Status status);

  int device_ = 0;
  int64_t max_seq_len_ = 0;
  std::unique_ptr<ModelWeights> weights_;
  CudaStream stream_;
  std::unique_ptr<GemmRunner> gemm_;
  std::unique_ptr<DeviceModel> model_;
  Activations acts_;
  ModelInfo info_;
  mutable absl::Mutex mu_;
  absl::Status fatal_ ABSL_GUARDED_BY(mu_);
};

absl::StatusOr<std::unique_ptr<Engine>> CudaEngine::Create(const EngineOptions& options) {
  if (options.tp != 1) {
    return absl::UnimplementedError(
        absl::StrCat("--tp ", options.tp, ": this build runs the cuda backend on one GPU"));
  }
  if (options.max_batch_tokens <= 0) return absl::InvalidArgumentError("max_batch_tokens must be positive");
  if (CudaDeviceCount() < 1) return absl::FailedPreconditionError("no usable CUDA device");
  std::unique_ptr<CudaEngine> engine(new CudaEngine());
  SCORED_CUDA_CHECK(cudaSetDevice(engine->device_));

  SCORED_ASSIGN_OR_RETURN(engine->weights_, ModelWeights::Load(options.model_dir));
  const ModelConfig& config = engine->weights_->config();
  if (std::find(std::begin(kSupportedHeadDims), std::end(kSupportedHeadDims), config.head_dim) ==
      std::end(kSupportedHeadDims)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "head_dim ", config.head_dim, " is not supported by the attention kernel (8..256, powers of 2)"));
  }
  engine->max_seq_len_ = options.max_seq_len > 0 ? options.max_seq_len : config.max_position_embeddings;
  const int64_t max_tokens = options.max_batch_tokens;

  SCORED_ASSIGN_OR_RETURN(engine->stream_, CudaStream::Create());
  SCORED_ASSIGN_OR_RETURN(engine->gemm_, GemmRunner::Create(max_tokens));
  SCORED_ASSIGN_OR_RETURN(engine->model_, cuda::UploadModel(*engine->weights_, options.dtype));
  const DeviceModel& model = *engine->model_;

  // Reserve the activations of max_batch_tokens now, or say what would fit.
  size_t free_bytes = 0, total_bytes = 0;
  SCORED_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  const int64_t per_token = cuda::ActivationBytesPerToken(config, options.dtype);
  const int64_t fixed = cuda::FixedActivationBytes(config, model, max_tokens);
  const int64_t available = static_cast<int64_t>(free_bytes) - kReserveBytes;
  const auto too_big = [&]() {
    const int64_t fits = std::max<int64_t>(0, (available - fixed) / per_token);
    return absl::ResourceExhaustedError(
        absl::StrFormat("max_batch_tokens %d needs %.2f GiB of activations (%.2f MiB per token + %.2f GiB "
                        "fixed) but only %.2f GiB "
                        "of GPU memory is free after the %.2f GiB of weights; at most %d tokens fit",
                        max_tokens, GiB(fixed + per_token * max_tokens), per_token / 1048576.0, GiB(fixed),
                        GiB(available), GiB(model.resident_bytes), fits));
  };
  if (fixed + per_token * max_tokens > available) return too_big();
  absl::StatusOr<Activations> acts = cuda::AllocateActivations(config, model, max_tokens);
  if (absl::IsResourceExhausted(acts.status())) return too_big();
  if (!acts.ok()) return acts.status();
  engine->acts_ = *std::move(acts);

  // Pin every GEMM algorithm before the first batch: the decoder-layer shapes timed, the rest by heuristic.
  SCORED_RETURN_IF_ERROR(TuneLayerGemms(model, *engine->gemm_, engine->acts_, engine->stream_.get()));
  const cuda::GemmTypes types =
      options.dtype == ComputeDtype::kBf16 ? cuda::GemmTypes::kBf16ToBf16 : cuda::GemmTypes::kFp32;
  const cuda::GemmTypes head_types =
      options.dtype == ComputeDtype::kBf16 ? cuda::GemmTypes::kBf16ToFp32 : cuda::GemmTypes::kFp32;
  for (const cuda::DeviceLayer& layer : model.layers) {
    for (const cuda::DeviceLinear* linear : {&layer.qkv, &layer.o, &layer.gate_up, &layer.down}) {
      SCORED_RETURN_IF_ERROR(engine->gemm_->Prepare(linear->out_features(), linear->in_features(), types));
    }
  }
  SCORED_RETURN_IF_ERROR(
      engine->gemm_->Prepare(model.lm_head.out_features(), model.lm_head.in_features(), head_types));

  const ModelSummary& summary = engine->weights_->summary();
  ModelInfo& info = engine->info_;
  info.architecture = config.architecture;
  info.format = summary.format;
  info.format_notes = summary.notes;
  info.backend = "cuda";
  info.compute_dtype = options.dtype == ComputeDtype::kBf16 ? "bf16" : "fp32";
  info.tp = 1;
  info.vocab_size = config.vocab_size;
  info.max_seq_len = engine->max_seq_len_;
  info.max_batch_tokens = max_tokens;
  info.num_parameters = summary.num_parameters;
  info.bits_per_weight_decoder = summary.bits_per_weight_decoder;
  info.bits_per_weight_head = summary.bits_per_weight_head;
  info.resident_bytes = model.resident_bytes;
  SCORED_ASSIGN_OR_RETURN(info.model_fingerprint, ModelFingerprint(options.model_dir));
  SCORED_LOG(INFO) << "cuda engine: " << config.architecture << " " << summary.format << ", "
                   << info.compute_dtype << ", weights " << GiB(model.resident_bytes)
                   << " GiB, activations for " << max_tokens << " tokens "
                   << GiB(fixed + per_token * max_tokens) << " GiB";
  return std::unique_ptr<Engine>(std::move(engine));
}

std::vector<std::pair<int64_t, int64_t>> CudaEngine::DeviceMemory() const {
  size_t free_bytes = 0, total_bytes = 0;
  if (cudaSetDevice(device_) != cudaSuccess || cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess)
    return {};
  return {{static_cast<int64_t>(total_bytes - free_bytes), static_cast<int64_t>(total_bytes)}};
}

absl::Status CudaEngine::ValidateRequest(const ScoreRequest& r, size_t index) const {
  const int64_t n = static_cast<int64_t>(r.tokens.size());
  if (n < 2)
    return absl::InvalidArgumentError(absl::StrCat("request ", index, ": needs at least 2 tokens, got ", n));
  if (n > max_seq_len_) {
    return absl::OutOfRangeError(
        absl::StrCat("request ", index, ": ", n, " tokens exceed max_seq_len ", max_seq_len_));
  }
  if (n > acts_.max_tokens) {
    return absl::OutOfRangeError(
        absl::StrCat("request ", index, ": ", n, " tokens exceed max_batch_tokens ", acts_.max_tokens));
  }
  if (r.score_from >= n) {
    return absl::InvalidArgumentError(
        absl::StrCat("request ", index, ": score_from ", r.score_from, " must be < the ", n, " tokens"));
  }
  if (r.top_k < 0 || r.top_k > kernels::kMaxTopK) {
    return absl::InvalidArgumentError(
        absl::StrCat("request ", index, ": top_k ", r.top_k, " outside [0, 64]"));
  }
  const int64_t vocab = weights_->config().vocab_size;
  for (int64_t j = 0; j < n; ++j) {
    if (r.tokens[j] < 0 || r.tokens[j] >= vocab) {
      return absl::InvalidArgumentError(absl::StrCat("request ", index, ": token id ", r.tokens[j],
                                                     " at position ", j, " outside [0, ", vocab, ")"));
    }
  }
  return absl::OkStatus();
}

absl::Status CudaEngine::CheckSticky(absl::Status status) {
  if (status.ok()) return status;
  const cudaError_t err = cudaStreamSynchronize(stream_.get());
  if (cuda::IsStickyCudaError(err)) {
    absl::MutexLock lock(&mu_);
    if (fatal_.ok()) {
      fatal_ =
          absl::UnavailableError(absl::StrCat("CUDA device failed (", cudaGetErrorName(err),
                                              "); the engine cannot serve any more: ", status.message()));
      SCORED_LOG(ERROR) << fatal_;
    }
    return fatal_;
  }
  return status;
}

absl::StatusOr<std::vector<ScoreResult>> CudaEngine::Score(absl::Span<const ScoreRequest> batch) {
  SCORED_RETURN_IF_ERROR(fatal_status());
  for (size_t i = 0; i < batch.size(); ++i) SCORED_RETURN_IF_ERROR(ValidateRequest(batch[i], i));
  std::vector<ScoreResult> results;
  results.reserve(batch.size());
  // Consecutive requests share a forward while their tokens fit; results do not depend on the grouping.
  size_t begin = 0;
  while (begin < batch.size()) {
    size_t end = begin;
    int64_t tokens = 0;
    while (end < batch.size() &&
           tokens + static_cast<int64_t>(batch[end].tokens.size()) <= acts_.max_tokens) {
      tokens += static_cast<int64_t>(batch[end].tokens.size());
      ++end;
    }
    SCORED_RETURN_IF_ERROR(CheckSticky(ScoreGroup(batch.subspan(begin, end - begin), &results)));
    begin = end;
  }
  return results;
}

absl::Status CudaEngine::ScoreGroup(absl::Span<const ScoreRequest> group, std::vector<ScoreResult>* results) {
  // Pack the group: rows of sequence s are [offset[s], offset[s] + n_s).
  ForwardBatch fb;
  std::vector<int32_t> tokens, positions, targets, cu_seqlens = {0};
  std::vector<int64_t> first_row;  // per sequence: the first row whose logits are scored
  for (const ScoreRequest& r : group) {
    const int64_t n = static_cast<int64_t>(r.tokens.size());
    const int64_t offset = static_cast<int64_t>(tokens.size());
    const int64_t from = std::max<int64_t>(1, r.score_from);
    for (int64_t j = 0; j < n; ++j) {
      tokens.push_back(r.tokens[j]);
      positions.push_back(static_cast<int32_t>(j));
      targets.push_back(j + 1 < n ? r.tokens[j + 1] : 0);
    }
    cu_seqlens.push_back(static_cast<int32_t>(offset + n));
    fb.max_seqlen = std::max(fb.max_seqlen, static_cast<int32_t>(n));
    first_row.push_back(offset + from - 1);
    const RowSpan span{offset + from - 1, offset + n - 1};
    if (!fb.lm_head_rows.empty() && span.begin - fb.lm_head_rows.back().end <= kMaxSpanGap) {
      fb.lm_head_rows.back().end = span.end;
    } else {
      fb.lm_head_rows.push_back(span);
    }
    fb.options.top_k = std::max(fb.options.top_k, r.top_k);
    fb.options.want_rank = fb.options.want_rank || r.want_rank;
    fb.options.want_entropy = fb.options.want_entropy || r.want_entropy;
  }
  fb.num_tokens = static_cast<int64_t>(tokens.size());
  fb.num_seqs = static_cast<int32_t>(group.size());
  const int64_t n = fb.num_tokens;
  const cudaStream_t stream = stream_.get();

  SCORED_CUDA_CHECK(
      cudaMemcpyAsync(acts_.tokens.data(), tokens.data(), n * 4, cudaMemcpyHostToDevice, stream));
  SCORED_CUDA_CHECK(
      cudaMemcpyAsync(acts_.positions.data(), positions.data(), n * 4, cudaMemcpyHostToDevice, stream));
  SCORED_CUDA_CHECK(
      cudaMemcpyAsync(acts_.targets.data(), targets.data(), n * 4, cudaMemcpyHostToDevice, stream));
  SCORED_CUDA_CHECK(cudaMemcpyAsync(acts_.cu_seqlens.data(), cu_seqlens.data(), cu_seqlens.size() * 4,
                                    cudaMemcpyHostToDevice, stream));
  SCORED_RETURN_IF_ERROR(cuda::Forward(weights_->config(), *model_, *gemm_, fb, &acts_, stream));

  // Only per-row results come back.
  const int64_t top_k = fb.options.top_k;
  std::vector<double> logprob(n);
  std::vector<uint8_t> greedy(n);
  std::vector<int32_t> rank(fb.options.want_rank ? n : 0);
  std::vector<float> entropy(fb.options.want_entropy ? n : 0);
  std::vector<int32_t> top_ids(n * top_k);
  std::vector<float> top_lps(n * top_k);
  SCORED_CUDA_CHECK(
      cudaMemcpyAsync(logprob.data(), acts_.logprob.data(), n * 8, cudaMemcpyDeviceToHost, stream));
  SCORED_CUDA_CHECK(cudaMemcpyAsync(greedy.data(), acts_.greedy.data(), n, cudaMemcpyDeviceToHost, stream));
  if (!rank.empty()) {
    SCORED_CUDA_CHECK(cudaMemcpyAsync(rank.data(), acts_.rank.data(), n * 4, cudaMemcpyDeviceToHost, stream));
  }
  if (!entropy.empty()) {
    SCORED_CUDA_CHECK(
        cudaMemcpyAsync(entropy.data(), acts_.entropy.data(), n * 4, cudaMemcpyDeviceToHost, stream));
  }
  if (top_k > 0) {
    SCORED_CUDA_CHECK(cudaMemcpyAsync(top_ids.data(), acts_.top_k_ids.data(), n * top_k * 4,
                                      cudaMemcpyDeviceToHost, stream));
    SCORED_CUDA_CHECK(cudaMemcpyAsync(top_lps.data(), acts_.top_k_logprobs.data(), n * top_k * 4,
                                      cudaMemcpyDeviceToHost, stream));
  }
  SCORED_RETURN_IF_ERROR(stream_.Synchronize());

  for (size_t s = 0; s < group.size(); ++s) {
    const ScoreRequest& r = group[s];
    const int64_t last_row = cu_seqlens[s + 1] - 1;  // exclusive: the last token predicts nothing
    ScoreResult result;
    for (int64_t row = first_row[s]; row < last_row; ++row) {
      result.logprob.push_back(static_cast<float>(logprob[row]));
      result.sum_logprob += logprob[row];
      result.greedy.push_back(greedy[row]);
      if (r.want_rank) result.rank.push_back(rank[row]);
      if (r.want_entropy) result.entropy.push_back(entropy[row]);
      if (r.top_k > 0) {
        std::vector<TopKEntry> entries(r.top_k);
        for (int32_t i = 0; i < r.top_k; ++i)
          entries[i] = {top_ids[row * top_k + i], top_lps[row * top_k + i]};
        result.top_k.push_back(std::move(entries));
      }
    }
    result.num_scored = static_cast<int32_t>(result.logprob.size());
    results->push_back(std::move(result));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Engine>> CreateCudaEngine(const EngineOptions& options) {
  return CudaEngine::Create(options);
}

}  // namespace scored
