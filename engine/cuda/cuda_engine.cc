#include "engine/cuda/cuda_engine.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "engine/base/logging.h"
#include "engine/base/status_macros.h"
#include "engine/cuda/batch_pack.h"
#include "engine/cuda/device_buffer.h"
#include "engine/cuda/device_weights.h"
#include "engine/cuda/gemm.h"
#include "engine/cuda/peer_link.h"
#include "engine/cuda/rank.h"
#include "engine/cuda/rank_worker.h"
#include "engine/cuda/row_chunks.h"
#include "engine/cuda/transformer.h"
#include "engine/dist/leader_follower.h"
#include "engine/dist/nccl_communicator.h"
#include "engine/kernels/cuda_check.h"
#include "engine/kernels/device_trap.h"
#include "engine/kernels/kernel_types.h"
#include "engine/kernels/latent_attention_pack.h"
#include "engine/model/config.h"
#include "engine/model/fingerprint.h"
#include "engine/model/layer_plan.h"
#include "engine/model/shard_plan.h"
#include "engine/model/weights.h"
#include "engine/score_contract.h"

namespace scored {
namespace {

using cuda::Activations;
using cuda::CudaStream;
using cuda::DeviceModel;
using cuda::GemmRunner;
using cuda::HostResults;
using cuda::PackedBatch;
using cuda::Rank;

static_assert(EngineOptions::kMaxTpRowChunks == cuda::kMaxTpRowChunks,
              "EngineOptions::tp_row_chunks documents the row-chunk limit of engine/cuda/row_chunks.h");

double GiB(int64_t bytes) { return static_cast<double>(bytes) / (1 << 30); }

// Appends `note` (if any) to a ModelInfo::format_notes, "; " between notes (ModelSummary::notes' joint).
void AppendNote(const std::string& note, std::string* notes) {
  if (note.empty()) return;
  absl::StrAppend(notes, notes->empty() ? "" : "; ", note);
}

// `whose`: "" or "the reference model's " (messages). The attention kernels take every multiple of 8 up to
// 256 (kernels/attention.h; tensor cores at 32, 64, 96, 128 and 256).
absl::Status CheckHeadDim(const ModelConfig& config, const char* whose) {
  if (config.head_dim >= 8 && config.head_dim <= 256 && config.head_dim % 8 == 0) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(whose, "head_dim ", config.head_dim,
                                                 " is not supported by the attention kernel (multiples of 8 "
                                                 "up to 256)"));
}

// The blocks the CUDA forward has no kernels for yet (the CPU backend computes them): attention sinks,
// gpt-oss's router (biased, top-k softmax), biased experts and the clamped SwiGLU, Gemma 4's attention.
absl::Status CheckBlocksOnCuda(const ModelPlan& plan, const char* whose) {
  for (size_t l = 0; l < plan.layers.size(); ++l) {
    const LayerPlan& p = plan.layers[l];
    const ExpertsPlan& e = p.channel_mixer.experts;
    const char* what = nullptr;
    const AttentionPlan& a = p.attention;
    if (p.token_mixer == TokenMixerKind::kAttention && a.sinks) {
      what = "attention sinks";
    } else if (p.token_mixer == TokenMixerKind::kAttention && (a.v_norm || a.k_eq_v || p.layer_scalar)) {
      what = "Gemma 4's attention (v norm, k = v, its full layers' own head shape, layer scalars)";
    } else if (p.experts() && (e.router == RouterKind::kTopKSoftmax || e.router_bias || e.expert_bias)) {
      what = "gpt-oss's experts (a biased top-k softmax router, biased experts)";
    } else if (p.channel_mixer.kind == ChannelMixerKind::kDenseAndExperts) {
      what = "Gemma 4's parallel dense MLP and experts";
    } else if (p.channel_mixer.activation == MlpActivation::kClampedSwiGlu) {
      what = "the clamped SwiGLU";
    }
    if (what != nullptr) {
      return absl::UnimplementedError(absl::StrCat(whose, "layer ", l, ": ", what,
                                                   " are not implemented on the CUDA backend yet; use "
                                                   "--backend=cpu"));
    }
  }
  return absl::OkStatus();
}

// The layer shapes the CUDA forward's blocks cannot run, refused before anything reaches a device (the CPU
// backend computes them): CheckBlocksOnCuda's blocks; latent attention heads wider than the attention
// kernels' 256 once packed (latent_attention_pack.h), or under longrope (the block rotates with one table).
absl::Status CheckPlanOnCuda(const ModelPlan& plan, const char* whose) {
  SCORED_RETURN_IF_ERROR(CheckBlocksOnCuda(plan, whose));
  const int64_t l = plan.first_latent_attention();
  if (l < 0) return absl::OkStatus();
  const LatentAttentionPlan& a = plan.layers[static_cast<size_t>(l)].latent;
  const int64_t d = kernels::LatentPackedHeadDim(a.qk_head_dim(), a.v_head_dim);
  if (d > 256 || plan.longrope) {
    return absl::UnimplementedError(
        absl::StrCat(whose, "layer ", l, ": multi-head latent attention with heads of ", a.qk_head_dim(),
                     " (q, k) and ", a.v_head_dim, " (v)", plan.longrope ? " under longrope" : "",
                     " is not implemented on the CUDA backend (at most 256 once packed); use --backend=cpu"));
  }
  return absl::OkStatus();
}

class CudaEngine final : public Engine {
 public:
  static absl::StatusOr<std::unique_ptr<Engine>> Create(const EngineOptions& options);
  // A follower process: joins the leader, loads its ranks and runs the leader's batches until the end.
  static absl::Status RunFollower(const EngineOptions& options);
  ~CudaEngine() override;

  std::vector<absl::StatusOr<ScoreResult>> Score(absl::Span<const ScoreRequest> batch) override;
  const ModelInfo& info() const override { return info_; }
  absl::Status fatal_status() const override {
    absl::MutexLock lock(&mu_);
    return fatal_;
  }
  std::vector<std::pair<int64_t, int64_t>> DeviceMemory() const override;

  // Testing: aborts rank `rank`'s communicator as a failed link would.
  absl::Status InjectCommunicatorFault(int rank);

 private:
  CudaEngine() = default;
  // Everything but the ranks' communicators' peers: options checked, weights loaded, shard check.
  static absl::StatusOr<std::unique_ptr<CudaEngine>> Load(const EngineOptions& options);
  // tp > 1: this process's ranks (global ranks first_rank ..) join communicator `id` and load their shards;
  // the watchdog starts.
  absl::Status StartRanks(const EngineOptions& options, const dist::NcclUniqueId& id, int first_rank);
  void FillInfo(const EngineOptions& options, int64_t activation_bytes);
  // One varlen forward over `group` (valid requests whose tokens fit max_batch_tokens).
  absl::StatusOr<std::vector<ScoreResult>> ScoreGroup(absl::Span<const ScoreRequest* const> group);
  // tp == 1: turns a failure into the sticky fatal status when the CUDA context is gone.
  absl::Status CheckSticky(absl::Status status);
  // tp > 1: any failure of a rank may leave its peers inside a collective: abort every communicator (they
  // then return at once) and make the failure sticky.
  absl::Status FailAllRanks(const absl::Status& status);
  void SetFatal(const absl::Status& status);
  // Runs job(rank) on every rank's thread at once and waits for all; the first error.
  absl::Status OnAllRanks(const std::function<absl::Status(Rank&)>& job);

  int tp_ = 1;
  int64_t fault_device_trap_after_ = -1;  // EngineOptions::fault_device_trap_after_batches
  int64_t score_calls_ = 0;  // Score() calls with a valid request so far (Score() runs on one thread)
  int64_t max_seq_len_ = 0;
  int64_t max_tokens_ = 0;
  ScoreLimits limits_;  // the Score contract's, set once the model is loaded
  std::unique_ptr<ModelWeights> weights_;
  std::unique_ptr<ModelWeights> reference_;  // the reference model R (--reference_model), or null
  std::string reference_fingerprint_;
  std::vector<std::unique_ptr<Rank>> ranks_;                // [tp]
  std::vector<std::unique_ptr<cuda::RankWorker>> workers_;  // [tp] at tp > 1, else empty
  std::unique_ptr<cuda::PeerLink> peer_link_;               // tp 2 in one process, unless NCCL was asked for
  std::unique_ptr<dist::NcclWatchdog> watchdog_;
  std::unique_ptr<dist::Leader> leader_;  // multi-process node rank 0 only: the followers' control plane
  ModelInfo info_;
  mutable absl::Mutex mu_;
  absl::Status fatal_ ABSL_GUARDED_BY(mu_);
};

absl::StatusOr<std::unique_ptr<CudaEngine>> CudaEngine::Load(const EngineOptions& options) {
  const int tp = options.tp;
  if (tp != 1 && tp != 2 && tp != 4 && tp != 8) {
    return absl::InvalidArgumentError(absl::StrCat("--tp ", tp, ": must be 1, 2, 4 or 8"));
  }
  if (options.nnodes < 1 || tp % options.nnodes != 0 || options.node_rank < 0 ||
      options.node_rank >= options.nnodes) {
    return absl::InvalidArgumentError(absl::StrCat("--nnodes ", options.nnodes, " --node_rank ",
                                                   options.node_rank, ": nnodes must divide --tp ", tp,
                                                   " and node_rank lie in [0, nnodes)"));
  }
  if (options.nnodes > 1 && options.rendezvous.empty()) {
    return absl::InvalidArgumentError("--nnodes > 1 needs --rendezvous HOST:PORT");
  }
  if (options.nnodes > 1 && options.control_transport == nullptr) {
    return absl::InvalidArgumentError(
        "--nnodes > 1 needs a control transport (EngineOptions::control_transport; scored sets its gRPC "
        "one)");
  }
  if (options.max_batch_tokens <= 0) return absl::InvalidArgumentError("max_batch_tokens must be positive");
  if (options.tp_row_chunks < 0 || options.tp_row_chunks > cuda::kMaxTpRowChunks) {
    return absl::InvalidArgumentError(absl::StrCat("--tp_row_chunks ", options.tp_row_chunks,
                                                   ": want 0 (auto) to ", cuda::kMaxTpRowChunks));
  }
  if (options.tp_exchange != TpExchange::kCopy && options.tp_exchange != TpExchange::kNccl) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tp_exchange ", static_cast<int>(options.tp_exchange), ": want copy or nccl"));
  }
  if (options.moe_gemm != MoeGemm::kMma && options.moe_gemm != MoeGemm::kSm90 &&
      options.moe_gemm != MoeGemm::kSm90Dequant) {
    return absl::InvalidArgumentError(
        absl::StrCat("--moe_gemm ", static_cast<int>(options.moe_gemm), ": want mma, sm90 or sm90_dequant"));
  }
  if (options.moe_sm90_schedule != MoeSm90Schedule::kCooperative &&
      options.moe_sm90_schedule != MoeSm90Schedule::kCooperative2x1 &&
      options.moe_sm90_schedule != MoeSm90Schedule::kPingpong) {
    return absl::InvalidArgumentError(absl::StrCat("--moe_sm90_schedule ",
                                                   static_cast<int>(options.moe_sm90_schedule),
                                                   ": want cooperative, cooperative2x1 or pingpong"));
  }
  const int devices = CudaDeviceCount();
  if (devices < 1) return absl::FailedPreconditionError("no usable CUDA device");
  std::unique_ptr<CudaEngine> engine(new CudaEngine());
  engine->tp_ = tp;
  engine->max_tokens_ = options.max_batch_tokens;
  engine->fault_device_trap_after_ = options.fault_device_trap_after_batches;

  SCORED_ASSIGN_OR_RETURN(engine->weights_, ModelWeights::Load(options.model_dir));
  const ModelConfig& config = engine->weights_->config();
  SCORED_RETURN_IF_ERROR(CheckPlanOnCuda(engine->weights_->plan(), ""));
  SCORED_RETURN_IF_ERROR(CheckHeadDim(config, ""));
  SCORED_ASSIGN_OR_RETURN(engine->max_seq_len_,
                          ServedContextLength(config, options.max_seq_len, options.allow_long_context));
  if (!options.reference_model_dir.empty()) {
    // R's config first: a vocabulary mismatch is reported before R's weights are read (mapped).
    SCORED_ASSIGN_OR_RETURN(const ModelConfig reference_config, LoadModelConfig(options.reference_model_dir));
    SCORED_RETURN_IF_ERROR(CheckBaselineVocabulary(config.vocab_size, reference_config.vocab_size));
    absl::StatusOr<int64_t> reference_context =
        ServedContextLength(reference_config, options.max_seq_len, options.allow_long_context);
    if (!reference_context.ok()) {
      return absl::Status(reference_context.status().code(),
                          absl::StrCat("the reference model: ", reference_context.status().message()));
    }
    absl::StatusOr<std::unique_ptr<ModelWeights>> reference = ModelWeights::Load(options.reference_model_dir);
    if (!reference.ok()) {
      return absl::Status(reference.status().code(),
                          absl::StrCat("loading the reference model from ", options.reference_model_dir, ": ",
                                       reference.status().message()));
    }
    engine->reference_ = *std::move(reference);
    SCORED_RETURN_IF_ERROR(CheckPlanOnCuda(engine->reference_->plan(), "the reference model's "));
    SCORED_RETURN_IF_ERROR(CheckHeadDim(engine->reference_->config(), "the reference model's "));
    if (options.max_seq_len <= 0) {
      engine->max_seq_len_ =
          std::min(engine->max_seq_len_, engine->reference_->config().max_position_embeddings);
    }
    engine->limits_.has_reference = true;
  }
  engine->limits_.max_seq_len = engine->max_seq_len_;
  engine->limits_.max_batch_tokens = engine->max_tokens_;
  engine->limits_.vocab_size = config.vocab_size;
  engine->limits_.smallest_vocab_shard = SmallestVocabShard(config.vocab_size, tp);
  if (tp > 1) {
    // Refuse a checkpoint that cannot be cut before anything reaches a device.
    SCORED_RETURN_IF_ERROR(ValidateTensorParallel(*engine->weights_, tp));
    if (engine->reference_ != nullptr) {
      const absl::Status cut = ValidateTensorParallel(*engine->reference_, tp);
      if (!cut.ok()) return absl::Status(cut.code(), absl::StrCat("the reference model: ", cut.message()));
    }
    const int local = tp / options.nnodes;
    if (devices < local) {
      return absl::FailedPreconditionError(absl::StrCat("--tp ", tp, " over ", options.nnodes,
                                                        " process(es) needs ", local, " GPUs here; ", devices,
                                                        " CUDA device(s) are visible"));
    }
  }
  SCORED_ASSIGN_OR_RETURN(engine->info_.model_fingerprint, ModelFingerprint(options.model_dir));
  if (engine->reference_ != nullptr) {
    SCORED_ASSIGN_OR_RETURN(engine->reference_fingerprint_, ModelFingerprint(options.reference_model_dir));
  }
  return engine;
}

absl::Status CudaEngine::StartRanks(const EngineOptions& options, const dist::NcclUniqueId& id,
                                    int first_rank) {
  const int tp = tp_;
  const int local = tp / options.nnodes;
  const ModelWeights& weights = *weights_;
  const ModelConfig& config = weights.config();
  std::vector<int64_t> rank_bytes(local, 0);
  for (int i = 0; i < local; ++i) {
    auto rank = std::make_unique<Rank>();
    rank->index = first_rank + i;
    rank->device = i;
    ranks_.push_back(std::move(rank));
    workers_.push_back(std::make_unique<cuda::RankWorker>());
  }
  // tp 2 in one process: the row-parallel partial products are summed by copy-engine peer copies
  // (cuda::PeerLink, bitwise NCCL's sums) unless EngineOptions::tp_exchange asks for NCCL; NCCL where the
  // GPUs cannot reach each other's memory.
  if (local == 2 && options.nnodes == 1 && options.tp_exchange == TpExchange::kCopy) {
    absl::StatusOr<std::unique_ptr<cuda::PeerLink>> link = cuda::PeerLink::Create(0, 1);
    if (link.ok()) {
      peer_link_ = *std::move(link);
    } else {
      SCORED_LOG(WARNING) << link.status().message() << "; the row-parallel sums run as NCCL all-reduces";
    }
  }
  // Every rank joins the communicator first (a collective: all ranks at once), then loads its shard.
  SCORED_RETURN_IF_ERROR(OnAllRanks([&](Rank& rank) -> absl::Status {
    SCORED_CUDA_CHECK(cudaSetDevice(rank.device));
    SCORED_ASSIGN_OR_RETURN(rank.comm, dist::NcclCommunicator::CreateRank(id, tp, rank.index, rank.device));
    SCORED_ASSIGN_OR_RETURN(const ShardPlan plan, ShardPlan::Create(config, tp, rank.index));
    rank.config = LocalConfig(config, plan);
    rank.tp.comm = rank.comm.get();
    rank.tp.vocab_size = config.vocab_size;
    rank.tp.vocab_begin = plan.vocab_begin;
    rank.tp.vocab_rows = plan.vocab_end - plan.vocab_begin;
    return cuda::BuildRank(weights, reference_.get(), options, &plan, peer_link_.get(), &rank,
                           &rank_bytes[rank.index - first_rank]);
  }));
  std::vector<dist::NcclCommunicator*> comms;
  for (const auto& rank : ranks_) comms.push_back(rank->comm.get());
  watchdog_ = std::make_unique<dist::NcclWatchdog>(comms, absl::Milliseconds(100),
                                                   [this](const absl::Status& status) { SetFatal(status); });
  FillInfo(options, rank_bytes[0]);
  return absl::OkStatus();
}

// The static facts of `weights` on this engine (the model's, or the reference model's).
ModelInfo DescribeModel(const ModelWeights& weights, const EngineOptions& options, int tp,
                        int64_t max_seq_len) {
  const ModelConfig& config = weights.config();
  const ModelSummary& summary = weights.summary();
  ModelInfo info;
  info.architecture = config.architecture;
  info.format = weights.EngineFormat(options.kv_cache_quant);
  info.format_notes = summary.notes;
  info.backend = "cuda";
  info.compute_dtype = options.dtype == ComputeDtype::kBf16 ? "bf16" : "fp32";
  info.tp = tp;
  info.vocab_size = config.vocab_size;
  info.max_seq_len = max_seq_len;
  info.max_batch_tokens = options.max_batch_tokens;
  info.num_parameters = summary.num_parameters;
  info.bits_per_weight_decoder = summary.bits_per_weight_decoder;
  info.bits_per_weight_head = summary.bits_per_weight_head;
  return info;
}

void CudaEngine::FillInfo(const EngineOptions& options, int64_t activation_bytes) {
  const ModelConfig& config = weights_->config();
  const ModelSummary& summary = weights_->summary();
  std::string fingerprint = std::move(info_.model_fingerprint);
  info_ = DescribeModel(*weights_, options, tp_, max_seq_len_);
  info_.model_fingerprint = std::move(fingerprint);
  ModelInfo& info = info_;
  for (const auto& rank : ranks_) info.resident_bytes += rank->model->resident_bytes;
  // Which mixture-of-experts kernels run (EngineOptions::moe_gemm / moe_sm90_schedule): every rank's alike.
  AppendNote(cuda::GroupedExpertsNote(*ranks_.front()->model), &info.format_notes);
  if (reference_ != nullptr) {
    ModelInfo reference = DescribeModel(*reference_, options, tp_, max_seq_len_);
    for (const auto& rank : ranks_) reference.resident_bytes += rank->ref_model->resident_bytes;
    AppendNote(cuda::GroupedExpertsNote(*ranks_.front()->ref_model), &reference.format_notes);
    reference.model_fingerprint = reference_fingerprint_;
    info.reference = std::make_shared<const ModelInfo>(std::move(reference));
    SCORED_LOG(INFO) << "reference model: " << reference_->config().architecture << " "
                     << reference_->summary().format << ", weights " << GiB(info.reference->resident_bytes)
                     << " GiB here (want_reference compares with it)";
  }
  SCORED_LOG(INFO) << "cuda engine: " << config.architecture << " " << summary.format << ", "
                   << info.compute_dtype << ", tp " << tp_ << " (" << ranks_.size()
                   << " GPU(s) here), weights " << GiB(info.resident_bytes) << " GiB here, activations for "
                   << options.max_batch_tokens << " tokens " << GiB(activation_bytes) << " GiB per GPU"
                   << (tp_ == 1                ? ""
                       : peer_link_ != nullptr ? ", row-parallel sums by peer copies"
                                               : ", row-parallel sums by NCCL all-reduce");
}

absl::StatusOr<std::unique_ptr<Engine>> CudaEngine::Create(const EngineOptions& options) {
  if (options.node_rank != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--node_rank ", options.node_rank, ": a follower process runs RunFollower, not a serving engine"));
  }
  SCORED_ASSIGN_OR_RETURN(std::unique_ptr<CudaEngine> engine, Load(options));
  if (engine->tp_ == 1) {
    auto rank = std::make_unique<Rank>();
    rank->config = engine->weights_->config();
    SCORED_CUDA_CHECK(cudaSetDevice(rank->device));
    int64_t activation_bytes = 0;
    SCORED_RETURN_IF_ERROR(cuda::BuildRank(*engine->weights_, engine->reference_.get(), options, nullptr,
                                           nullptr, rank.get(), &activation_bytes));
    engine->ranks_.push_back(std::move(rank));
    engine->FillInfo(options, activation_bytes);
    return std::unique_ptr<Engine>(std::move(engine));
  }
  SCORED_ASSIGN_OR_RETURN(const dist::NcclUniqueId id, dist::NcclCommunicator::NewUniqueId());
  if (options.nnodes > 1) {
    // Every follower gets the communicator id and our model's fingerprint (it refuses a different model).
    SCORED_ASSIGN_OR_RETURN(
        engine->leader_, dist::Leader::Start(*options.control_transport, options.rendezvous, options.nnodes,
                                             absl::string_view(id.bytes.data(), id.bytes.size()),
                                             engine->info_.model_fingerprint));
  }
  SCORED_RETURN_IF_ERROR(engine->StartRanks(options, id, 0));
  if (engine->leader_ != nullptr) {
    CudaEngine* raw = engine.get();
    engine->leader_->WatchPeers(
        [raw](const absl::Status& status) { raw->FailAllRanks(status).IgnoreError(); });
  }
  return std::unique_ptr<Engine>(std::move(engine));
}

absl::Status CudaEngine::RunFollower(const EngineOptions& options) {
  if (options.nnodes < 2 || options.node_rank < 1 || options.node_rank >= options.nnodes) {
    return absl::InvalidArgumentError(
        absl::StrCat("a follower needs --nnodes >= 2 and --node_rank in [1, nnodes); got ", options.nnodes,
                     " and ", options.node_rank));
  }
  SCORED_ASSIGN_OR_RETURN(std::unique_ptr<CudaEngine> engine, Load(options));
  if (engine->tp_ < 2) return absl::InvalidArgumentError("a follower needs --tp > 1");
  dist::NcclUniqueId id;
  SCORED_ASSIGN_OR_RETURN(
      std::unique_ptr<dist::Follower> follower,
      dist::Follower::Join(*options.control_transport, options.rendezvous, options.nnodes, options.node_rank,
                           id.bytes.size(), engine->info_.model_fingerprint, options.model_dir));
  std::memcpy(id.bytes.data(), follower->nccl_id().data(), id.bytes.size());
  const int local = engine->tp_ / options.nnodes;
  SCORED_RETURN_IF_ERROR(engine->StartRanks(options, id, options.node_rank * local));
  CudaEngine* raw = engine.get();
  follower->WatchPeers([raw](const absl::Status& status) { raw->FailAllRanks(status).IgnoreError(); });
  return follower->Run(
      engine->max_tokens_, [raw] { return raw->fatal_status(); },
      [raw](const PackedBatch& batch) {
        return raw->OnAllRanks([&](Rank& rank) { return cuda::RunRank(rank, batch, nullptr); });
      },
      [raw](const absl::Status& status) { return raw->FailAllRanks(status); });
}

CudaEngine::~CudaEngine() {
  if (leader_ != nullptr) {
    const absl::Status shutdown = leader_->Shutdown();  // the followers end cleanly
    if (!shutdown.ok()) {
      SCORED_LOG(WARNING) << "telling the followers to stop: " << shutdown;
    }
  }
  watchdog_.reset();
  if (workers_.empty()) return;
  // Each rank's device state goes on its own thread, all at once (the communicators finalize together).
  const absl::Status destroyed = OnAllRanks([this](Rank& rank) -> absl::Status {
    if (cudaSetDevice(rank.device) != cudaSuccess) return absl::InternalError("cudaSetDevice");
    if (peer_link_ != nullptr) peer_link_->ReleaseRank(rank.index);
    Rank gone;
    std::swap(gone.comm, rank.comm);
    std::swap(gone.model, rank.model);
    std::swap(gone.ref_model, rank.ref_model);
    std::swap(gone.gemm, rank.gemm);
    std::swap(gone.acts, rank.acts);
    std::swap(gone.stream, rank.stream);
    return absl::OkStatus();
  });
  if (!destroyed.ok()) {
    SCORED_LOG(ERROR) << "tensor-parallel teardown: " << destroyed;
  }
}

absl::Status CudaEngine::OnAllRanks(const std::function<absl::Status(Rank&)>& job) {
  for (size_t r = 0; r < workers_.size(); ++r) {
    Rank* rank = ranks_[r].get();
    workers_[r]->Post([&job, rank] { return job(*rank); });
  }
  absl::Status first;
  for (auto& worker : workers_) first.Update(worker->Wait());
  return first;
}

void CudaEngine::SetFatal(const absl::Status& status) {
  absl::MutexLock lock(&mu_);
  if (!fatal_.ok()) return;
  fatal_ = absl::UnavailableError(absl::StrCat(
      "tensor-parallel communicator failed; the engine cannot serve any more: ", status.ToString()));
  SCORED_LOG(ERROR) << fatal_;
}

absl::Status CudaEngine::FailAllRanks(const absl::Status& status) {
  SetFatal(status);
  if (peer_link_ != nullptr) peer_link_->Abort(status);
  for (const auto& rank : ranks_) {
    if (rank->comm != nullptr) rank->comm->Abort(status);
  }
  return fatal_status();
}

absl::Status CudaEngine::InjectCommunicatorFault(int rank) {
  if (rank < 0 || rank >= static_cast<int>(ranks_.size()) || ranks_[rank]->comm == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("no communicator for rank ", rank));
  }
  ranks_[rank]->comm->Abort(absl::InternalError(absl::StrCat("injected fault on rank ", rank)));
  return absl::OkStatus();
}

std::vector<std::pair<int64_t, int64_t>> CudaEngine::DeviceMemory() const {
  std::vector<std::pair<int64_t, int64_t>> memory;
  for (const auto& rank : ranks_) {
    size_t free_bytes = 0, total_bytes = 0;
    if (cudaSetDevice(rank->device) != cudaSuccess ||
        cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess)
      return {};
    memory.emplace_back(static_cast<int64_t>(total_bytes - free_bytes), static_cast<int64_t>(total_bytes));
  }
  return memory;
}

absl::Status CudaEngine::CheckSticky(absl::Status status) {
  if (status.ok()) return status;
  const cudaError_t err = cudaStreamSynchronize(ranks_.front()->stream.get());
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

std::vector<absl::StatusOr<ScoreResult>> CudaEngine::Score(absl::Span<const ScoreRequest> batch) {
  if (absl::Status fatal = fatal_status(); !fatal.ok()) {
    return std::vector<absl::StatusOr<ScoreResult>>(batch.size(), fatal);
  }
  std::vector<absl::StatusOr<ScoreResult>> results(batch.size(), absl::InternalError("not scored"));
  std::vector<size_t> valid;  // indices into `batch` of the requests that run
  for (size_t i = 0; i < batch.size(); ++i) {
    // (A StatusOr may not be assigned an OK status: a valid request keeps "not scored" until it runs.)
    if (absl::Status checked = ValidateScoreRequest(batch[i], limits_); !checked.ok()) {
      results[i] = std::move(checked);
    } else {
      valid.push_back(i);
    }
  }
  if (valid.empty()) return results;
  // A failure of the whole batch (the injected device trap, a forward) goes to every request still to run.
  const auto fail_from = [&](size_t first, const absl::Status& status) {
    for (size_t v = first; v < valid.size(); ++v) results[valid[v]] = status;
    return results;
  };
  if (fault_device_trap_after_ >= 0 && score_calls_++ == fault_device_trap_after_) {
    SCORED_LOG(WARNING) << "fault injection: a device trap before this batch's forward (testing only)";
    const absl::Status trapped = CheckSticky(kernels::DeviceTrap(ranks_.front()->stream.get()));
    if (!trapped.ok()) return fail_from(0, trapped);
  }
  // Consecutive requests share a forward while their tokens fit; results do not depend on the grouping.
  size_t begin = 0;
  while (begin < valid.size()) {
    std::vector<const ScoreRequest*> group;
    int64_t tokens = 0;
    size_t end = begin;
    while (end < valid.size() &&
           tokens + static_cast<int64_t>(batch[valid[end]].tokens.size()) <= max_tokens_) {
      tokens += static_cast<int64_t>(batch[valid[end]].tokens.size());
      group.push_back(&batch[valid[end]]);
      ++end;
    }
    absl::StatusOr<std::vector<ScoreResult>> scored = ScoreGroup(group);
    if (!scored.ok()) return fail_from(begin, scored.status());
    for (size_t v = begin; v < end; ++v) results[valid[v]] = std::move((*scored)[v - begin]);
    begin = end;
  }
  return results;
}

absl::StatusOr<std::vector<ScoreResult>> CudaEngine::ScoreGroup(absl::Span<const ScoreRequest* const> group) {
  const PackedBatch packed = cuda::PackBatch(group);
  HostResults host;
  if (workers_.empty()) {
    SCORED_RETURN_IF_ERROR(CheckSticky(cuda::RunRank(*ranks_.front(), packed, &host)));
  } else {
    if (leader_ != nullptr) {
      // The followers run the same batch on their ranks.
      const absl::Status sent = leader_->Broadcast(packed);
      if (!sent.ok()) return FailAllRanks(sent);
    }
    const absl::Status run = OnAllRanks(
        [&](Rank& rank) { return cuda::RunRank(rank, packed, rank.index == 0 ? &host : nullptr); });
    if (!run.ok()) return FailAllRanks(run);
  }
  return cuda::UnpackResults(group, packed, host);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Engine>> CreateCudaEngine(const EngineOptions& options) {
  return CudaEngine::Create(options);
}

absl::Status RunCudaFollower(const EngineOptions& options) { return CudaEngine::RunFollower(options); }

absl::Status InjectCommunicatorFaultForTesting(Engine* engine, int rank) {
  auto* cuda_engine = dynamic_cast<CudaEngine*>(engine);
  if (cuda_engine == nullptr) return absl::InvalidArgumentError("not a CUDA engine");
  return cuda_engine->InjectCommunicatorFault(rank);
}

}  // namespace scored
