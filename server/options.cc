#include "server/options.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "engine/base/status_macros.h"
#include "server/memory_budget.h"
#include "server/security.h"

namespace scored {
namespace {

// Below 1 KiB not even a short request fits; gRPC takes the limit as an int.
constexpr int64_t kMinMessageBytes = 1024;
constexpr int64_t kMaxMessageBytes = 2147483647;

// "--<flag> must be in [lo, hi]<note>, got <value>" unless lo <= value <= hi.
absl::Status CheckRange(absl::string_view flag, int64_t value, int64_t lo, int64_t hi,
                        absl::string_view note = "") {
  if (value >= lo && value <= hi) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("--", flag, " must be in [", lo, ", ", hi, "]", note, ", got ", value));
}

absl::Status ValidateMultiNode(const EngineOptions& e, absl::Duration rendezvous_timeout) {
  // Every process runs at least one rank.
  SCORED_RETURN_IF_ERROR(CheckRange("nnodes", e.nnodes, 1, ServerOptions::kMaxTp));
  // Checked on one node too, so that a typo never waits for the day a second node is added.
  if (rendezvous_timeout < absl::Seconds(1) || rendezvous_timeout > absl::Hours(24)) {
    return absl::InvalidArgumentError(absl::StrCat("--rendezvous_timeout_s must be in [1, 86400], got ",
                                                   absl::ToDoubleSeconds(rendezvous_timeout)));
  }
  if (e.node_rank < 0 || e.node_rank >= e.nnodes) {
    return absl::InvalidArgumentError(
        absl::StrCat("--node_rank must be in [0, --nnodes) = [0, ", e.nnodes, "), got ", e.node_rank));
  }
  if (e.nnodes == 1) {
    if (!e.rendezvous.empty()) {
      return absl::InvalidArgumentError(
          "--rendezvous is for multi-process tensor parallelism (--nnodes > 1)");
    }
    return absl::OkStatus();
  }
  if (e.backend == Backend::kCpu) {
    return absl::InvalidArgumentError(
        absl::StrCat("--nnodes ", e.nnodes, " needs --backend=cuda; the cpu backend runs one process"));
  }
  if (e.tp % e.nnodes != 0) {
    return absl::InvalidArgumentError(absl::StrCat("--tp ", e.tp, " is not a multiple of --nnodes ", e.nnodes,
                                                   ": every process runs --tp / --nnodes ranks"));
  }
  if (e.rendezvous.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--nnodes ", e.nnodes,
                     " needs --rendezvous=HOST:PORT (node rank 0's address, the "
                     "same on every node)"));
  }
  SCORED_RETURN_IF_ERROR(ValidateHostPort("rendezvous", e.rendezvous));
  int port = 0;
  if (!absl::SimpleAtoi(e.rendezvous.substr(e.rendezvous.rfind(':') + 1), &port) || port == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--rendezvous needs a port > 0 (every node connects to it), got '", e.rendezvous, "'"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Backend> ParseBackend(const std::string& text) {
  if (text.empty() || text == "auto") return Backend::kAuto;
  if (text == "cpu") return Backend::kCpu;
  if (text == "cuda") return Backend::kCuda;
  return absl::InvalidArgumentError(absl::StrCat("--backend must be cuda or cpu, got '", text, "'"));
}

absl::StatusOr<ComputeDtype> ParseComputeDtype(const std::string& text) {
  if (text == "bf16") return ComputeDtype::kBf16;
  if (text == "fp32") return ComputeDtype::kFp32;
  return absl::InvalidArgumentError(absl::StrCat("--dtype must be bf16 or fp32, got '", text, "'"));
}

absl::StatusOr<TpExchange> ParseTpExchange(const std::string& text) {
  if (text == "copy") return TpExchange::kCopy;
  if (text == "nccl") return TpExchange::kNccl;
  return absl::InvalidArgumentError(absl::StrCat("--tp_exchange must be copy or nccl, got '", text, "'"));
}

absl::StatusOr<MoeGemm> ParseMoeGemm(const std::string& text) {
  if (text == "mma") return MoeGemm::kMma;
  if (text == "sm90") return MoeGemm::kSm90;
  if (text == "sm90_dequant") return MoeGemm::kSm90Dequant;
  return absl::InvalidArgumentError(
      absl::StrCat("--moe_gemm must be mma, sm90 or sm90_dequant, got '", text, "'"));
}

absl::StatusOr<MoeSm90Schedule> ParseMoeSm90Schedule(const std::string& text) {
  if (text == "cooperative") return MoeSm90Schedule::kCooperative;
  if (text == "cooperative2x1") return MoeSm90Schedule::kCooperative2x1;
  if (text == "pingpong") return MoeSm90Schedule::kPingpong;
  return absl::InvalidArgumentError(
      absl::StrCat("--moe_sm90_schedule must be cooperative, cooperative2x1 or pingpong, got '", text, "'"));
}

const char* BackendName(Backend backend) {
  switch (backend) {
    case Backend::kCpu:
      return "cpu";
    case Backend::kCuda:
      return "cuda";
    default:
      return "auto";
  }
}

absl::Status ValidateHostPort(const std::string& flag_name, const std::string& address) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == address.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag_name, " must be host:port (e.g. 127.0.0.1:50051), got '", address, "'"));
  }
  const std::string host = address.substr(0, colon);
  if (host.front() == '[' && host.back() != ']') {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag_name, ": malformed IPv6 host in '", address, "'"));
  }
  int port = -1;
  if (!absl::SimpleAtoi(address.substr(colon + 1), &port) || port < 0 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--", flag_name, ": port must be an integer in [0, 65535], got '", address.substr(colon + 1), "'"));
  }
  return absl::OkStatus();
}

bool ListensInsecurelyOnRemote(const ServerOptions& options) {
  const bool remote = !IsLoopbackListen(options.listen) ||
                      (!options.openai_listen.empty() && !IsLoopbackListen(options.openai_listen));
  return remote && options.tls_cert_file.empty() && options.auth_token_file.empty();
}

absl::Status ValidateServerOptions(const ServerOptions& options) {
  if (options.engine.model_dir.empty()) {
    return absl::InvalidArgumentError("--model is required (a folder with config.json and *.safetensors)");
  }
  const EngineOptions& e = options.engine;
  SCORED_RETURN_IF_ERROR(CheckRange("tp", e.tp, 1, ServerOptions::kMaxTp));
  if (e.tp > 1 && e.backend == Backend::kCpu) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tp ", e.tp, " needs --backend=cuda; the cpu backend runs one process"));
  }
  SCORED_RETURN_IF_ERROR(ValidateMultiNode(e, options.rendezvous_timeout));
  SCORED_RETURN_IF_ERROR(
      CheckRange("tp_row_chunks", e.tp_row_chunks, 0, EngineOptions::kMaxTpRowChunks, " (0 = auto)"));
  SCORED_RETURN_IF_ERROR(
      CheckRange("num_threads", e.num_threads, 0, ServerOptions::kMaxNumThreads, " (0 = the usable CPUs)"));
  SCORED_RETURN_IF_ERROR(
      CheckRange("max_batch_tokens", e.max_batch_tokens, 2, ServerOptions::kMaxBatchTokens));
  if (e.max_seq_len != 0) {
    SCORED_RETURN_IF_ERROR(CheckRange("max_seq_len", e.max_seq_len, 2, ServerOptions::kMaxBatchTokens,
                                      " or 0 (the model's context)"));
  }
  if (e.max_seq_len > e.max_batch_tokens) {
    return absl::InvalidArgumentError(absl::StrCat("--max_seq_len ", e.max_seq_len,
                                                   " exceeds --max_batch_tokens ", e.max_batch_tokens,
                                                   ": a sequence must fit in one batch"));
  }
  SCORED_RETURN_IF_ERROR(CheckRange("max_queue", options.max_queue, 1, ServerOptions::kMaxQueue));
  if (options.batch_timeout < absl::ZeroDuration() || options.batch_timeout > absl::Seconds(10)) {
    return absl::InvalidArgumentError(absl::StrCat("--batch_timeout_us must be in [0, 10000000], got ",
                                                   absl::ToInt64Microseconds(options.batch_timeout)));
  }
  SCORED_RETURN_IF_ERROR(
      CheckRange("stream_window", options.stream_window, 1, ServerOptions::kMaxStreamWindow));
  // absl::Seconds() of a NaN flag value is an infinite duration, so this refuses NaN and infinities too.
  if (options.shutdown_grace < absl::ZeroDuration() ||
      options.shutdown_grace > absl::Seconds(ServerOptions::kMaxShutdownGraceSeconds)) {
    return absl::InvalidArgumentError(absl::StrCat("--shutdown_grace_s must be in [0, ",
                                                   ServerOptions::kMaxShutdownGraceSeconds, "] seconds, got ",
                                                   absl::FormatDuration(options.shutdown_grace)));
  }
  SCORED_RETURN_IF_ERROR(ValidateHostPort("listen", options.listen));
  if (!options.metrics_listen.empty()) {
    SCORED_RETURN_IF_ERROR(ValidateHostPort("metrics_listen", options.metrics_listen));
  }
  if (!options.openai_listen.empty()) {
    SCORED_RETURN_IF_ERROR(ValidateHostPort("openai_listen", options.openai_listen));
  }
  SCORED_RETURN_IF_ERROR(
      CheckRange("openai_threads", options.openai_threads, 1, ServerOptions::kMaxOpenAiThreads));
  SCORED_RETURN_IF_ERROR(CheckRange("openai_max_connections", options.openai_max_connections, 1,
                                    ServerOptions::kMaxOpenAiConnections));
  SCORED_RETURN_IF_ERROR(CheckRange("openai_max_connections_per_client",
                                    options.openai_max_connections_per_client, 1,
                                    ServerOptions::kMaxOpenAiConnections));
  for (const auto& [flag, value] :
       {std::pair<const char*, absl::Duration>{"openai_header_timeout_s", options.openai_header_timeout},
        {"openai_body_timeout_s", options.openai_body_timeout}}) {
    if (value < absl::Milliseconds(100) || value > absl::Hours(1)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", flag, " must be in [0.1, 3600], got ", absl::ToDoubleSeconds(value)));
    }
  }
  if (options.max_message_bytes < kMinMessageBytes || options.max_message_bytes > kMaxMessageBytes) {
    return absl::InvalidArgumentError(absl::StrCat("--max_message_bytes must be in [", kMinMessageBytes, ", ",
                                                   kMaxMessageBytes, "], got ", options.max_message_bytes));
  }
  if (options.max_buffered_bytes != 0) {
    SCORED_RETURN_IF_ERROR(CheckRange("max_buffered_bytes", options.max_buffered_bytes, kMinMaxBufferedBytes,
                                      kMaxMaxBufferedBytes, " or 0 (a quarter of the memory)"));
  }
  SCORED_RETURN_IF_ERROR(CheckRange("max_streams_per_connection", options.max_streams_per_connection, 1,
                                    ServerOptions::kMaxStreamsPerConnection));
  SCORED_RETURN_IF_ERROR(
      CheckRange("max_connections", options.max_connections, 1, ServerOptions::kMaxConnections));
  SCORED_RETURN_IF_ERROR(
      CheckRange("max_text_bytes", options.max_text_bytes, 1, ServerOptions::kMaxTextBytes));
  SCORED_RETURN_IF_ERROR(
      CheckRange("tokenize_threads", options.tokenize_threads, 1, ServerOptions::kMaxTokenizeThreads));
  SCORED_RETURN_IF_ERROR(
      CheckRange("tokenize_queue", options.tokenize_queue, 1, ServerOptions::kMaxTokenizeQueue));
  if (options.tls_cert_file.empty() != options.tls_key_file.empty()) {
    return absl::InvalidArgumentError("--tls_cert and --tls_key must be given together");
  }
  if (!options.tls_client_ca_file.empty() && options.tls_cert_file.empty()) {
    return absl::InvalidArgumentError("--tls_client_ca needs --tls_cert and --tls_key (mTLS is TLS)");
  }
  if (options.engine.node_rank == 0 && ListensInsecurelyOnRemote(options) && !options.allow_insecure_remote) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--listen ", options.listen,
        options.openai_listen.empty() ? "" : absl::StrCat(" or --openai_listen ", options.openai_listen),
        " is not a loopback address and neither TLS (--tls_cert/--tls_key) nor ",
        "--auth_token_file is configured: anyone who can reach the port could use the model. Configure one, ",
        "or pass --allow_insecure_remote to accept that"));
  }
  return absl::OkStatus();
}

}  // namespace scored
