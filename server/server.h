// The scored daemon: engine + tokenizer + batcher + gRPC services + health + reflection + metrics.
//
//   auto server = Server::Create(options);   // loads the model and tokenizer, opens the metrics port
//   server->Start();                          // listens; health SERVING; writes the port file
//   absl::Status why = server->Wait();        // until RequestStop() (OK) or a fatal engine error
//   server->Shutdown();                       // health NOT_SERVING, stop accepting, finish in-flight work
//
// Health (grpc.health.v1, service "" and "scored.v1.Scorer"): NOT_SERVING until Start() has loaded
// everything, SERVING after, NOT_SERVING for good once the engine's fatal_status() is not OK or
// Shutdown() begins.
//
// The OpenAI-compatible HTTP endpoint (--openai_listen, server/openai_http.h) starts after gRPC and shares
// its batcher, tokenize pool, memory budget, connection cap and token; its /health follows the engine.
//
// Shutdown order: health NOT_SERVING; the HTTP endpoint stops accepting; open ScoreStreams are told to drain;
// grpc::Server::Shutdown with `shutdown_grace` (new calls get UNAVAILABLE, in-flight calls complete; after
// the grace they are cancelled, and tokenizations still running stop); then the tokenize pool's threads; then
// the batcher drains and stops; then the metrics endpoint. The HTTP endpoint's requests in progress finish
// (the batcher still runs) before the tokenize pool stops. What a drain owes: every request queued or running
// in the batcher when it began is answered (the log's "finishing N in-flight requests" and "N requests
// answered during the drain"); a stream message the server had not read yet gets UNAVAILABLE (its own, or the
// stream's). Responses are handed to gRPC before the process exits; on a connection the client keeps
// writing to, the kernel may still reset the connection at exit, and the client then sees UNAVAILABLE.
//
// Thread-safety: RequestStop() and the accessors are thread-safe; Start/Wait/Shutdown are called from
// one controlling thread.
#ifndef SCORED_SERVER_SERVER_H_
#define SCORED_SERVER_SERVER_H_

#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "engine/engine.h"
#include "engine/tokenizer/tokenizer.h"
#include "grpcpp/grpcpp.h"
#include "server/admission.h"
#include "server/batcher.h"
#include "server/memory_budget.h"
#include "server/metrics.h"
#include "server/openai_http.h"
#include "server/options.h"
#include "server/scorer_service.h"
#include "server/security.h"
#include "server/tokenize_pool.h"

namespace scored {

// The server's version string (also GetModelInfo.server_version).
const char* ServerVersion();

class Server {
 public:
  static absl::StatusOr<std::unique_ptr<Server>> Create(const ServerOptions& options);
  ~Server();  // Shutdown()

  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds --listen, registers the services, marks health SERVING, writes the port file.
  absl::Status Start();

  // Engine::fatal_status() is polled every 200 ms meanwhile, so a failure between batches (a lost
  // follower process, an NCCL error) is noticed without traffic.
  // Blocks until RequestStop() (returns OK) or a fatal engine error (returns it, after keeping the
  // listener up for 2 s more answering UNAVAILABLE with health NOT_SERVING, or until RequestStop()).
  absl::Status Wait();
  void RequestStop();

  // Idempotent; see the header comment for the order. DEADLINE_EXCEEDED, naming how many of the requests in
  // flight when it began were left without results, when --shutdown_grace_s ran out before they were all
  // answered (scored then exits 1); OK otherwise (also on a later call).
  absl::Status Shutdown();

  int grpc_port() const { return grpc_port_; }
  int metrics_port() const { return metrics_ ? metrics_->port() : 0; }
  int openai_port() const { return openai_ ? openai_->port() : 0; }
  const ModelInfo& model_info() const { return engine_->info(); }

 private:
  Server() = default;
  // Create's steps, in order (each fills the members it names; an error ends Create).
  // --tls_* and --auth_token_file (credentials_, auth_) and the warnings about a listener without TLS.
  // --model / --reference_model given as a hub id (org/name[@revision]): the local hub cache's snapshot
  // (engine/model/hub_cache.h); the served name becomes the id. NOT_FOUND when it is not cached.
  absl::Status ResolveHubIds();
  absl::Status LoadSecurity();
  // metrics_ and its --metrics_listen port.
  absl::Status StartMetrics();
  // The --reference_model tokenizer check, then engine_ (wrapped by --fault_inject); `load_start` receives
  // when the load began.
  absl::Status LoadEngine(std::unique_ptr<Tokenizer>* reference_tokenizer, absl::Time* load_start);
  // tokenizer_, unless --tokenizer none; a model folder without one serves token ids only (a warning); an
  // explicit --tokenizer DIR that does not load fails the start-up.
  absl::Status LoadTokenizer();
  // The ScoreLimits of every request, from the engine's info and the flags. INTERNAL without a vocab_size.
  absl::StatusOr<ScoreLimits> DeriveLimits() const;
  // The load's log lines (model, reference, tokenizer) and the model's metrics.
  void LogLoaded(const ScoreLimits& limits, absl::Time load_start);
  // batcher_, reporting to metrics_ and OnFatal.
  absl::Status StartBatcher(const ScoreLimits& limits);
  // budget_, connections_, tokenize_pool_ and the gate_ in front of them.
  void SetUpAdmission(const ScoreLimits& limits);
  // service_ (GetModelInfo's answer built here) and openai_ (with --openai_listen); neither listens yet.
  absl::Status StartEndpoints(const ScoreLimits& limits, const Tokenizer* reference_tokenizer);

  void OnFatal(const absl::Status& status);
  absl::Status WritePortFile() const;

  ServerOptions options_;
  std::shared_ptr<grpc::ServerCredentials> credentials_;  // insecure, TLS or mTLS (--tls_*)
  std::unique_ptr<BearerTokenAuth> auth_;                 // null without --auth_token_file
  std::unique_ptr<Metrics> metrics_;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<Tokenizer> tokenizer_;
  // Before batcher_ and service_: queued work and streams hold charges and slots until they are destroyed.
  std::unique_ptr<MemoryBudget> budget_;
  std::unique_ptr<ConnectionLimiter> connections_;
  std::unique_ptr<Batcher> batcher_;
  std::unique_ptr<TokenizePool> tokenize_pool_;  // texts of Tokenize and Score (README "Text limits")
  std::unique_ptr<ScoreGate> gate_;              // the way in of service_ and openai_, which it outlives
  std::unique_ptr<ScorerService> service_;
  std::unique_ptr<OpenAiHttpServer> openai_;  // null without --openai_listen
  std::unique_ptr<grpc::Server> grpc_server_;
  int grpc_port_ = 0;

  absl::Mutex mu_;
  bool stop_requested_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status fatal_ ABSL_GUARDED_BY(mu_);
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace scored

#endif  // SCORED_SERVER_SERVER_H_
