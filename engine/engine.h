// The scoring engine: holds one (possibly quantized) causal LM and answers Score() for batches of
// independent token sequences with exact per-token log-probabilities (DESIGN.md §3, §4).
//
// No gRPC and no CUDA/NCCL headers here: the server links this interface only.
//
// Lifecycle: CreateEngine(options) -> StatusOr<unique_ptr<Engine>>; then Score() any number of times.
// Thread-safety: Score() is NOT reentrant; the server's batcher calls it from one thread. info() is
// immutable after creation and safe from any thread. fatal_status() is safe from any thread.
#ifndef SCORED_ENGINE_ENGINE_H_
#define SCORED_ENGINE_ENGINE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace scored::dist {
class ControlTransportFactory;
}

namespace scored {

enum class Backend { kAuto, kCpu, kCuda };
enum class ComputeDtype { kBf16, kFp32 };
// How the two ranks of tp 2 in one process sum their row-parallel partial products (CUDA).
enum class TpExchange {
  kCopy,  // copy-engine peer copies (engine/cuda/peer_link.h); NCCL where the GPUs cannot reach each other
  kNccl,  // NCCL all-reduces, as tp 4 / 8 and multi-process runs always do
};
// Which kernels run a mixture-of-experts layer's experts where they run as grouped GEMMs (CUDA, bf16 mode;
// engine/cuda/device_weights.h GroupedExperts). Without an sm_90a device and build every choice runs kMma.
enum class MoeGemm {
  kMma,          // "mma": the mma.sync grouped GEMMs (any sm_80+ device), dense bf16 and 4-bit experts
  kSm90,         // "sm90": dense bf16 experts on CUTLASS's SM90 grouped GEMM, 4-bit ones on mma.sync
  kSm90Dequant,  // "sm90_dequant": as sm90, and 4-bit experts dequantized once per GEMM into a stacked bf16
                 // scratch, then the SM90 GEMM
};
// The SM90 grouped GEMM's schedule (kernels/grouped_gemm.h GroupedGemmSm90Schedule).
enum class MoeSm90Schedule {
  kCooperative,     // "cooperative"
  kCooperative2x1,  // "cooperative2x1": two CTAs per tile
  kPingpong,        // "pingpong"
};

struct EngineOptions {
  std::string model_dir;  // HF-style folder: config.json, *.safetensors, tokenizer files
  // The reference model R (`--reference_model`), loaded next to this model Q for
  // ScoreRequest::want_reference; empty = none. Any supported format. CreateEngine refuses (INVALID_ARGUMENT
  // naming both values) an R whose vocabulary size differs from Q's. Both models are held at once (CPU: both
  // decoded to fp32 in host memory; CUDA: both on the same GPUs with the same tp, R sharded like Q, the
  // activations shared; RESOURCE_EXHAUSTED naming both models' weights and a --tp that would fit when they
  // do not, checked before R is uploaded). max_seq_len 0 then means the smaller of the two models'.
  std::string reference_model_dir;
  Backend backend = Backend::kAuto;          // kAuto: CUDA if a GPU is present and built in, else CPU
  ComputeDtype dtype = ComputeDtype::kBf16;  // CUDA only; the CPU reference always computes in fp32/fp64
  int tp = 1;                                // tensor-parallel ranks (CUDA only)
  int64_t max_batch_tokens = 16384;          // most tokens in one Score() batch (sum over sequences)
  int64_t max_seq_len = 0;                   // longest sequence; 0 = the model's max_position_embeddings
  // A max_seq_len above max_position_embeddings is refused unless this is set (ServedContextLength,
  // engine/model/config.h): positions past the trained context are extrapolation.
  bool allow_long_context = false;
  int num_threads = 0;  // CPU backend worker threads; 0 = hardware concurrency
  // A checkpoint's kv_cache_scheme (static per-tensor FP8 K and V, ModelWeights::kv_cache_fp8) is applied as
  // compressed-tensors' transformers integration applies it; false ignores it (`--kv_cache_quant=off`). The
  // engine's ModelInfo::format says which ("+kv-fp8" / "+kv-fp8-ignored"). Also for the reference model.
  bool kv_cache_quant = true;
  // Multi-process tensor parallelism (CUDA only): nnodes processes, each driving tp / nnodes local GPUs
  // (devices 0 .. tp/nnodes - 1); global rank = node_rank * (tp / nnodes) + local index. node_rank 0 is
  // the leader (CreateEngine, serves Score); the others call RunFollower. rendezvous: the leader's
  // HOST:PORT (engine/dist/control_transport.h).
  int nnodes = 1;
  int node_rank = 0;
  std::string rendezvous;
  // Multi-process only: makes the control-plane ends (the server implements it over gRPC).
  std::shared_ptr<dist::ControlTransportFactory> control_transport;
  // Testing only (CUDA): -1 = off; N >= 0 = the (N+1)-th Score() call first runs a kernel that traps on the
  // device (engine/kernels/device_trap.h), a real sticky device failure: that call and every later one return
  // UNAVAILABLE and fatal_status() turns UNAVAILABLE. The CPU backend refuses it (INVALID_ARGUMENT).
  int64_t fault_device_trap_after_batches = -1;
  // CUDA execution settings, `scored` flags of the same names (engine/dist/README.md, tests/bench/RESULTS.md
  // for what they cost). tp_row_chunks and tp_exchange never change a bit of a result (tests check it);
  // row_parallel_halves does. CreateEngine returns INVALID_ARGUMENT naming the flag for a value out of range.
  // tp > 1: row-chunk pipelining of the row-parallel sums (each layer runs in chunks of whole sequences, a
  // chunk's sum over ranks overlapping the next chunk's compute). 0 = auto (2 chunks from 8192 tokens, else
  // off), 1 = off, c in [2, kMaxTpRowChunks] = at most c chunks whatever the batch size.
  static constexpr int kMaxTpRowChunks = 8;
  int tp_row_chunks = 0;
  // tp 1: o_proj / down_proj sum their input columns in two halves, bitwise what tp 2 computes; false runs
  // one GEMM each (0.6-1.1% faster, and then tp 1 no longer matches tp 2 bit for bit).
  bool row_parallel_halves = true;
  // tp 2 in one process: see TpExchange.
  TpExchange tp_exchange = TpExchange::kCopy;
  // Mixture-of-experts models: the grouped expert GEMMs' kernels (`--moe_gemm` mma | sm90 | sm90_dequant,
  // default sm90_dequant: measured 1.64x sm90 on the Qwen3-30B-A3B shape and 2.8x on Mixtral-8x7B's,
  // tests/bench/RESULTS.md) and the SM90 kernel's schedule (`--moe_sm90_schedule` cooperative |
  // cooperative2x1 | pingpong, default cooperative). Chosen once at load for every sparse layer (of the
  // reference model too); the load log and ModelInfo::format_notes say what runs. Other kernels may round an
  // expert's output differently (each is checked against the oracle).
  MoeGemm moe_gemm = MoeGemm::kSm90Dequant;
  MoeSm90Schedule moe_sm90_schedule = MoeSm90Schedule::kCooperative;
};

// One sequence to score. Positions j in [max(1, score_from), n) are scored.
struct ScoreRequest {
  std::vector<int32_t> tokens;  // [n], every id in [0, vocab_size)
  int32_t score_from = 1;       // positions before it are context only; values < 1 act as 1
  int32_t top_k = 0;            // 0..kMaxTopK (1024): also return the top_k (id, logprob) pairs per position
  bool want_rank = false;       // rank[j] = 1 + #ids with a strictly larger logit
  bool want_entropy = false;    // entropy of the predicted distribution, nats
  // Compare with the reference model R (EngineOptions::reference_model_dir; this model is Q): fills
  // ScoreResult's ref_* / kld / same_top fields. INVALID_ARGUMENT without a reference model.
  bool want_reference = false;
  // Also return log P(id | tokens[<j]) of chosen ids at every scored position, the gather a stored
  // reference's KL divergence needs (client/ppl/reference_file.h): scored position i (position
  // max(1, score_from) + i) names candidate_ids[i * num_candidates, (i + 1) * num_candidates). num_candidates
  // in [0, kMaxCandidates]; candidate_ids empty or exactly num_scored * num_candidates ids (at most
  // kMaxCandidateIds), each in [0, vocab_size); an id may repeat.
  int32_t num_candidates = 0;
  std::vector<int32_t> candidate_ids;  // [num_scored, num_candidates]
  // Also return min_i log P(i | tokens[<j]) over the whole vocabulary (what bounds the unseen tail of a
  // stored reference's KL divergence from above).
  bool want_min_logprob = false;
};

struct TopKEntry {
  int32_t id;
  float logprob;
};

// Per scored position, in order; all arrays have num_scored entries (rank/entropy/top_k only if asked).
struct ScoreResult {
  std::vector<float> logprob;                 // log P(tokens[j] | tokens[<j]), natural log
  std::vector<uint8_t> greedy;                // 1 if argmax (ties -> lowest id) == tokens[j]
  std::vector<int32_t> rank;                  // if want_rank
  std::vector<float> entropy;                 // if want_entropy
  std::vector<std::vector<TopKEntry>> top_k;  // if top_k > 0: descending logprob, ties by lower id
  double sum_logprob = 0.0;                   // sum of logprob computed in double before rounding
  int32_t num_scored = 0;
  // If want_reference (R = the reference model, Q = this model), per scored position, from the fp32 logits of
  // both models with double reductions:
  std::vector<float> ref_logprob;  // log P_R(tokens[j] | tokens[<j])
  std::vector<float> kld;          // KL(P_R || P_Q) over the full vocabulary, nats; >= 0, exactly 0 if Q is R
  std::vector<uint8_t> ref_greedy;  // 1 if R's argmax (ties -> lowest id) == tokens[j]
  std::vector<uint8_t> same_top;    // 1 if Q's and R's argmaxes (ties -> lowest id) are the same id
  double sum_ref_logprob = 0.0;     // sums in double before rounding
  double sum_kld = 0.0;
  // If num_candidates > 0: fp32(logit[id] - lse) of each named id, the top-k's rounding (a candidate that is
  // also in top_k has bitwise its top_k logprob), [num_scored, num_candidates] in the request's order.
  std::vector<float> candidate_logprob;
  std::vector<float> min_logprob;  // if want_min_logprob: fp32(min logit - lse) per scored position
};

// Static facts about the loaded model (GetModelInfo, metrics, logs).
struct ModelInfo {
  std::string architecture;   // e.g. "LlamaForCausalLM"
  std::string format;         // "dense-bf16", "pack-quantized-w4a16-g128", "nvfp4a16", "fp8-w8a8", ...
  std::string format_notes;   // e.g. "W4A4 checkpoint run weight-only (NVFP4A16)"; empty if none
  std::string backend;        // "cpu" or "cuda"
  std::string compute_dtype;  // "fp32" or "bf16"
  int tp = 1;
  int64_t vocab_size = 0;  // embedding rows from config.json
  int64_t max_seq_len = 0;
  int64_t max_batch_tokens = 0;
  int64_t num_parameters = 0;            // logical parameter count (unpacked), embeddings included
  double bits_per_weight_decoder = 0.0;  // stored bits (values + scales + zeros) / decoder linear weights
  double bits_per_weight_head = 0.0;     // same for lm_head (tied: the embedding's)
  int64_t resident_bytes = 0;            // bytes the weights occupy on the device (host for CPU)
  std::string model_fingerprint;         // see engine/model/fingerprint.h
  // The reference model (EngineOptions::reference_model_dir) described the same way (its own reference is
  // null); null when none is loaded.
  std::shared_ptr<const ModelInfo> reference;
};

class Engine {
 public:
  virtual ~Engine() = default;

  // Scores a batch of independent sequences: one entry per request of `batch`, in order, always
  // batch.size() of them. A result is identical (bitwise on a given backend) whatever the other sequences
  // in the batch, and a request that breaks the contract fails alone: its entry holds the
  // ValidateScoreRequest error (engine/score_contract.h: INVALID_ARGUMENT / OUT_OF_RANGE; the server
  // validates first, so this is a second line of defence) while the others are scored. A failure of the
  // batch as a whole (UNAVAILABLE after a sticky device or communicator failure, see fatal_status(); an
  // INTERNAL error of a forward) gives that status to every sequence it affected.
  virtual std::vector<absl::StatusOr<ScoreResult>> Score(absl::Span<const ScoreRequest> batch) = 0;

  virtual const ModelInfo& info() const = 0;

  // OK while the engine can serve; after an unrecoverable device/communicator error it returns that
  // error forever (the server then reports NOT_SERVING and exits non-zero).
  virtual absl::Status fatal_status() const { return absl::OkStatus(); }

  // Device memory in use / total, bytes, per device; empty on the CPU backend.
  virtual std::vector<std::pair<int64_t, int64_t>> DeviceMemory() const { return {}; }
};

// Whether this build has the CUDA backend compiled in and a usable GPU is visible.
bool CudaBackendAvailable();

// The backend kAuto stands for on this machine (kCuda when CudaBackendAvailable(), else kCpu); kCpu and kCuda
// unchanged. The one place "auto" is decided (CreateEngine, the server and its flags use it).
Backend ResolveBackend(Backend requested);

// Loads the model and builds the engine for the chosen backend. Errors name what is wrong
// (missing/unsupported config field, malformed safetensors file and tensor, unsupported quantization).
absl::StatusOr<std::unique_ptr<Engine>> CreateEngine(const EngineOptions& options);

// A follower process of multi-process tensor parallelism (options.node_rank >= 1, nnodes > 1, the CUDA
// backend): joins the leader at options.rendezvous (through options.control_transport, plain TCP when it is
// null), loads this process's ranks, then runs every batch
// the leader broadcasts. Blocks. OK after the leader's clean shutdown; UNAVAILABLE when the leader is
// lost or a communicator fails; FAILED_PRECONDITION when the leader's model fingerprint differs from
// this process's model; load errors as CreateEngine's.
absl::Status RunFollower(const EngineOptions& options);

}  // namespace scored

#endif  // SCORED_ENGINE_ENGINE_H_
