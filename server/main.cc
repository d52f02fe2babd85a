// scored: the scoring daemon. `scored --model DIR [--tp N] [--listen host:port] ...`; see --help.
// Multi-process tensor parallelism: the same command on every node plus `--nnodes M --node_rank R
// --rendezvous HOST:PORT`; node rank 0 serves, the others follow (server/multinode.h).
//
// Exit codes: 0 after SIGTERM/SIGINT once in-flight work is finished, or at once when the signal comes
// during startup (a follower: after the leader's clean shutdown); 1 when startup fails (bad flag, model load,
// port taken), the engine fails fatally while serving (a lost follower or leader included), or the drain's
// --shutdown_grace_s runs out with in-flight requests unanswered (the log says how many).
#include <signal.h>
#include <time.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "cli/command_line.h"
#include "cli/flags_help.h"
#include "engine/base/logging.h"
#include "server/fault_injection.h"
#include "server/multinode.h"
#include "server/options.h"
#include "server/sd_notify.h"
#include "server/server.h"

ABSL_FLAG(
    std::string, model, "",
    "Model folder (config.json, *.safetensors, tokenizer files), or a hub id org/name[@revision] found in "
    "the local Hugging Face cache (HF_HUB_CACHE / HF_HOME; never downloaded). Required.");
ABSL_FLAG(
    std::string, reference_model, "",
    "Reference model folder R (any supported format, typically the dense original of --model): Score's "
    "want_reference then compares --model against it (KL divergence, R's logprob, top-1 agreement). Same "
    "vocabulary size and tokenizer content required. Both backends (cuda: on the same GPUs and --tp); both "
    "models held at once");
ABSL_FLAG(std::string, tokenizer, "",
          "Tokenizer folder (default: --model); 'none' serves token ids only (no Tokenize, no text input)");
ABSL_FLAG(std::string, backend, "",
          "cuda | cpu (default: cuda when this build has it and a GPU is visible, else cpu)");
ABSL_FLAG(int32_t, tp, 1,
          "Tensor-parallel ranks in total (cuda backend), over all --nnodes processes (1..256)");
ABSL_FLAG(int32_t, nnodes, 1,
          "Processes (hosts) sharing the --tp ranks; each runs --tp / --nnodes ranks on its local GPUs "
          "0, 1, ... (1..256, a divisor of --tp)");
ABSL_FLAG(int32_t, node_rank, 0,
          "This process among --nnodes: 0 serves gRPC (the leader), > 0 only runs its GPU ranks "
          "(a follower)");
ABSL_FLAG(std::string, rendezvous, "",
          "HOST:PORT of node rank 0's control channel, the same on every node (required when --nnodes > 1); "
          "node rank 0 listens on every local address at PORT, with the Score service's --tls_* and "
          "--auth_token_file (give every node the same ones)");
ABSL_FLAG(
    int32_t, rendezvous_timeout_s, 300,
    "--nnodes > 1: how long node rank 0 waits for every follower to join, and a follower for node rank 0 "
    "to answer (1..86400)");
ABSL_FLAG(std::string, kv_cache_quant, "auto",
          "A checkpoint's kv_cache_scheme (FP8 K and V with per-layer k_scale / v_scale): auto applies it as "
          "compressed-tensors' transformers integration does, off ignores it; the model's format says which "
          "(+kv-fp8 / +kv-fp8-ignored), in the startup log, GetModelInfo and every report");
ABSL_FLAG(std::string, dtype, "bf16",
          "Compute dtype of the cuda backend: bf16 | fp32 (cpu always computes fp32)");
ABSL_FLAG(int32_t, tp_row_chunks, 0,
          "tp > 1 (cuda): row-chunk pipelining of the tensor-parallel sums, each layer in chunks of whole "
          "sequences whose sum over ranks overlaps the next chunk's compute: 0 = auto (2 chunks from 8192 "
          "tokens), 1 = off, 2..8 = at most that many chunks. Results are bitwise the same");
ABSL_FLAG(bool, row_parallel_halves, true,
          "tp 1 (cuda): o_proj / down_proj sum their input columns in two halves, bitwise what --tp 2 "
          "computes; false runs one GEMM each (0.6-1.1% faster, no longer bitwise equal to --tp 2)");
ABSL_FLAG(std::string, tp_exchange, "copy",
          "tp 2 in one process (cuda): copy sums the row-parallel partial products by peer copies (NCCL "
          "where the GPUs cannot reach each other), nccl by NCCL all-reduces. Results are bitwise the same");
ABSL_FLAG(std::string, moe_gemm, "sm90_dequant",
          "Mixture-of-experts models (cuda, bf16): the grouped expert GEMMs' kernels: mma (mma.sync, any "
          "device), sm90 (dense bf16 experts on the SM90 grouped GEMM, 4-bit ones on mma.sync) or "
          "sm90_dequant (as sm90, 4-bit experts dequantized per GEMM, then SM90); without sm_90a every "
          "choice runs mma");
ABSL_FLAG(std::string, moe_sm90_schedule, "cooperative",
          "Mixture-of-experts models (cuda, bf16): the SM90 grouped GEMM's schedule: cooperative, "
          "cooperative2x1 or pingpong");
ABSL_FLAG(std::string, listen, "127.0.0.1:50051", "gRPC address host:port (port 0 picks a free port)");
ABSL_FLAG(std::string, metrics_listen, "127.0.0.1:9464",
          "Prometheus /metrics address host:port (port 0 picks a free port; empty disables); plain HTTP "
          "without authentication: a non-loopback address logs a warning");
ABSL_FLAG(
    std::string, openai_listen, "",
    "OpenAI-compatible HTTP address host:port (/v1/completions, /v1/models, /health, /tokenize, "
    "/detokenize, /tokenizer_info; port 0 picks a free port; empty, the default, disables it); the same "
    "TLS, token and limits as gRPC");
ABSL_FLAG(int32_t, openai_threads, 16,
          "--openai_listen: requests handled at once (a handler waits for the engine); open connections "
          "beyond it hold no thread (1..1024)");
ABSL_FLAG(int32_t, openai_max_connections, 512,
          "--openai_listen: open HTTP connections in all; past it the one waiting longest for a request is "
          "closed, or the new one gets 503 (1..65536)");
ABSL_FLAG(int32_t, openai_max_connections_per_client, 64,
          "--openai_listen: open HTTP connections from one address; past it 429 (1..65536)");
ABSL_FLAG(double, openai_header_timeout_s, 10.0,
          "--openai_listen: a request's head (request line and headers) must arrive within this of the "
          "connection or the previous response, else the connection closes (0.1..3600)");
ABSL_FLAG(double, openai_body_timeout_s, 60.0,
          "--openai_listen: a request's body must arrive within this of its head, else the connection "
          "closes (0.1..3600)");
ABSL_FLAG(
    std::string, openai_model_name, "",
    "--openai_listen: the model's name in /v1/models and requests (default: the --model folder's name)");
ABSL_FLAG(bool, openai_tokenizer_auth, false,
          "--openai_listen with --auth_token_file: the token also on /tokenize, /detokenize and "
          "/tokenizer_info (off: they are open, as vLLM's are, so lm-eval works with OPENAI_API_KEY alone)");
ABSL_FLAG(int64_t, max_batch_tokens, 16384,
          "Most tokens per engine batch; also the longest request (2..16777216)");
ABSL_FLAG(int64_t, max_queue, 256,
          "Most requests waiting for the engine; more get RESOURCE_EXHAUSTED (1..65536)");
ABSL_FLAG(
    int64_t, max_seq_len, 0,
    "Longest sequence accepted; 0 = the model's max_position_embeddings (else 2..--max_batch_tokens; above "
    "max_position_embeddings only with --allow_long_context)");
ABSL_FLAG(
    bool, allow_long_context, false,
    "Serve a --max_seq_len above the model's max_position_embeddings: positions past the trained context "
    "are RoPE extrapolation, and their log-probs are not meaningful");
ABSL_FLAG(std::string, port_file, "",
          "After binding, write {\"grpc\": P, \"metrics\": Q|null, \"openai\": R|null} here (temporary "
          "file, then rename)");
ABSL_FLAG(int64_t, batch_timeout_us, 2000,
          "How long the batcher waits to fill a batch, microseconds (0..10000000)");
ABSL_FLAG(int32_t, stream_window, 32,
          "Most requests of one ScoreStream in flight before it stops reading (1..1024)");
ABSL_FLAG(double, shutdown_grace_s, 30.0,
          "On SIGTERM, how long in-flight calls may take before being cancelled, seconds (0..3600)");
ABSL_FLAG(int32_t, num_threads, 0, "CPU backend worker threads (0 = all usable cores; 0..1024)");
ABSL_FLAG(std::string, tls_cert, "", "PEM certificate chain: serve gRPC over TLS (needs --tls_key)");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert");
ABSL_FLAG(std::string, tls_client_ca, "",
          "PEM CA bundle: require client certificates signed by it (mTLS; needs --tls_cert)");
ABSL_FLAG(std::string, auth_token_file, "",
          "File holding one bearer token that every scored.v1.Scorer call must send as "
          "'authorization: Bearer <token>' (health and reflection stay open)");
ABSL_FLAG(bool, allow_insecure_remote, false,
          "Allow a non-loopback --listen without TLS or a token (logs a warning)");
ABSL_FLAG(int64_t, max_message_bytes, 64 << 20,
          "Largest gRPC request message accepted, bytes; larger ones get RESOURCE_EXHAUSTED "
          "(1024..2147483647)");
ABSL_FLAG(
    int64_t, max_buffered_bytes, 0,
    "One memory budget for the whole server, bytes: queued requests and responses not yet sent to their "
    "clients are charged to it; beyond it new Score / Tokenize calls get RESOURCE_EXHAUSTED and "
    "ScoreStreams stop reading (back-pressure). 0 = a quarter of the physical memory (or the cgroup's "
    "limit), clamped to [256 MiB, 16 GiB]; else 1048576..1099511627776");
ABSL_FLAG(int32_t, max_streams_per_connection, 100,
          "Most concurrent calls (HTTP/2 streams) on one client connection; more wait in the client "
          "(1..65536)");
ABSL_FLAG(int64_t, max_connections, 1024,
          "Most client connections with Scorer calls in progress; a call on another connection gets "
          "RESOURCE_EXHAUSTED. Idle connections are not capped (gRPC 1.51 offers no cap on accepted "
          "connections) (1..65536)");
ABSL_FLAG(int64_t, max_text_bytes, 4 << 20,
          "Longest `text` of a Tokenize or Score request, bytes; longer ones get OUT_OF_RANGE before any "
          "tokenization (1..536870912)");
ABSL_FLAG(int32_t, tokenize_threads, 2,
          "Threads that tokenize request text, apart from those serving token-id requests (1..64)");
ABSL_FLAG(int32_t, tokenize_queue, 64,
          "Most texts waiting for a tokenize thread; more get RESOURCE_EXHAUSTED (1..65536)");
ABSL_FLAG(std::string, fault_inject, "",
          "Testing only: fatal_after:N makes the engine fail fatally after N Score batches; "
          "fatal_after_ms:T, T ms after it loaded (no traffic needed); device_trap_after:N makes the CUDA "
          "engine trap on the GPU before batch N+1 (a real sticky device failure); slow_load_ms:T waits T ms "
          "before the load. N, T in 0..1000000000");

namespace {

constexpr char kUsage[] =
    "scored --model DIR [--backend cuda|cpu] [--tp N] [--listen host:port] ...\n"
    "scored --model DIR --tp N --nnodes M --node_rank R --rendezvous HOST:PORT ...  (one per node)\n"
    "Serves exact per-token log-probabilities of a causal LM over gRPC (scored.v1.Scorer).";

// --help's sections (cli/flags_help.h); a flag left out still shows, under "Other flags".
const std::vector<scored::cli::FlagGroup>& HelpGroups() {
  static const auto* const groups = new std::vector<scored::cli::FlagGroup>{
      {"Model",
       {"model", "tokenizer", "reference_model", "backend", "dtype", "max_seq_len", "allow_long_context",
        "num_threads", "kv_cache_quant"}},
      {"Serving",
       {"listen", "metrics_listen", "openai_listen", "openai_threads", "openai_model_name",
        "openai_tokenizer_auth", "openai_max_connections", "openai_max_connections_per_client",
        "openai_header_timeout_s", "openai_body_timeout_s", "port_file", "batch_timeout_us", "stream_window",
        "shutdown_grace_s", "tokenize_threads"}},
      {"Limits",
       {"max_batch_tokens", "max_queue", "max_message_bytes", "max_buffered_bytes",
        "max_streams_per_connection", "max_connections", "max_text_bytes", "tokenize_queue"}},
      {"TLS and authentication",
       {"tls_cert", "tls_key", "tls_client_ca", "auth_token_file", "allow_insecure_remote"}},
      {"Tensor parallelism (cuda)", {"tp", "tp_row_chunks", "row_parallel_halves", "tp_exchange"}},
      {"Mixture of experts (cuda)", {"moe_gemm", "moe_sm90_schedule"}},
      {"Distributed (several processes)", {"nnodes", "node_rank", "rendezvous", "rendezvous_timeout_s"}},
      {"Testing", {"fault_inject"}},
  };
  return *groups;
}

// Tells systemd (Type=notify, deploy/systemd/scored.service) where the process stands; a failure to tell
// is logged, never fatal (the service manager then times out and says so).
void NotifySystemd(absl::string_view state) {
  const absl::Status told = scored::NotifyServiceManager(state);
  if (!told.ok()) {
    SCORED_LOG(WARNING) << "cannot notify the service manager: " << told.ToString();
  }
}

std::atomic<bool> g_stop_signal_thread{false};
// The started server once it serves; null while it starts (model load, the wait for follower processes).
std::atomic<scored::Server*> g_serving{nullptr};

// Waits for SIGTERM/SIGINT (blocked in every thread, so only this one sees them). A started server is
// asked to stop (it drains in-flight calls); during startup there is nothing to drain, so the process
// ends at once with exit code 0 instead of finishing a load nobody wants (minutes for a large checkpoint
// on a cold disk, or up to the follower join timeout). Polls so that it can also end when the server stops
// for another reason.
void SignalLoop(sigset_t signals) {
  const timespec poll = {0, 100 * 1000 * 1000};
  while (!g_stop_signal_thread.load()) {
    const int sig = sigtimedwait(&signals, nullptr, &poll);
    if (sig > 0) {
      const char* name = sig == SIGTERM ? "SIGTERM" : "SIGINT";
      scored::Server* server = g_serving.load();
      if (server == nullptr) {
        SCORED_LOG(INFO) << "received " << name << " while starting, exiting";
        std::fflush(nullptr);
        std::_Exit(0);
      }
      SCORED_LOG(INFO) << "received " << name << ", shutting down";
      server->RequestStop();
      return;
    }
  }
}

absl::StatusOr<scored::ServerOptions> OptionsFromFlags() {
  scored::ServerOptions o;
  o.engine.model_dir = absl::GetFlag(FLAGS_model);
  o.engine.reference_model_dir = absl::GetFlag(FLAGS_reference_model);
  o.tokenizer_dir = absl::GetFlag(FLAGS_tokenizer);
  auto backend = scored::ParseBackend(absl::GetFlag(FLAGS_backend));
  if (!backend.ok()) return backend.status();
  o.engine.backend = *backend;
  auto dtype = scored::ParseComputeDtype(absl::GetFlag(FLAGS_dtype));
  if (!dtype.ok()) return dtype.status();
  o.engine.dtype = *dtype;
  const std::string kv = absl::GetFlag(FLAGS_kv_cache_quant);
  if (kv != "auto" && kv != "off") {
    return absl::InvalidArgumentError(absl::StrCat("--kv_cache_quant must be auto or off, got '", kv, "'"));
  }
  o.engine.kv_cache_quant = kv == "auto";
  o.engine.tp = absl::GetFlag(FLAGS_tp);
  o.engine.nnodes = absl::GetFlag(FLAGS_nnodes);
  o.engine.node_rank = absl::GetFlag(FLAGS_node_rank);
  o.engine.rendezvous = absl::GetFlag(FLAGS_rendezvous);
  o.rendezvous_timeout = absl::Seconds(absl::GetFlag(FLAGS_rendezvous_timeout_s));
  o.engine.max_batch_tokens = absl::GetFlag(FLAGS_max_batch_tokens);
  o.engine.max_seq_len = absl::GetFlag(FLAGS_max_seq_len);
  o.engine.allow_long_context = absl::GetFlag(FLAGS_allow_long_context);
  o.engine.tp_row_chunks = absl::GetFlag(FLAGS_tp_row_chunks);
  o.engine.row_parallel_halves = absl::GetFlag(FLAGS_row_parallel_halves);
  auto exchange = scored::ParseTpExchange(absl::GetFlag(FLAGS_tp_exchange));
  if (!exchange.ok()) return exchange.status();
  o.engine.tp_exchange = *exchange;
  auto moe_gemm = scored::ParseMoeGemm(absl::GetFlag(FLAGS_moe_gemm));
  if (!moe_gemm.ok()) return moe_gemm.status();
  o.engine.moe_gemm = *moe_gemm;
  auto moe_schedule = scored::ParseMoeSm90Schedule(absl::GetFlag(FLAGS_moe_sm90_schedule));
  if (!moe_schedule.ok()) return moe_schedule.status();
  o.engine.moe_sm90_schedule = *moe_schedule;
  o.engine.num_threads = absl::GetFlag(FLAGS_num_threads);
  o.listen = absl::GetFlag(FLAGS_listen);
  o.metrics_listen = absl::GetFlag(FLAGS_metrics_listen);
  o.openai_listen = absl::GetFlag(FLAGS_openai_listen);
  o.openai_threads = absl::GetFlag(FLAGS_openai_threads);
  o.openai_model_name = absl::GetFlag(FLAGS_openai_model_name);
  o.openai_tokenizer_auth = absl::GetFlag(FLAGS_openai_tokenizer_auth);
  o.openai_max_connections = absl::GetFlag(FLAGS_openai_max_connections);
  o.openai_max_connections_per_client = absl::GetFlag(FLAGS_openai_max_connections_per_client);
  o.openai_header_timeout = absl::Seconds(absl::GetFlag(FLAGS_openai_header_timeout_s));
  o.openai_body_timeout = absl::Seconds(absl::GetFlag(FLAGS_openai_body_timeout_s));
  o.max_queue = absl::GetFlag(FLAGS_max_queue);
  o.port_file = absl::GetFlag(FLAGS_port_file);
  o.batch_timeout = absl::Microseconds(absl::GetFlag(FLAGS_batch_timeout_us));
  o.stream_window = absl::GetFlag(FLAGS_stream_window);
  o.shutdown_grace = absl::Seconds(absl::GetFlag(FLAGS_shutdown_grace_s));
  o.tls_cert_file = absl::GetFlag(FLAGS_tls_cert);
  o.tls_key_file = absl::GetFlag(FLAGS_tls_key);
  o.tls_client_ca_file = absl::GetFlag(FLAGS_tls_client_ca);
  o.auth_token_file = absl::GetFlag(FLAGS_auth_token_file);
  o.allow_insecure_remote = absl::GetFlag(FLAGS_allow_insecure_remote);
  o.max_message_bytes = absl::GetFlag(FLAGS_max_message_bytes);
  o.max_buffered_bytes = absl::GetFlag(FLAGS_max_buffered_bytes);
  o.max_streams_per_connection = absl::GetFlag(FLAGS_max_streams_per_connection);
  o.max_connections = absl::GetFlag(FLAGS_max_connections);
  o.max_text_bytes = absl::GetFlag(FLAGS_max_text_bytes);
  o.tokenize_threads = absl::GetFlag(FLAGS_tokenize_threads);
  o.tokenize_queue = absl::GetFlag(FLAGS_tokenize_queue);
  auto fault = scored::ParseFaultInjection(absl::GetFlag(FLAGS_fault_inject));
  if (!fault.ok()) return fault.status();
  o.fault = *fault;
  o.engine.fault_device_trap_after_batches = fault->device_trap_after_batches;
  o.engine.backend = scored::ResolveBackend(o.engine.backend);
  absl::Status valid = scored::ValidateServerOptions(o);
  if (!valid.ok()) return valid;
  absl::Status attached = scored::AttachControlTransport(&o);
  if (!attached.ok()) return attached;
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  // Block the stop signals before any thread exists so that every thread inherits the mask and only
  // SignalLoop receives them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  // A client that closes its connection while a response is being written must cost that write, not the
  // process: gRPC, Asio (the OpenAI endpoint) and the metrics endpoint pass MSG_NOSIGNAL themselves, but
  // nothing here promises the same of every library a write may go through (OpenSSL's own BIOs write with
  // write()).
  signal(SIGPIPE, SIG_IGN);

  scored::cli::SetUsageConfig("scored");
  absl::SetProgramUsageMessage(kUsage);
  if (scored::cli::WantsHelp(argc, argv)) {
    std::fputs(scored::cli::GroupedHelp(kUsage, HelpGroups(), __FILE__).c_str(), stdout);
    return 0;
  }
  // A command line that does not parse: exit 2, as scored-ppl and scored-load (cli/command_line.h), with
  // hints for vLLM's and llama.cpp's spellings.
  const scored::cli::CommandLineRules rules{"scored takes only flags: the model is --model DIR",
                                            {{"model-path", "model"},
                                             {"m", "model"},
                                             {"tensor-parallel-size", "tp"},
                                             {"tp-size", "tp"},
                                             {"max-model-len", "max_seq_len"},
                                             {"ctx-size", "max_seq_len"},
                                             {"c", "max_seq_len"},
                                             {"port", "listen"},
                                             {"host", "listen"},
                                             {"api-key", "auth_token_file"},
                                             {"served-model-name", "openai_model_name"},
                                             {"ssl-certfile", "tls_cert"},
                                             {"ssl-keyfile", "tls_key"}}};
  if (const absl::Status command_line = scored::cli::CheckCommandLine(argc, argv, rules);
      !command_line.ok()) {
    std::fprintf(stderr, "scored: %s (see --help)\n", std::string(command_line.message()).c_str());
    return 2;
  }
  absl::ParseCommandLine(argc, argv);
  absl::StatusOr<scored::ServerOptions> options = OptionsFromFlags();
  if (!options.ok()) {
    std::fprintf(stderr, "scored: %s\n", std::string(options.status().message()).c_str());
    return 1;
  }
  if (options->engine.node_rank > 0) {
    // A follower has no server to drain: SIGTERM/SIGINT end it at once (the leader then reports it lost).
    pthread_sigmask(SIG_UNBLOCK, &signals, nullptr);
    // A follower serves nothing of its own: it is "ready" once started, so that a Type=notify unit does
    // not time out while it waits for node rank 0.
    NotifySystemd("READY=1\nSTATUS=follower of node rank 0");
    const absl::Status followed = scored::RunFollowerNode(*options);
    if (!followed.ok()) {
      SCORED_LOG(ERROR) << "exiting: " << followed.ToString();
      return 1;
    }
    return 0;
  }
  std::thread signal_thread(SignalLoop, signals);
  auto stop_signal_thread = [&signal_thread] {
    g_stop_signal_thread.store(true);
    signal_thread.join();
  };
  absl::StatusOr<std::unique_ptr<scored::Server>> server = scored::Server::Create(*options);
  if (!server.ok()) {
    SCORED_LOG(ERROR) << "startup failed: " << server.status().ToString();
    stop_signal_thread();
    return 1;
  }
  absl::Status started = (*server)->Start();
  if (!started.ok()) {
    SCORED_LOG(ERROR) << "startup failed: " << started.ToString();
    stop_signal_thread();
    return 1;
  }
  g_serving.store(server->get());
  // Start() has bound the listeners and marked health SERVING.
  NotifySystemd("READY=1\nSTATUS=serving");
  const absl::Status why = (*server)->Wait();
  // Draining (after SIGTERM / SIGINT, or a fatal engine error): in-flight calls finish, new ones are refused.
  NotifySystemd("STOPPING=1\nSTATUS=draining");
  const absl::Status drained = (*server)->Shutdown();
  stop_signal_thread();
  if (!why.ok()) {
    SCORED_LOG(ERROR) << "exiting after a fatal engine error: " << why.ToString();
    return 1;
  }
  return drained.ok() ? 0 : 1;
}
