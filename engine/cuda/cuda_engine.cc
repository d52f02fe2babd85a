#include "engine/cuda/cuda_engine.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "engine/base/logging.h"
#include "engine/base/status_macros.h"
#include "engine/cuda/device_buffer.h"
#include "engine/cuda/device_weights.h"
#include "engine/cuda/gemm.h"
#include "engine/cuda/peer_link.h"
#include "engine/cuda/rank_worker.h"
#include "engine/cuda/transformer.h"
#include "engine/dist/control_channel.h"
#include "engine/dist/nccl_communicator.h"
#include "engine/kernels/cuda_check.h"
#include "engine/kernels/device_trap.h"
#include "engine/kernels/fp8_quant.h"
#include "engine/kernels/kernel_types.h"
#include "engine/model/fingerprint.h"
#include "engine/model/shard_plan.h"
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
// pins the fastest (GemmRunner::Tune). one_gpu: o_proj / down_proj run as two GEMMs over their input column
// halves where acts.row_parallel_halves says so (cuda::SumsInHalves); those shapes are the ones timed.
absl::Status TuneLayerGemms(const DeviceModel& model, GemmRunner& gemm, Activations& acts,
                            cudaStream_t stream, bool one_gpu) {
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
    bool row_parallel;
  };
  const Job jobs[] = {{&layer.qkv, &acts.normed, &acts.qkv, cuda::GemmTypes::kBf16ToBf16, false},
                      {&layer.o, &acts.attn, &acts.proj, cuda::GemmTypes::kBf16ToFp32, true},
                      {&layer.gate_up, &acts.normed, &acts.gate_up, cuda::GemmTypes::kBf16ToBf16, false},
                      {&layer.down, &acts.mlp, &acts.proj, cuda::GemmTypes::kBf16ToFp32, true}};
  for (const Job& job : jobs) {
    const int64_t out = job.linear->out_features(), in = job.linear->in_features();
    cuda::GemmTypes types = job.types;
    if (job.linear->fp8_resident()) {
      // FP8: the input buffer quantized per token (real codes and scales), the resident FP8 weight.
      types =
          types == cuda::GemmTypes::kBf16ToBf16 ? cuda::GemmTypes::kFp8ToBf16 : cuda::GemmTypes::kFp8ToFp32;
      SCORED_RETURN_IF_ERROR(kernels::QuantizeFp8PerToken(job.x->as<kernels::bf16_t>(), in, acts.max_tokens,
                                                          in, acts.act_fp8.as<uint8_t>(),
                                                          acts.act_scale.as<float>(), stream));
      SCORED_RETURN_IF_ERROR(gemm.Tune(acts.act_fp8.data(), job.linear->fp8_weight(), job.y->data(), out, in,
                                       types, stream, acts.act_scale.as<float>(), job.linear->fp8_scale()));
    } else {
      SCORED_ASSIGN_OR_RETURN(const void* w,
                              job.linear->Materialize(model.dtype, acts.scratch.data(), stream));
      if (job.row_parallel && one_gpu && acts.row_parallel_halves &&
          cuda::SumsInHalves(*job.linear, model.dtype)) {
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

// One batch packed on the host once and handed to every rank: rows of sequence s are
// [fb.cu_seqlens[s], fb.cu_seqlens[s + 1]).
struct PackedBatch {
  ForwardBatch fb;
  std::vector<int32_t> tokens, positions, targets;  // [n] each
  std::vector<int64_t> first_row;                   // per sequence: the first row whose logits are scored
};

// Per-row results copied back from the device (rank 0 at tp > 1: every rank holds the same).
struct HostResults {
  std::vector<double> logprob;   // [n]
  std::vector<uint8_t> greedy;   // [n]
  std::vector<int32_t> rank;     // [n] if asked
  std::vector<float> entropy;    // [n] if asked
  std::vector<int32_t> top_ids;  // [n, top_k]
  std::vector<float> top_lps;    // [n, top_k]
};

// The wire form of a PackedBatch for follower processes (a few KB; same-architecture hosts, so the
// integers go as their host bytes): [i64 num_tokens][i32 num_seqs][i32 max_seqlen][i32 top_k][u8 rank]
// [u8 entropy][i64 num_spans][spans: i64 begin, i64 end][tokens][positions][targets][cu_seqlens].
template <typename T>
void Put(std::string* out, const T& v) {
  out->append(reinterpret_cast<const char*>(&v), sizeof(T));
}
template <typename T>
void PutArray(std::string* out, const std::vector<T>& v) {
  out->append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

std::string SerializeBatch(const PackedBatch& b) {
  std::string out;
  Put(&out, b.fb.num_tokens);
  Put(&out, b.fb.num_seqs);
  Put(&out, b.fb.max_seqlen);
  Put(&out, b.fb.options.top_k);
  Put(&out, static_cast<uint8_t>(b.fb.options.want_rank));
  Put(&out, static_cast<uint8_t>(b.fb.options.want_entropy));
  Put(&out, static_cast<int64_t>(b.fb.lm_head_rows.size()));
  for (const RowSpan& span : b.fb.lm_head_rows) {
    Put(&out, span.begin);
    Put(&out, span.end);
  }
  PutArray(&out, b.tokens);
  PutArray(&out, b.positions);
  PutArray(&out, b.targets);
  PutArray(&out, b.fb.cu_seqlens);
  return out;
}

class Reader {
 public:
  explicit Reader(const std::string& bytes) : bytes_(bytes) {}
  template <typename T>
  bool Get(T* v) {
    if (bytes_.size() - pos_ < sizeof(T)) return false;
    std::memcpy(v, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return true;
  }
  template <typename T>
  bool GetArray(int64_t n, std::vector<T>* v) {
    if (n < 0 || static_cast<uint64_t>(n) > (bytes_.size() - pos_) / sizeof(T)) return false;
    v->resize(n);
    std::memcpy(v->data(), bytes_.data() + pos_, n * sizeof(T));
    pos_ += n * sizeof(T);
    return true;
  }
  bool done() const { return pos_ == bytes_.size(); }

 private:
  const std::string& bytes_;
  size_t pos_ = 0;
};

// INTERNAL for a malformed or oversized batch (the leader and this process disagree: never run it).
absl::StatusOr<PackedBatch> ParseBatch(const std::string& bytes, int64_t max_tokens) {
  PackedBatch b;
  Reader in(bytes);
  uint8_t want_rank = 0, want_entropy = 0;
  int64_t spans = 0;
  bool ok = in.Get(&b.fb.num_tokens) && in.Get(&b.fb.num_seqs) && in.Get(&b.fb.max_seqlen) &&
            in.Get(&b.fb.options.top_k) && in.Get(&want_rank) && in.Get(&want_entropy) && in.Get(&spans);
  ok = ok && b.fb.num_tokens > 0 && b.fb.num_tokens <= max_tokens && b.fb.num_seqs > 0 &&
       b.fb.options.top_k >= 0 && b.fb.options.top_k <= kernels::kMaxTopK &&
       b.fb.num_seqs <= b.fb.num_tokens && spans >= 0 && spans <= b.fb.num_seqs;
  for (int64_t i = 0; ok && i < spans; ++i) {
    RowSpan span;
    ok = in.Get(&span.begin) && in.Get(&span.end) && span.begin >= 0 && span.begin <= span.end &&
         span.end <= b.fb.num_tokens;
    b.fb.lm_head_rows.push_back(span);
  }
  ok = ok && in.GetArray(b.fb.num_tokens, &b.tokens) && in.GetArray(b.fb.num_tokens, &b.positions) &&
       in.GetArray(b.fb.num_tokens, &b.targets) &&
       in.GetArray(int64_t{b.fb.num_seqs} + 1, &b.fb.cu_seqlens) && in.done();
  if (!ok) return absl::InternalError("malformed batch from the leader");
  b.fb.options.want_rank = want_rank != 0;
  b.fb.options.want_entropy = want_entropy != 0;
  return b;
}

// The leader's bootstrap payload: the NCCL unique id, then the model fingerprint.
std::string MakePayload(const dist::NcclUniqueId& id, const std::string& fingerprint) {
  return std::string(id.bytes.data(), id.bytes.size()) + fingerprint;
}

// One rank's device state. At tp > 1 it is created, used and destroyed on the rank's RankWorker thread;
// at tp == 1 on the engine's calling thread.
struct Rank {
  int index = 0;       // tp_rank
  int device = 0;      // CUDA ordinal
  ModelConfig config;  // the model's (tp == 1) or the rank's LocalConfig
  CudaStream stream;
  std::unique_ptr<GemmRunner> gemm;
  std::unique_ptr<DeviceModel> model;
  Activations acts;
  std::unique_ptr<dist::NcclCommunicator> comm;  // tp > 1 only
  cuda::TensorParallelContext tp;                // tp > 1 only
};

std::string DeviceName(int device) {
  cudaDeviceProp prop;
  if (cudaGetDeviceProperties(&prop, device) != cudaSuccess) return absl::StrCat("GPU ", device);
  return absl::StrCat("GPU ", device, " (", prop.name, ")");
}

// Everything of one rank after its communicator: shard upload, activation reservation (with `link`: this
// rank's peer-copy receive buffers too), GEMM choices.
absl::Status BuildRank(const ModelWeights& weights, const EngineOptions& options, const ShardPlan* plan,
                       cuda::PeerLink* link, Rank* rank, int64_t* activation_bytes) {
  const int64_t max_tokens = options.max_batch_tokens;
  const int tp_size = plan != nullptr ? plan->tp_size : 1;
  SCORED_ASSIGN_OR_RETURN(rank->stream, CudaStream::Create());
  SCORED_ASSIGN_OR_RETURN(rank->gemm, GemmRunner::Create(max_tokens));
  SCORED_ASSIGN_OR_RETURN(rank->model, cuda::UploadModel(weights, options.dtype, plan));
  const DeviceModel& model = *rank->model;
  const ModelConfig& config = rank->config;

  // Reserve the activations of max_batch_tokens now, or say what would fit.
  size_t free_bytes = 0, total_bytes = 0;
  SCORED_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  const int64_t per_token = cuda::ActivationBytesPerToken(config, options.dtype);
  const int64_t link_elements = max_tokens * config.hidden_size;
  const int64_t fixed = cuda::FixedActivationBytes(config, model, max_tokens, tp_size) +
                        (link != nullptr ? cuda::PeerLink::BytesPerRank(link_elements) : 0);
  const int64_t available = static_cast<int64_t>(free_bytes) - kReserveBytes;
  const auto too_big = [&]() {
    const int64_t fits = std::max<int64_t>(0, (available - fixed) / per_token);
    return absl::ResourceExhaustedError(absl::StrFormat(
        "%s: max_batch_tokens %d needs %.2f GiB of activations (%.2f MiB per token + %.2f GiB "
        "fixed) but only %.2f GiB "
        "of GPU memory is free after the %.2f GiB of weights; at most %d tokens fit",
        DeviceName(rank->device), max_tokens, GiB(fixed + per_token * max_tokens), per_token / 1048576.0,
        GiB(fixed), GiB(available), GiB(model.resident_bytes), fits));
  };
  if (fixed + per_token * max_tokens > available) return too_big();
  absl::StatusOr<Activations> acts = cuda::AllocateActivations(config, model, max_tokens, tp_size);
  if (absl::IsResourceExhausted(acts.status())) return too_big();
  if (!acts.ok()) return acts.status();
  rank->acts = *std::move(acts);
  if (link != nullptr) {
    const absl::Status linked = link->InitRank(rank->index, link_elements);
    if (absl::IsResourceExhausted(linked)) return too_big();
    SCORED_RETURN_IF_ERROR(linked);
    rank->tp.peer = link;
  }
  // Row-chunk pipelining of the tensor-parallel all-reduces (Activations::tp_row_chunks):
  // SCORED_TP_ROW_CHUNKS = 1 turns it off, c > 1 forces c chunks; unset or 0 is auto.
  if (const char* chunks = std::getenv("SCORED_TP_ROW_CHUNKS"); chunks != nullptr && tp_size > 1) {
    int value = 0;
    if (!absl::SimpleAtoi(chunks, &value) || value < 0 || value > cuda::kMaxTpRowChunks) {
      return absl::InvalidArgumentError(
          absl::StrCat("SCORED_TP_ROW_CHUNKS=", chunks, ": want 0 (auto) to ", cuda::kMaxTpRowChunks));
    }
    rank->acts.tp_row_chunks = value;
  }
  // tp 1: o_proj / down_proj sum in two halves of their input, bitwise as tp 2 does (cuda::SumsInHalves);
  // SCORED_ROW_PARALLEL_HALVES=0 runs one GEMM each instead.
  if (const char* halves = std::getenv("SCORED_ROW_PARALLEL_HALVES");
      halves != nullptr && halves[0] != '\0') {
    if (std::string(halves) != "0" && std::string(halves) != "1") {
      return absl::InvalidArgumentError(absl::StrCat("SCORED_ROW_PARALLEL_HALVES=", halves, ": want 0 or 1"));
    }
    rank->acts.row_parallel_halves = std::string(halves) == "1";
  }
  *activation_bytes = fixed + per_token * max_tokens;

  int fp8_linears = 0, w8a8_linears = 0;
  for (const cuda::DeviceLayer& layer : model.layers) {
    for (const cuda::DeviceLinear* linear : {&layer.qkv, &layer.o, &layer.gate_up, &layer.down}) {
      fp8_linears += linear->fp8_resident() ? 1 : 0;
      w8a8_linears += linear->w8a8_dynamic_fp8() ? 1 : 0;
    }
  }
  if (w8a8_linears > 0) {
    SCORED_LOG(INFO)
        << DeviceName(rank->device) << ": W8A8 " << fp8_linears << " of " << w8a8_linears
        << " linear groups run as FP8 GEMMs, the rest emulated (bf16 GEMM on fake-quantized inputs)";
  }

  // Pin every GEMM algorithm before the first batch: the decoder-layer shapes timed, the rest by heuristic.
  SCORED_RETURN_IF_ERROR(TuneLayerGemms(model, *rank->gemm, rank->acts, rank->stream.get(), plan == nullptr));
  const cuda::GemmTypes types =
      options.dtype == ComputeDtype::kBf16 ? cuda::GemmTypes::kBf16ToBf16 : cuda::GemmTypes::kFp32;
  const cuda::GemmTypes head_types =
      options.dtype == ComputeDtype::kBf16 ? cuda::GemmTypes::kBf16ToFp32 : cuda::GemmTypes::kFp32;
  for (const cuda::DeviceLayer& layer : model.layers) {
    for (const cuda::DeviceLinear* linear : {&layer.qkv, &layer.gate_up}) {
      SCORED_RETURN_IF_ERROR(
          rank->gemm->Prepare(linear->out_features(), linear->in_features(),
                              linear->fp8_resident() ? cuda::GemmTypes::kFp8ToBf16 : types));
    }
    for (const cuda::DeviceLinear* linear : {&layer.o, &layer.down}) {
      const int64_t in = linear->in_features();
      if (plan == nullptr && rank->acts.row_parallel_halves && cuda::SumsInHalves(*linear, options.dtype)) {
        SCORED_RETURN_IF_ERROR(rank->gemm->Prepare(linear->out_features(), in / 2, head_types, in));
        continue;
      }
      SCORED_RETURN_IF_ERROR(rank->gemm->Prepare(
          linear->out_features(), in, linear->fp8_resident() ? cuda::GemmTypes::kFp8ToFp32 : head_types));
    }
  }
  return rank->gemm->Prepare(model.lm_head.out_features(), model.lm_head.in_features(), head_types);
}

class CudaEngine final : public Engine {
 public:
  static absl::StatusOr<std::unique_ptr<Engine>> Create(const EngineOptions& options);
  // A follower process: joins the leader, loads its ranks and runs the leader's batches until the end.
  static absl::Status RunFollower(const EngineOptions& options);
  ~CudaEngine() override;

  absl::StatusOr<std::vector<ScoreResult>> Score(absl::Span<const ScoreRequest> batch) override;
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
  absl::Status ValidateRequest(const ScoreRequest& r, size_t index) const;
  // One varlen forward over `group` (whose tokens fit max_batch_tokens), appending the results.
  absl::Status ScoreGroup(absl::Span<const ScoreRequest> group, std::vector<ScoreResult>* results);
  // Copies the packed batch to `rank`, runs its forward and (when `out` is set) copies the per-row
  // results back; returns once the rank's stream has drained.
  absl::Status RunRank(Rank& rank, const PackedBatch& batch, HostResults* out);
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
  int64_t score_calls_ = 0;               // Score() calls so far (Score() runs on one thread)
  int64_t max_seq_len_ = 0;
  int64_t max_tokens_ = 0;
  std::unique_ptr<ModelWeights> weights_;
  std::vector<std::unique_ptr<Rank>> ranks_;                // [tp]
  std::vector<std::unique_ptr<cuda::RankWorker>> workers_;  // [tp] at tp > 1, else empty
  std::unique_ptr<cuda::PeerLink> peer_link_;               // tp 2 in one process, unless NCCL was asked for
  std::unique_ptr<dist::NcclWatchdog> watchdog_;
  std::unique_ptr<dist::ControlChannel> channel_;  // multi-process only: leader or follower end
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
  if (options.max_batch_tokens <= 0) return absl::InvalidArgumentError("max_batch_tokens must be positive");
  const int devices = CudaDeviceCount();
  if (devices < 1) return absl::FailedPreconditionError("no usable CUDA device");
  std::unique_ptr<CudaEngine> engine(new CudaEngine());
  engine->tp_ = tp;
  engine->max_tokens_ = options.max_batch_tokens;
  engine->fault_device_trap_after_ = options.fault_device_trap_after_batches;

  SCORED_ASSIGN_OR_RETURN(engine->weights_, ModelWeights::Load(options.model_dir));
  const ModelConfig& config = engine->weights_->config();
  if (std::find(std::begin(kSupportedHeadDims), std::end(kSupportedHeadDims), config.head_dim) ==
      std::end(kSupportedHeadDims)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "head_dim ", config.head_dim, " is not supported by the attention kernel (8..256, powers of 2)"));
  }
  engine->max_seq_len_ = options.max_seq_len > 0 ? options.max_seq_len : config.max_position_embeddings;
  if (tp > 1) {
    // Refuse a checkpoint that cannot be cut before anything reaches a device.
    SCORED_RETURN_IF_ERROR(ValidateTensorParallel(*engine->weights_, tp));
    const int local = tp / options.nnodes;
    if (devices < local) {
      return absl::FailedPreconditionError(absl::StrCat("--tp ", tp, " over ", options.nnodes,
                                                        " process(es) needs ", local, " GPUs here; ", devices,
                                                        " CUDA device(s) are visible"));
    }
  }
  SCORED_ASSIGN_OR_RETURN(engine->info_.model_fingerprint, ModelFingerprint(options.model_dir));
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
  // (cuda::PeerLink, bitwise NCCL's sums) unless SCORED_TP_EXCHANGE=nccl; NCCL where the GPUs cannot reach
  // each other's memory.
  if (local == 2 && options.nnodes == 1) {
    const char* exchange = std::getenv("SCORED_TP_EXCHANGE");
    const std::string mode = exchange != nullptr && exchange[0] != '\0' ? exchange : "copy";
    if (mode != "copy" && mode != "nccl") {
      return absl::InvalidArgumentError(absl::StrCat("SCORED_TP_EXCHANGE=", mode, ": want copy or nccl"));
    }
    if (mode == "copy") {
      absl::StatusOr<std::unique_ptr<cuda::PeerLink>> link = cuda::PeerLink::Create(0, 1);
      if (link.ok()) {
        peer_link_ = *std::move(link);
      } else {
        SCORED_LOG(WARNING) << link.status().message() << "; the row-parallel sums run as NCCL all-reduces";
      }
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
    return BuildRank(weights, options, &plan, peer_link_.get(), &rank, &rank_bytes[rank.index - first_rank]);
  }));
  std::vector<dist::NcclCommunicator*> comms;
  for (const auto& rank : ranks_) comms.push_back(rank->comm.get());
  watchdog_ = std::make_unique<dist::NcclWatchdog>(comms, absl::Milliseconds(100),
                                                   [this](const absl::Status& status) { SetFatal(status); });
  FillInfo(options, rank_bytes[0]);
  return absl::OkStatus();
}

void CudaEngine::FillInfo(const EngineOptions& options, int64_t activation_bytes) {
  const ModelConfig& config = weights_->config();
  const ModelSummary& summary = weights_->summary();
  ModelInfo& info = info_;
  info.architecture = config.architecture;
  info.format = summary.format;
  info.format_notes = summary.notes;
  info.backend = "cuda";
  info.compute_dtype = options.dtype == ComputeDtype::kBf16 ? "bf16" : "fp32";
  info.tp = tp_;
  info.vocab_size = config.vocab_size;
  info.max_seq_len = max_seq_len_;
  info.max_batch_tokens = options.max_batch_tokens;
  info.num_parameters = summary.num_parameters;
  info.bits_per_weight_decoder = summary.bits_per_weight_decoder;
  info.bits_per_weight_head = summary.bits_per_weight_head;
  info.resident_bytes = 0;
  for (const auto& rank : ranks_) info.resident_bytes += rank->model->resident_bytes;
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
    SCORED_RETURN_IF_ERROR(
        BuildRank(*engine->weights_, options, nullptr, nullptr, rank.get(), &activation_bytes));
    engine->ranks_.push_back(std::move(rank));
    engine->FillInfo(options, activation_bytes);
    return std::unique_ptr<Engine>(std::move(engine));
  }
  SCORED_ASSIGN_OR_RETURN(const dist::NcclUniqueId id, dist::NcclCommunicator::NewUniqueId());
  if (options.nnodes > 1) {
    // Every follower gets the communicator id and our model's fingerprint (it refuses a different model).
    SCORED_ASSIGN_OR_RETURN(const std::string listen, dist::LeaderListenAddress(options.rendezvous));
    SCORED_ASSIGN_OR_RETURN(engine->channel_,
                            dist::ControlChannel::Leader(listen, options.nnodes,
                                                         MakePayload(id, engine->info_.model_fingerprint)));
  }
  SCORED_RETURN_IF_ERROR(engine->StartRanks(options, id, 0));
  if (engine->channel_ != nullptr) {
    CudaEngine* raw = engine.get();
    engine->channel_->WatchPeers(
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
  SCORED_ASSIGN_OR_RETURN(engine->channel_, dist::ControlChannel::Follower(options.rendezvous, options.nnodes,
                                                                           options.node_rank));
  const std::string& payload = engine->channel_->payload();
  dist::NcclUniqueId id;
  if (payload.size() < id.bytes.size()) return absl::InternalError("the leader's payload is too short");
  std::memcpy(id.bytes.data(), payload.data(), id.bytes.size());
  const std::string leader_fingerprint = payload.substr(id.bytes.size());
  if (leader_fingerprint != engine->info_.model_fingerprint) {
    return absl::FailedPreconditionError(
        absl::StrCat("the leader serves model ", leader_fingerprint, " but this process loaded ",
                     engine->info_.model_fingerprint, " from ", options.model_dir));
  }
  const int local = engine->tp_ / options.nnodes;
  SCORED_RETURN_IF_ERROR(engine->StartRanks(options, id, options.node_rank * local));
  CudaEngine* raw = engine.get();
  engine->channel_->WatchPeers(
      [raw](const absl::Status& status) { raw->FailAllRanks(status).IgnoreError(); });
  while (true) {
    absl::StatusOr<std::string> message = engine->channel_->Receive();
    if (absl::IsCancelled(message.status())) return absl::OkStatus();  // the leader's clean shutdown
    if (!message.ok()) {
      return engine->FailAllRanks(
          absl::UnavailableError(absl::StrCat("lost the leader: ", message.status().message())));
    }
    SCORED_RETURN_IF_ERROR(engine->fatal_status());
    absl::StatusOr<PackedBatch> batch = ParseBatch(*message, engine->max_tokens_);
    if (!batch.ok()) return engine->FailAllRanks(batch.status());
    const absl::Status run =
        engine->OnAllRanks([&](Rank& rank) { return engine->RunRank(rank, *batch, nullptr); });
    if (!run.ok()) return engine->FailAllRanks(run);
  }
}

CudaEngine::~CudaEngine() {
  if (channel_ != nullptr) {
    const absl::Status shutdown =
        channel_->Shutdown();  // followers end cleanly (leader; no-op on a follower)
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

absl::Status CudaEngine::ValidateRequest(const ScoreRequest& r, size_t index) const {
  const int64_t n = static_cast<int64_t>(r.tokens.size());
  if (n < 2)
    return absl::InvalidArgumentError(absl::StrCat("request ", index, ": needs at least 2 tokens, got ", n));
  if (n > max_seq_len_) {
    return absl::OutOfRangeError(
        absl::StrCat("request ", index, ": ", n, " tokens exceed max_seq_len ", max_seq_len_));
  }
  if (n > max_tokens_) {
    return absl::OutOfRangeError(
        absl::StrCat("request ", index, ": ", n, " tokens exceed max_batch_tokens ", max_tokens_));
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
  // Vocab-parallel top-k takes top_k from every rank's shard; the last rank's is the smallest.
  const int64_t smallest_shard = vocab - (tp_ - 1) * ((vocab + tp_ - 1) / tp_);
  if (r.top_k > smallest_shard) {
    return absl::InvalidArgumentError(absl::StrCat("request ", index, ": top_k ", r.top_k, " exceeds the ",
                                                   smallest_shard,
                                                   " vocabulary rows of the smallest --tp shard"));
  }
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

absl::StatusOr<std::vector<ScoreResult>> CudaEngine::Score(absl::Span<const ScoreRequest> batch) {
  SCORED_RETURN_IF_ERROR(fatal_status());
  for (size_t i = 0; i < batch.size(); ++i) SCORED_RETURN_IF_ERROR(ValidateRequest(batch[i], i));
  if (fault_device_trap_after_ >= 0 && score_calls_++ == fault_device_trap_after_) {
    SCORED_LOG(WARNING) << "fault injection: a device trap before this batch's forward (testing only)";
    SCORED_RETURN_IF_ERROR(CheckSticky(kernels::DeviceTrap(ranks_.front()->stream.get())));
  }
  std::vector<ScoreResult> results;
  results.reserve(batch.size());
  // Consecutive requests share a forward while their tokens fit; results do not depend on the grouping.
  size_t begin = 0;
  while (begin < batch.size()) {
    size_t end = begin;
    int64_t tokens = 0;
    while (end < batch.size() && tokens + static_cast<int64_t>(batch[end].tokens.size()) <= max_tokens_) {
      tokens += static_cast<int64_t>(batch[end].tokens.size());
      ++end;
    }
    SCORED_RETURN_IF_ERROR(ScoreGroup(batch.subspan(begin, end - begin), &results));
    begin = end;
  }
  return results;
}

absl::Status CudaEngine::RunRank(Rank& rank, const PackedBatch& batch, HostResults* out) {
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
  SCORED_RETURN_IF_ERROR(cuda::Forward(rank.config, *rank.model, *rank.gemm, batch.fb, &acts, stream,
                                       rank.comm != nullptr ? &rank.tp : nullptr));
  if (out != nullptr) {
    // Only per-row results come back.
    const int64_t top_k = batch.fb.options.top_k;
    out->logprob.resize(n);
    out->greedy.resize(n);
    out->rank.resize(batch.fb.options.want_rank ? n : 0);
    out->entropy.resize(batch.fb.options.want_entropy ? n : 0);
    out->top_ids.resize(n * top_k);
    out->top_lps.resize(n * top_k);
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
  }
  // A rank waits with a deadline and the communicator's error in view: a lost peer cannot hang it.
  if (rank.comm != nullptr) return rank.comm->Synchronize(stream);
  return rank.stream.Synchronize();
}

absl::Status CudaEngine::ScoreGroup(absl::Span<const ScoreRequest> group, std::vector<ScoreResult>* results) {
  PackedBatch packed;
  ForwardBatch& fb = packed.fb;
  fb.cu_seqlens = {0};
  for (const ScoreRequest& r : group) {
    const int64_t n = static_cast<int64_t>(r.tokens.size());
    const int64_t offset = static_cast<int64_t>(packed.tokens.size());
    const int64_t from = std::max<int64_t>(1, r.score_from);
    for (int64_t j = 0; j < n; ++j) {
      packed.tokens.push_back(r.tokens[j]);
      packed.positions.push_back(static_cast<int32_t>(j));
      packed.targets.push_back(j + 1 < n ? r.tokens[j + 1] : 0);
    }
    fb.cu_seqlens.push_back(static_cast<int32_t>(offset + n));
    fb.max_seqlen = std::max(fb.max_seqlen, static_cast<int32_t>(n));
    packed.first_row.push_back(offset + from - 1);
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
  fb.num_tokens = static_cast<int64_t>(packed.tokens.size());
  fb.num_seqs = static_cast<int32_t>(group.size());

  HostResults host;
  if (workers_.empty()) {
    SCORED_RETURN_IF_ERROR(CheckSticky(RunRank(*ranks_.front(), packed, &host)));
  } else {
    if (channel_ != nullptr) {
      // The followers run the same batch on their ranks.
      const absl::Status sent = channel_->Broadcast(SerializeBatch(packed));
      if (!sent.ok()) return FailAllRanks(sent);
    }
    const absl::Status run =
        OnAllRanks([&](Rank& rank) { return RunRank(rank, packed, rank.index == 0 ? &host : nullptr); });
    if (!run.ok()) return FailAllRanks(run);
  }

  const int64_t top_k = fb.options.top_k;
  for (size_t s = 0; s < group.size(); ++s) {
    const ScoreRequest& r = group[s];
    const int64_t last_row = fb.cu_seqlens[s + 1] - 1;  // exclusive: the last token predicts nothing
    ScoreResult result;
    for (int64_t row = packed.first_row[s]; row < last_row; ++row) {
      result.logprob.push_back(static_cast<float>(host.logprob[row]));
      result.sum_logprob += host.logprob[row];
      result.greedy.push_back(host.greedy[row]);
      if (r.want_rank) result.rank.push_back(host.rank[row]);
      if (r.want_entropy) result.entropy.push_back(host.entropy[row]);
      if (r.top_k > 0) {
        std::vector<TopKEntry> entries(r.top_k);
        for (int32_t i = 0; i < r.top_k; ++i)
          entries[i] = {host.top_ids[row * top_k + i], host.top_lps[row * top_k + i]};
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

absl::Status RunCudaFollower(const EngineOptions& options) { return CudaEngine::RunFollower(options); }

absl::Status InjectCommunicatorFaultForTesting(Engine* engine, int rank) {
  auto* cuda_engine = dynamic_cast<CudaEngine*>(engine);
  if (cuda_engine == nullptr) return absl::InvalidArgumentError("not a CUDA engine");
  return cuda_engine->InjectCommunicatorFault(rank);
}

}  // namespace scored
