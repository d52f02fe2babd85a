#include "server/server.h"

#include <unistd.h>

#include <cstdio>
#include <exception>
#include <mutex>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/base/logging.h"
#include "engine/base/status_macros.h"
#include "engine/model/hub_cache.h"
#include "engine/tokenizer/content_digest.h"
#include "google/protobuf/stubs/logging.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/resource_quota.h"
#include "server/fault_injection.h"
#include "server/listen_probe.h"

#ifndef SCORED_VERSION
#error "SCORED_VERSION must be defined by the build (server/CMakeLists.txt)"
#endif

namespace scored {
namespace {

// The model's name where one is shown (/v1/models, scored_model_info's `model` label): --openai_model_name,
// else the model folder's last component.
std::string ServedModelName(const ServerOptions& options) {
  if (!options.openai_model_name.empty()) return options.openai_model_name;
  std::string dir = options.engine.model_dir;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  return dir.substr(dir.rfind('/') == std::string::npos ? 0 : dir.rfind('/') + 1);
}

// protobuf logs an ERROR line for every message whose string field holds invalid UTF-8; scored answers such a
// request with INVALID_ARGUMENT naming the field (and counts it), so that line would only let any client
// write to the server's log at will (one line per request: 4,163 of them in a 30-minute soak). Dropped;
// protobuf's other messages go to the server's log.
void ProtobufLog(google::protobuf::LogLevel level, const char* file, int line, const std::string& message) {
  if (message.find("contains invalid UTF-8 data") != std::string::npos) return;
  if (level >= google::protobuf::LOGLEVEL_ERROR) {
    SCORED_LOG(ERROR) << "protobuf " << file << ":" << line << ": " << message;
  } else {
    SCORED_LOG(WARNING) << "protobuf " << file << ":" << line << ": " << message;
  }
}

constexpr char kScorerServiceName[] = "scored.v1.Scorer";

// How long the server keeps answering UNAVAILABLE (health NOT_SERVING) after a fatal engine error
// before it shuts down; long enough for a health probe period of a second or two to notice.
constexpr absl::Duration kFatalLinger = absl::Seconds(2);

// How often Wait() asks the engine for a fatal status between batches: well below a health probe period.
constexpr absl::Duration kEngineWatchInterval = absl::Milliseconds(200);

v1::ModelInfo BuildModelInfo(const ModelInfo& info, const ScoreLimits& limits, const Tokenizer* tokenizer) {
  v1::ModelInfo m;
  m.set_architecture(info.architecture);
  m.set_format(info.format);
  m.set_format_notes(info.format_notes);
  m.set_bits_per_weight_decoder(info.bits_per_weight_decoder);
  m.set_bits_per_weight_head(info.bits_per_weight_head);
  m.set_num_parameters(info.num_parameters);
  m.set_resident_bytes(info.resident_bytes);
  m.set_backend(info.backend);
  m.set_compute_dtype(info.compute_dtype);
  m.set_tp(info.tp);
  m.set_max_seq_len(limits.max_seq_len);
  m.set_max_batch_tokens(limits.max_batch_tokens);
  m.set_vocab_size(limits.vocab_size);
  m.set_model_fingerprint(info.model_fingerprint);
  if (tokenizer != nullptr) {
    m.set_tokenizer_size(tokenizer->vocab_size());
    m.set_tokenizer_kind(tokenizer->kind());
    m.set_bos_id(tokenizer->bos_id());
    m.set_eos_id(tokenizer->eos_id());
    m.set_add_bos_by_default(tokenizer->add_bos_by_default());
    m.set_tokenizer_fingerprint(tokenizer->fingerprint());
  } else {
    m.set_bos_id(-1);
    m.set_eos_id(-1);
  }
  m.set_server_version(ServerVersion());
  return m;
}

// Third-party tokenizer libraries may throw (libprotobuf reports a runtime version conflict by
// throwing FatalException); the daemon then serves token ids without a tokenizer instead of dying.
absl::StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizerGuarded(const std::string& dir) {
  try {
    return Tokenizer::Load(dir);
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("loading the tokenizer from ", dir, " threw: ", e.what()));
  }
}

// The tokenizer check of --reference_model: R must tokenize as Q does (engine/tokenizer/content_digest.h),
// whatever its files' bytes. Folders without any tokenizer on both sides pass (token-id input only); one
// side without one is refused.
absl::Status CheckReferenceTokenizer(const std::string& model_dir, const std::string& reference_dir,
                                     std::unique_ptr<Tokenizer>* reference_tokenizer) {
  absl::StatusOr<std::unique_ptr<Tokenizer>> model = LoadTokenizerGuarded(model_dir);
  absl::StatusOr<std::unique_ptr<Tokenizer>> reference = LoadTokenizerGuarded(reference_dir);
  if (!model.ok() && !reference.ok()) {
    SCORED_LOG(WARNING) << "--reference_model: neither " << model_dir << " nor " << reference_dir
                        << " has a tokenizer; their tokenizers are not compared";
    return absl::OkStatus();
  }
  if (!model.ok() || !reference.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--reference_model: only one of the two folders has a tokenizer (model ", model_dir,
                     ": ", model.ok() ? "loaded" : model.status().ToString(), "; reference ", reference_dir,
                     ": ", reference.ok() ? "loaded" : reference.status().ToString(), ")"));
  }
  const absl::Status same = CompareTokenizerContent(**model, **reference);
  if (!same.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--reference_model ", reference_dir,
                                                   ": its tokenizer does not tokenize as the model's (",
                                                   model_dir, "): ", same.message()));
  }
  *reference_tokenizer = *std::move(reference);
  return absl::OkStatus();
}

}  // namespace

const char* ServerVersion() { return SCORED_VERSION; }

absl::StatusOr<std::unique_ptr<Server>> Server::Create(const ServerOptions& options) {
  static std::once_flag protobuf_log;
  std::call_once(protobuf_log, [] { google::protobuf::SetLogHandler(&ProtobufLog); });
  SCORED_RETURN_IF_ERROR(ValidateServerOptions(options));
  if (options.engine.node_rank > 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "node rank ", options.engine.node_rank, " is a follower: it runs RunFollowerNode(), not a server"));
  }
  std::unique_ptr<Server> server(new Server());
  server->options_ = options;
  server->options_.engine.backend = ResolveBackend(options.engine.backend);
  SCORED_RETURN_IF_ERROR(server->ResolveHubIds());
  // Security files, the metrics port and the listen ports first: a bad certificate or a taken port should
  // fail before a long model load.
  SCORED_RETURN_IF_ERROR(server->LoadSecurity());
  SCORED_RETURN_IF_ERROR(server->StartMetrics());
  SCORED_RETURN_IF_ERROR(ProbeListenPort("--listen", options.listen));
  if (!options.openai_listen.empty()) {
    SCORED_RETURN_IF_ERROR(ProbeListenPort("--openai_listen", options.openai_listen));
  }
  std::unique_ptr<Tokenizer> reference_tokenizer;
  absl::Time load_start;
  SCORED_RETURN_IF_ERROR(server->LoadEngine(&reference_tokenizer, &load_start));
  SCORED_RETURN_IF_ERROR(server->LoadTokenizer());
  SCORED_ASSIGN_OR_RETURN(const ScoreLimits limits, server->DeriveLimits());
  server->LogLoaded(limits, load_start);
  SCORED_RETURN_IF_ERROR(server->StartBatcher(limits));
  server->SetUpAdmission(limits);
  SCORED_RETURN_IF_ERROR(server->StartEndpoints(limits, reference_tokenizer.get()));
  return server;
}

absl::Status Server::ResolveHubIds() {
  for (std::string* dir : {&options_.engine.model_dir, &options_.engine.reference_model_dir}) {
    SCORED_ASSIGN_OR_RETURN(std::string resolved, ResolveModelPath(*dir));
    if (resolved == *dir) continue;
    SCORED_LOG(INFO) << *dir << ": the hub cache's snapshot " << resolved;
    // The served name stays the hub id (as vLLM names it), not the snapshot's hash.
    if (dir == &options_.engine.model_dir && options_.openai_model_name.empty())
      options_.openai_model_name = *dir;
    *dir = std::move(resolved);
  }
  return absl::OkStatus();
}

absl::Status Server::LoadSecurity() {
  const ServerOptions& options = options_;
  SCORED_ASSIGN_OR_RETURN(
      credentials_, BuildServerCredentials(
                        TlsFiles{options.tls_cert_file, options.tls_key_file, options.tls_client_ca_file}));
  if (!options.auth_token_file.empty()) {
    SCORED_ASSIGN_OR_RETURN(auth_, BearerTokenAuth::FromFile(options.auth_token_file));
  }
  if (ListensInsecurelyOnRemote(options)) {
    SCORED_LOG(WARNING) << "--allow_insecure_remote: listening on " << options.listen
                        << " without TLS or a token; anyone who can reach the port can use the model";
  } else if (!IsLoopbackListen(options.listen) && options.tls_cert_file.empty()) {
    SCORED_LOG(WARNING) << "listening on " << options.listen
                        << " without TLS: the bearer token and all data cross the network in clear text";
  }
  if (!options.openai_listen.empty() && !IsLoopbackListen(options.openai_listen) &&
      options.tls_cert_file.empty()) {
    SCORED_LOG(WARNING) << "--openai_listen " << options.openai_listen
                        << " without TLS: the bearer token and all data cross the network in clear text";
  }
  return absl::OkStatus();
}

absl::Status Server::StartMetrics() {
  SCORED_ASSIGN_OR_RETURN(metrics_, Metrics::Create(options_.metrics_listen));
  return absl::OkStatus();
}

absl::Status Server::LoadEngine(std::unique_ptr<Tokenizer>* reference_tokenizer, absl::Time* load_start) {
  const ServerOptions& options = options_;
  SCORED_LOG(INFO) << "scored " << ServerVersion() << ": loading " << options.engine.model_dir << " (backend "
                   << BackendName(options.engine.backend) << ", tp " << options.engine.tp << ")";
  if (options.engine.nnodes > 1) {
    SCORED_LOG(INFO) << "multi-process tensor parallelism: node rank 0 (leader) of " << options.engine.nnodes
                     << ", control channel on " << options.engine.rendezvous << ", "
                     << options.engine.tp / options.engine.nnodes << " of the " << options.engine.tp
                     << " ranks on this node; waiting for the followers";
  }
  // The reference's tokenizer is compared before either model loads: it is the cheaper check.
  if (!options.engine.reference_model_dir.empty()) {
    SCORED_RETURN_IF_ERROR(CheckReferenceTokenizer(options.engine.model_dir,
                                                   options.engine.reference_model_dir, reference_tokenizer));
  }
  *load_start = absl::Now();
  if (options.fault.slow_load_ms >= 0) {
    SCORED_LOG(WARNING) << "--fault_inject: waiting " << options.fault.slow_load_ms
                        << " ms before loading (testing only)";
    absl::SleepFor(absl::Milliseconds(options.fault.slow_load_ms));
  }
  absl::StatusOr<std::unique_ptr<Engine>> engine = CreateEngine(options.engine);
  if (!engine.ok()) {
    return absl::Status(
        engine.status().code(),
        absl::StrCat("loading the model from ", options.engine.model_dir, ": ", engine.status().message()));
  }
  engine_ = std::move(*engine);
  if (options.fault.fatal_after_batches >= 0 || options.fault.fatal_after_ms >= 0) {
    SCORED_LOG(WARNING) << "--fault_inject: the engine fails fatally after "
                        << (options.fault.fatal_after_batches >= 0
                                ? absl::StrCat(options.fault.fatal_after_batches, " batches")
                                : absl::StrCat(options.fault.fatal_after_ms, " ms"))
                        << " (testing only)";
    engine_ = std::make_unique<FaultInjectingEngine>(std::move(engine_), options.fault);
  }
  return absl::OkStatus();
}

absl::Status Server::LoadTokenizer() {
  if (options_.tokenizer_dir == "none") return absl::OkStatus();
  const std::string dir = options_.tokenizer_dir.empty() ? options_.engine.model_dir : options_.tokenizer_dir;
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = LoadTokenizerGuarded(dir);
  if (tokenizer.ok()) {
    tokenizer_ = std::move(*tokenizer);
    return absl::OkStatus();
  }
  // A --tokenizer DIR the user named must load. The model folder's own may be missing: a checkpoint scored
  // by token ids (clients that tokenize themselves, scored-ppl --tokenizer) needs none, so the server serves
  // ids and says loudly how to add one or silence this.
  if (!options_.tokenizer_dir.empty()) {
    return absl::Status(tokenizer.status().code(),
                        absl::StrCat("--tokenizer ", dir, ": ", tokenizer.status().message()));
  }
  SCORED_LOG(WARNING)
      << "no tokenizer (" << tokenizer.status().ToString()
      << "); serving token ids only: Tokenize, `text` input and the OpenAI text prompts fail with "
         "FAILED_PRECONDITION (--tokenizer DIR names the tokenizer's folder; --tokenizer none "
         "serves ids without this warning)";
  return absl::OkStatus();
}

absl::StatusOr<ScoreLimits> Server::DeriveLimits() const {
  const ModelInfo& info = engine_->info();
  ScoreLimits limits;
  limits.max_batch_tokens =
      info.max_batch_tokens > 0 ? info.max_batch_tokens : options_.engine.max_batch_tokens;
  limits.max_seq_len = info.max_seq_len > 0 ? info.max_seq_len : options_.engine.max_seq_len;
  if (limits.max_seq_len <= 0) limits.max_seq_len = limits.max_batch_tokens;
  limits.vocab_size = info.vocab_size;
  if (limits.vocab_size <= 0) {
    return absl::InternalError("the engine reports no vocab_size");
  }
  if (info.tp > 1) limits.smallest_vocab_shard = SmallestVocabShard(info.vocab_size, info.tp);
  limits.has_reference = info.reference != nullptr;
  return limits;
}

void Server::LogLoaded(const ScoreLimits& limits, absl::Time load_start) {
  const ModelInfo& info = engine_->info();
  SCORED_LOG(INFO) << absl::StrFormat(
      "model loaded in %.2f s: %s, format %s%s, %d parameters, bits/weight decoder %.3f head %.3f, "
      "resident %d bytes, backend %s, dtype %s, tp %d, vocab %d, max_seq_len %d, max_batch_tokens %d, "
      "fingerprint %s",
      absl::ToDoubleSeconds(absl::Now() - load_start), info.architecture, info.format,
      info.format_notes.empty() ? std::string() : " (" + info.format_notes + ")", info.num_parameters,
      info.bits_per_weight_decoder, info.bits_per_weight_head, info.resident_bytes, info.backend,
      info.compute_dtype, info.tp, limits.vocab_size, limits.max_seq_len, limits.max_batch_tokens,
      info.model_fingerprint);
  if (options_.engine.allow_long_context) {
    SCORED_LOG(WARNING)
        << "--allow_long_context: max_seq_len " << limits.max_seq_len
        << " may pass the model's max_position_embeddings; log-probs at positions past it are "
           "RoPE extrapolation";
  }
  if (info.reference != nullptr) {
    const ModelInfo& r = *info.reference;
    SCORED_LOG(INFO) << absl::StrFormat(
        "reference model %s: %s, format %s, %d parameters, bits/weight decoder %.3f head %.3f, resident %d "
        "bytes, vocab %d, fingerprint %s; tokenizer content matches the model's",
        options_.engine.reference_model_dir, r.architecture, r.format, r.num_parameters,
        r.bits_per_weight_decoder, r.bits_per_weight_head, r.resident_bytes, r.vocab_size,
        r.model_fingerprint);
  }
  if (tokenizer_) {
    SCORED_LOG(INFO) << "tokenizer " << tokenizer_->kind() << ": " << tokenizer_->vocab_size()
                     << " entries, bos " << tokenizer_->bos_id() << ", eos " << tokenizer_->eos_id()
                     << ", add_bos_by_default " << tokenizer_->add_bos_by_default();
  }
  metrics_->SetModelInfo(info, ServedModelName(options_));
  metrics_->SetDeviceMemory(engine_->DeviceMemory());
}

absl::Status Server::StartBatcher(const ScoreLimits& limits) {
  BatcherOptions batcher_options;
  batcher_options.max_batch_tokens = limits.max_batch_tokens;
  batcher_options.max_queue = options_.max_queue;
  batcher_options.batch_timeout = options_.batch_timeout;
  Metrics* metrics = metrics_.get();
  Engine* engine_ptr = engine_.get();
  Server* self = this;
  batcher_options.on_batch = [metrics, engine_ptr](int64_t batch_tokens, int, int64_t num_scored) {
    metrics->RecordBatch(batch_tokens, num_scored);
    metrics->SetDeviceMemory(engine_ptr->DeviceMemory());
  };
  batcher_options.on_queue_depth = [metrics](int64_t depth) { metrics->SetQueueDepth(depth); };
  batcher_options.on_in_flight = [metrics](int64_t n) { metrics->SetInFlight(n); };
  batcher_options.on_queue_wait = [metrics](double seconds) { metrics->RecordQueueWait(seconds); };
  batcher_options.on_compute = [metrics](double seconds) { metrics->RecordBatchCompute(seconds); };
  batcher_options.on_fatal = [self](const absl::Status& status) { self->OnFatal(status); };
  batcher_options.on_nonfinite = [metrics] { metrics->RecordNonFiniteResult(); };
  SCORED_ASSIGN_OR_RETURN(batcher_, Batcher::Create(engine_.get(), std::move(batcher_options)));
  return absl::OkStatus();
}

void Server::SetUpAdmission(const ScoreLimits& limits) {
  std::string budget_source = "--max_buffered_bytes";
  const int64_t budget_bytes =
      options_.max_buffered_bytes > 0 ? options_.max_buffered_bytes : DefaultMaxBufferedBytes(&budget_source);
  Metrics* metrics = metrics_.get();
  metrics->SetBufferedBytesLimit(budget_bytes);
  budget_ = std::make_unique<MemoryBudget>(budget_bytes,
                                           [metrics](int64_t used) { metrics->SetBufferedBytes(used); });
  connections_ = std::make_unique<ConnectionLimiter>(options_.max_connections,
                                                     [metrics](int64_t n) { metrics->SetConnections(n); });
  SCORED_LOG(INFO) << absl::StrFormat(
      "limits: max_buffered_bytes %d (%s; streams may fill %d of it), max_connections %d, "
      "max_streams_per_connection %d, stream_window %d, max_queue %d, max_message_bytes %d",
      budget_bytes, budget_source, budget_bytes - budget_bytes / MemoryBudget::kStreamHeadroomDivisor,
      options_.max_connections, options_.max_streams_per_connection, options_.stream_window,
      options_.max_queue, options_.max_message_bytes);

  ScoreRequest largest;  // the largest request this server accepts: max_seq_len tokens, top_k 64
  largest.tokens.resize(static_cast<size_t>(limits.max_seq_len));
  largest.top_k = 64;
  const int64_t largest_bytes =
      kQueuedBytesPerToken * limits.max_seq_len + EstimateScoreResponseBytes(largest);
  if (largest_bytes > budget_bytes - budget_bytes / MemoryBudget::kStreamHeadroomDivisor) {
    SCORED_LOG(WARNING) << "--max_buffered_bytes " << budget_bytes << ": a top_k 64 request of max_seq_len "
                        << limits.max_seq_len << " tokens reserves " << largest_bytes
                        << " bytes, more than ScoreStreams may use; such requests get RESOURCE_EXHAUSTED";
  }
  tokenize_pool_ = std::make_unique<TokenizePool>(
      TokenizePool::Options{options_.tokenize_threads, options_.tokenize_queue});
  SCORED_LOG(INFO) << "text limits: --max_text_bytes " << options_.max_text_bytes << ", --tokenize_threads "
                   << options_.tokenize_threads << ", --tokenize_queue " << options_.tokenize_queue;
  ScoreGate::Config gate;
  gate.batcher = batcher_.get();
  gate.tokenizer = tokenizer_.get();
  gate.metrics = metrics;
  gate.auth = auth_.get();
  gate.budget = budget_.get();
  gate.connections = connections_.get();
  gate.tokenize_pool = tokenize_pool_.get();
  gate.max_text_bytes = options_.max_text_bytes;
  gate.limits = limits;
  gate_ = std::make_unique<ScoreGate>(std::move(gate));
}

absl::Status Server::StartEndpoints(const ScoreLimits& limits, const Tokenizer* reference_tokenizer) {
  const ModelInfo& info = engine_->info();
  ScorerService::Config config;
  config.gate = gate_.get();
  config.stream_window = options_.stream_window;
  config.model_info = BuildModelInfo(info, limits, tokenizer_.get());
  config.model_info.set_model_path(options_.engine.model_dir);
  config.model_info.set_max_text_bytes(options_.max_text_bytes);
  if (info.reference != nullptr) {
    // The reference's own limits and tokenizer files (their bytes may differ from the model's).
    ScoreLimits reference_limits = limits;
    reference_limits.max_seq_len = info.reference->max_seq_len;
    reference_limits.vocab_size = info.reference->vocab_size;
    *config.model_info.mutable_reference() =
        BuildModelInfo(*info.reference, reference_limits, reference_tokenizer);
    config.model_info.mutable_reference()->set_model_path(options_.engine.reference_model_dir);
  }
  service_ = std::make_unique<ScorerService>(std::move(config));
  if (options_.openai_listen.empty()) return absl::OkStatus();
  OpenAiHttpServer::Config http;
  http.listen = options_.openai_listen;
  http.model_name = ServedModelName(options_);
  http.threads = options_.openai_threads;
  http.tokenizer_auth = options_.openai_tokenizer_auth;
  http.max_body_bytes = options_.max_message_bytes;
  http.max_queue = options_.max_queue;
  http.limits.max_connections = options_.openai_max_connections;
  http.limits.max_connections_per_client = options_.openai_max_connections_per_client;
  http.limits.header_timeout = options_.openai_header_timeout;
  http.limits.body_timeout = options_.openai_body_timeout;
  http.tls_cert_file = options_.tls_cert_file;
  http.tls_key_file = options_.tls_key_file;
  http.tls_client_ca_file = options_.tls_client_ca_file;
  http.gate = gate_.get();
  SCORED_ASSIGN_OR_RETURN(openai_, OpenAiHttpServer::Create(std::move(http)));
  return absl::OkStatus();
}

Server::~Server() { Shutdown().IgnoreError(); }

absl::Status Server::Start() {
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  builder.AddListeningPort(options_.listen, credentials_, &grpc_port_);
  builder.RegisterService(service_.get());
  builder.SetMaxReceiveMessageSize(static_cast<int>(options_.max_message_bytes));
  // gRPC enables SO_REUSEPORT by default, which would let a second daemon bind the same port silently.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  // Announced in HTTP/2 SETTINGS: a client opens at most this many concurrent calls on one connection.
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, options_.max_streams_per_connection);
  // The transport's buffers (messages still arriving, before any handler or token check) under a quota the
  // size of the memory budget: past it gRPC resets the streams holding the most (server/README.md "Memory").
  grpc::ResourceQuota quota("scored-grpc-transport");
  quota.Resize(static_cast<size_t>(budget_->limit()));
  builder.SetResourceQuota(quota);
  grpc_server_ = builder.BuildAndStart();
  if (grpc_server_ == nullptr || grpc_port_ == 0) {
    grpc_server_.reset();
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", options_.listen,
                     options_.tls_cert_file.empty()
                         ? " (address in use or not local?)"
                         : " (address in use or not local, or --tls_cert/--tls_key/--tls_client_ca "
                           "not a valid certificate, key and CA?)"));
  }
  grpc::HealthCheckServiceInterface* health = grpc_server_->GetHealthCheckService();
  {
    absl::MutexLock lock(&mu_);
    const bool serving = fatal_.ok();
    health->SetServingStatus("", serving);
    health->SetServingStatus(kScorerServiceName, serving);
    metrics_->SetServing(serving);
  }
  const size_t colon = options_.listen.rfind(':');
  SCORED_LOG(INFO) << "serving gRPC on " << options_.listen.substr(0, colon) << ":" << grpc_port_
                   << (options_.tls_cert_file.empty()        ? " (plaintext"
                       : options_.tls_client_ca_file.empty() ? " (TLS"
                                                             : " (mTLS")
                   << (auth_ ? ", bearer token required)" : ")")
                   << (metrics_->port() > 0 ? absl::StrCat(", metrics on http://",
                                                           options_.metrics_listen.substr(
                                                               0, options_.metrics_listen.rfind(':')),
                                                           ":", metrics_->port(), "/metrics")
                                            : std::string(", metrics disabled"));
  if (openai_ != nullptr) {
    SCORED_RETURN_IF_ERROR(openai_->Start());
    SCORED_LOG(INFO) << "serving the OpenAI-compatible API on "
                     << (options_.tls_cert_file.empty() ? "http" : "https") << "://"
                     << options_.openai_listen.substr(0, options_.openai_listen.rfind(':')) << ":"
                     << openai_->port() << "/v1 (" << (auth_ ? "bearer token required" : "no token") << ")";
  }
  return WritePortFile();
}

absl::Status Server::WritePortFile() const {
  if (options_.port_file.empty()) return absl::OkStatus();
  const std::string text = absl::StrCat(
      "{\"grpc\": ", grpc_port_,
      ", \"metrics\": ", metrics_->port() > 0 ? std::to_string(metrics_->port()) : std::string("null"),
      ", \"openai\": ", openai_ ? std::to_string(openai_->port()) : std::string("null"), "}\n");
  const std::string tmp = absl::StrCat(options_.port_file, ".tmp.", getpid());
  std::FILE* f = std::fopen(tmp.c_str(), "w");
  if (f == nullptr) return absl::UnavailableError(absl::StrCat("cannot write --port_file ", tmp));
  const bool written = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  if (std::fclose(f) != 0 || !written) {
    std::remove(tmp.c_str());
    return absl::UnavailableError(absl::StrCat("cannot write --port_file ", tmp));
  }
  if (std::rename(tmp.c_str(), options_.port_file.c_str()) != 0) {
    std::remove(tmp.c_str());
    return absl::UnavailableError(absl::StrCat("cannot rename ", tmp, " to ", options_.port_file));
  }
  return absl::OkStatus();
}

absl::Status Server::Wait() {
  // The engine can fail while no request runs (a follower process lost, an NCCL watchdog): poll it, so
  // that health turns NOT_SERVING and the process exits without waiting for the next batch to notice.
  while (true) {
    const absl::Status engine_fatal = engine_->fatal_status();
    bool report = false;
    {
      absl::MutexLock lock(&mu_);
      report = !engine_fatal.ok() && fatal_.ok() && !stop_requested_;
    }
    if (report) OnFatal(engine_fatal);
    absl::MutexLock lock(&mu_);
    auto done = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_requested_ || !fatal_.ok(); };
    if (mu_.AwaitWithTimeout(absl::Condition(&done), kEngineWatchInterval)) break;
  }
  absl::MutexLock lock(&mu_);
  if (!fatal_.ok() && !stop_requested_) {
    // Keep the listener up for a moment: calls then get UNAVAILABLE with the engine's reason and
    // health probes see NOT_SERVING, instead of calls racing the shutdown and ending CANCELLED.
    auto stop = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_requested_; };
    mu_.AwaitWithTimeout(absl::Condition(&stop), kFatalLinger);
  }
  return fatal_;
}

void Server::RequestStop() {
  absl::MutexLock lock(&mu_);
  stop_requested_ = true;
}

void Server::OnFatal(const absl::Status& status) {
  SCORED_LOG(ERROR) << "engine failed, no longer serving: " << status.ToString();
  absl::MutexLock lock(&mu_);
  fatal_ = status;
  if (metrics_ != nullptr) metrics_->SetServing(false);
  if (grpc_server_ != nullptr && !shut_down_) {
    grpc_server_->GetHealthCheckService()->SetServingStatus("", false);
    grpc_server_->GetHealthCheckService()->SetServingStatus(kScorerServiceName, false);
  }
}

absl::Status Server::Shutdown() {
  {
    absl::MutexLock lock(&mu_);
    if (shut_down_) return absl::OkStatus();
    shut_down_ = true;
    if (metrics_ != nullptr) metrics_->SetServing(false);
    // Under mu_ so that OnFatal never touches the health service concurrently with its shutdown.
    if (grpc_server_ != nullptr) grpc_server_->GetHealthCheckService()->Shutdown();
  }
  // The drain's account: every request queued or running when it began is answered (the count of results
  // handed out during the drain covers them), later ones get UNAVAILABLE.
  const Batcher::Account account = batcher_ ? batcher_->account() : Batcher::Account{};
  const int64_t owed = account.outstanding;
  const int64_t answered_before = account.answered_ok;
  bool grace_ran_out = false;
  if (grpc_server_ != nullptr) {
    SCORED_LOG(INFO) << "shutting down: finishing " << owed << " in-flight requests (grace "
                     << absl::FormatDuration(options_.shutdown_grace) << ")";
    if (openai_) openai_->BeginShutdown();
    if (service_) service_->BeginShutdown();
    const absl::Time grace_end = absl::Now() + options_.shutdown_grace;
    // Tokenizations still running when the grace ends stop there (their calls answer UNAVAILABLE), so that
    // a long text cannot hold the shutdown past it.
    if (tokenize_pool_) tokenize_pool_->BeginShutdown(grace_end);
    grpc_server_->Shutdown(absl::ToChronoTime(grace_end));
    grpc_server_->Wait();
    grace_ran_out = absl::Now() >= grace_end;
  }
  // Before the tokenize pool and the batcher: its requests in progress wait for both.
  if (openai_) openai_->Shutdown();
  // Before the batcher: a pool job may still submit to it.
  if (tokenize_pool_) tokenize_pool_->Shutdown();
  if (batcher_) batcher_->Shutdown();
  const int64_t answered = batcher_ ? batcher_->answered_ok() - answered_before : 0;
  SCORED_LOG(INFO) << "shut down: " << answered << " requests answered during the drain";
  if (grace_ran_out && answered < owed) {
    const std::string dropped =
        absl::StrCat("the shutdown grace (--shutdown_grace_s ", absl::FormatDuration(options_.shutdown_grace),
                     ") ran out: ", owed - answered, " of the ", owed,
                     " requests in flight when the drain began were cut off without results");
    SCORED_LOG(WARNING) << dropped;
    return absl::DeadlineExceededError(dropped);
  }
  return absl::OkStatus();
}

}  // namespace scored
