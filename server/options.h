// Everything `scored` is configured with (filled from command-line flags by main.cc), and its checks.
#ifndef SCORED_SERVER_OPTIONS_H_
#define SCORED_SERVER_OPTIONS_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "engine/engine.h"
#include "server/fault_injection.h"

namespace scored {

struct ServerOptions {
  // Upper bounds of the numeric flags (ValidateServerOptions refuses a value outside its range, naming the
  // flag and the range, before anything is loaded; a typo such as --num_threads=100000 once made the CPU
  // backend start 100000 threads and abort with std::system_error at 4 GB):
  //   tp, nnodes      1..256: tp divides num_attention_heads, at most 128 in the largest models this
  //                   field serves (Llama-3.1-405B); nnodes divides tp.
  //   num_threads     0..1024 (0 = the usable CPUs): a fixed bound, the same on every machine (the largest
  //                   two-socket hosts have 384-768 hardware threads; beyond them more workers only add
  //                   contention, and each reserves a stack).
  //   max_batch_tokens, max_seq_len  2..16777216: the most tokens config.json may declare for the context
  //                   (engine/model/config.cc kMaxShapeField); the CUDA backend also checks that the
  //                   activations of max_batch_tokens fit its memory.
  //   max_queue       1..65536: Batcher::Cancel scans the queue; 65536 waiting requests are minutes of work
  //                   at any throughput this server reaches, so more only turns into DEADLINE_EXCEEDED.
  //   stream_window   1..1024: one stream's responses in flight; 1024 responses of up to ~1 MiB each
  //                   (top_k 64 over 512 positions) are already 1 GiB for one client.
  //   shutdown_grace_s 0..3600: a drain of more than an hour outlives every orchestrator's stop timeout.
  //   batch_timeout_us 0..10000000, rendezvous_timeout_s 1..86400, tp_row_chunks 0..8,
  //   max_message_bytes 1024..2147483647 (gRPC takes an int), ports 0..65535.
  static constexpr int kMaxTp = 256;
  static constexpr int kMaxNumThreads = 1024;
  static constexpr int64_t kMaxBatchTokens = int64_t{1} << 24;
  static constexpr int64_t kMaxQueue = 65536;
  static constexpr int kMaxStreamWindow = 1024;
  static constexpr int kMaxShutdownGraceSeconds = 3600;

  // Model folder, reference model folder (--reference_model; empty = none), backend, dtype, tp,
  // max_batch_tokens, max_seq_len (0 = the model's context), the CUDA execution settings tp_row_chunks,
  // row_parallel_halves, tp_exchange, moe_gemm, moe_sm90_schedule (engine/engine.h); and the multi-process
  // tensor parallelism of server/multinode.h: nnodes, node_rank (0 serves gRPC, > 0 follows), rendezvous
  // (HOST:PORT of node rank 0's control channel, required when nnodes > 1).
  EngineOptions engine;
  // Multi-process only: how long node rank 0 waits for every follower to join, and a follower for node rank 0
  // to answer (it may start later; a follower refused by TLS keeps retrying until then).
  absl::Duration rendezvous_timeout = absl::Seconds(300);
  // Tokenizer folder; empty = the model folder; "none" = no tokenizer (Tokenize and `text` input then
  // fail with FAILED_PRECONDITION).
  std::string tokenizer_dir;
  // gRPC address "host:port"; port 0 picks a free port (logged and written to port_file).
  std::string listen = "127.0.0.1:50051";
  // Prometheus endpoint "host:port" (GET /metrics); empty disables it; port 0 picks a free port.
  std::string metrics_listen = "127.0.0.1:9464";
  // The OpenAI-compatible HTTP endpoint "host:port" (server/openai_http.h); empty (the default) disables it;
  // port 0 picks a free port (logged and written to port_file). A host that is not loopback needs TLS or a
  // token, as --listen. openai_threads (1..1024): connections served at once. openai_model_name: the model's
  // name in /v1/models and requests; empty = the model folder's last component.
  static constexpr int kMaxOpenAiThreads = 1024;
  std::string openai_listen;
  int openai_threads = 16;
  std::string openai_model_name;
  // The token of auth_token_file also on /tokenize, /detokenize and /tokenizer_info. Off (the default) they
  // are served without it, as vLLM serves them beside its --api-key: lm-eval's remote tokenizer sends no
  // OPENAI_API_KEY, only its own auth_token model argument (server/openai_http.h).
  bool openai_tokenizer_auth = false;
  // The HTTP connection caps and the head / body deadlines (server/http_server.h).
  static constexpr int kMaxOpenAiConnections = 65536;
  int openai_max_connections = 512;
  int openai_max_connections_per_client = 64;
  absl::Duration openai_header_timeout = absl::Seconds(10);
  absl::Duration openai_body_timeout = absl::Seconds(60);
  // Most requests waiting for the engine; more are refused with RESOURCE_EXHAUSTED.
  int64_t max_queue = 256;
  // Longest time the batcher waits for more requests to fill a batch.
  absl::Duration batch_timeout = absl::Microseconds(2000);
  // Most requests of one ScoreStream in flight at once; the stream stops reading beyond it
  // (back-pressure through HTTP/2 flow control instead of RESOURCE_EXHAUSTED errors).
  int stream_window = 32;
  // If non-empty: after binding, write {"grpc": P, "metrics": Q|null, "openai": R|null} here atomically
  // (tmp + rename).
  std::string port_file;
  // How long Shutdown() lets in-flight calls finish before cancelling them.
  absl::Duration shutdown_grace = absl::Seconds(30);

  // Security (server/security.h, README "Security model"). TLS when tls_cert_file and tls_key_file
  // (PEM) are set; mTLS when tls_client_ca_file is set too. auth_token_file: one bearer token that
  // every scored.v1.Scorer call must present.
  std::string tls_cert_file;
  std::string tls_key_file;
  std::string tls_client_ca_file;
  std::string auth_token_file;
  // A --listen host that is not loopback needs TLS or a token unless this is set (then a warning).
  bool allow_insecure_remote = false;
  // Largest request message the gRPC server accepts, bytes; larger ones fail with RESOURCE_EXHAUSTED
  // before reaching the service. A request holds at most max_seq_len ids (<= 5 bytes each as packed
  // varints: 0.6 MiB for a 128k window), so 64 MiB only matters for `text` input.
  int64_t max_message_bytes = 64 << 20;
  // Server-wide limits (server/memory_budget.h; server/README.md "Memory budget and connection caps"):
  //   max_buffered_bytes  one memory budget for queued requests and responses not yet sent, bytes; beyond
  //                       it new unary work gets RESOURCE_EXHAUSTED and ScoreStreams stop reading.
  //                       0 = DefaultMaxBufferedBytes() (a quarter of the memory, clamped to [256 MiB, 16
  //                       GiB]); else [kMinMaxBufferedBytes, kMaxMaxBufferedBytes] = [1 MiB, 1 TiB].
  //   max_streams_per_connection  concurrent calls (HTTP/2 streams) per client connection
  //                       (GRPC_ARG_MAX_CONCURRENT_STREAMS; the client waits for a free one); 1..65536,
  //                       default 100, the least HTTP/2 recommends.
  //   max_connections     client connections with Scorer calls in progress; a call on another connection
  //                       beyond it gets RESOURCE_EXHAUSTED (idle connections are not capped: gRPC 1.51 has
  //                       no such setting); 1..65536.
  static constexpr int kMaxStreamsPerConnection = 65536;
  static constexpr int64_t kMaxConnections = 65536;
  int64_t max_buffered_bytes = 0;
  int max_streams_per_connection = 100;
  int64_t max_connections = 1024;
  // Text limits (Tokenize and `text` Score input; README "Text limits"). max_text_bytes: the longest
  // `text`, bytes (1..536870912, SentencePiece's own bound); a longer one is OUT_OF_RANGE before any
  // tokenization. Texts are tokenized on a pool of tokenize_threads threads (1..64), never on gRPC's
  // threads, so a long text cannot delay token-id requests; at most tokenize_queue texts (1..65536) wait
  // for a pool thread, more get RESOURCE_EXHAUSTED.
  static constexpr int64_t kMaxTextBytes = int64_t{1} << 29;
  static constexpr int kMaxTokenizeThreads = 64;
  static constexpr int kMaxTokenizeQueue = 65536;
  int64_t max_text_bytes = 4 << 20;
  int tokenize_threads = 2;
  int tokenize_queue = 64;
  // Testing only (--fault_inject): see server/fault_injection.h.
  FaultInjection fault;
};

// "cpu" | "cuda"; "" or "auto" -> kAuto.
absl::StatusOr<Backend> ParseBackend(const std::string& text);
// "bf16" | "fp32".
absl::StatusOr<ComputeDtype> ParseComputeDtype(const std::string& text);
// "copy" | "nccl" (--tp_exchange).
absl::StatusOr<TpExchange> ParseTpExchange(const std::string& text);
// "mma" | "sm90" | "sm90_dequant" (--moe_gemm).
absl::StatusOr<MoeGemm> ParseMoeGemm(const std::string& text);
// "cooperative" | "cooperative2x1" | "pingpong" (--moe_sm90_schedule).
absl::StatusOr<MoeSm90Schedule> ParseMoeSm90Schedule(const std::string& text);
const char* BackendName(Backend backend);

// Checks every field; INVALID_ARGUMENT names the flag, its range ("--num_threads must be in [0, 1024] ...,
// got 100000"; the bounds above) and the bad value. The multi-process flags:
// nnodes in [1, 256], node_rank in [0, nnodes), tp a multiple of nnodes,
// the cuda backend, and rendezvous HOST:PORT with a port > 0. A follower (node_rank > 0) listens on
// nothing, so the --listen security check does not apply to it.
absl::Status ValidateServerOptions(const ServerOptions& options);

// Whether options.listen (or options.openai_listen, when set) is remote (not loopback) with neither TLS nor a
// token: Create() refuses such a configuration unless allow_insecure_remote is set.
bool ListensInsecurelyOnRemote(const ServerOptions& options);

// Splits "host:port" ("[v6]:port" too); port in [0, 65535]. INVALID_ARGUMENT otherwise.
absl::Status ValidateHostPort(const std::string& flag_name, const std::string& address);

}  // namespace scored

#endif  // SCORED_SERVER_OPTIONS_H_
