// The OpenAI-compatible HTTP endpoint (--openai_listen): stock OpenAI clients and lm-eval's
// `local-completions` score through it with exact prompt log-probabilities. Formats: server/openai_api.h.
//
// Routes:
//   POST /v1/completions  echo / logprobs / max_tokens 0 or 1 over a prompt (text, ids, or a batch)
//   GET  /v1/models       the one model, named --openai_model_name (default: the model folder's name);
//                         /v1/models/{id} that model (404 for another id)
//   POST /v1/chat/completions, /v1/embeddings, /v1/responses   501 saying what to use instead (scored scores
//                         prompts; a chat is scored by sending its templated text to /v1/completions)
//   GET  /health          200 {"status": "ok"} while serving; 503 once the engine failed or the server stops
//   GET  /tokenizer_info, POST /tokenize, POST /detokenize   vLLM's tokenizer routes, which lm-eval's
//                         remote tokenizer (tokenizer_backend=remote, auto-detected) uses instead of a local
//                         tokenizer; 404 / 400 when the model has no tokenizer
// Errors are OpenAI error objects with the HTTP status of openai::HttpStatusOf (400 bad request, 401 token,
// 404 unknown route or model, 413 body over --max_message_bytes, 429 a limit, 503 engine failed).
//
// The same work path and limits as gRPC Score, by construction: both pass the one ScoreGate
// (server/admission.h), so the refusals below are worded and counted as gRPC's. The bearer token of
// --auth_token_file (`Authorization: Bearer <token>`) on /v1/*; the tokenizer routes need it only with
// --openai_tokenizer_auth: as vLLM (whose --api-key guards /v1 alone), lm-eval's remote tokenizer sends its
// own auth_token model argument, never OPENAI_API_KEY, so with the token required there lm-eval given only
// OPENAI_API_KEY got a 401 on /tokenizer_info, fell back to a transformers tokenizer and failed. Open, they
// still pass the engine-health check and every limit below. --max_text_bytes and
// the tokenize pool (--tokenize_threads / --tokenize_queue) for text, ValidateScoreRequest under the same
// ScoreLimits (max_seq_len, max_batch_tokens, top_k), the memory budget (--max_buffered_bytes: each body
// is first charged what parsing it would take, openai::JsonDomBytes, then each queued prompt), the
// connection cap (--max_connections, peers counted as "http:ADDR:PORT"), and the one Batcher (--max_queue;
// each prompt is one queued request: a request of more prompts than the queue holds gets 429),
// so HTTP and gRPC requests share batches. TLS / mTLS from --tls_cert / --tls_key / --tls_client_ca when
// given (OpenSSL through the library). Requests count in scored_requests_total{method="OpenAI/<route>"}.
//
// Why cpp-httplib (Debian 12 libcpp-httplib-dev 0.11.4): maintained, packaged, one header plus a shared
// library built with OpenSSL, blocking handlers on a thread pool of std::threads with default-sized stacks
// (civetweb's fixed 100 KiB stacks cannot start in a CUDA build: server/metrics_http.h). Threads:
// --openai_threads handle connections (one connection at a time each, keep-alive included: an idle keep-alive
// connection holds its thread for at most 5 s); further accepted connections wait in the library's queue,
// holding only their socket (no request has been read). Reads and writes time out after 5 s without progress;
// a request waiting for the engine has no deadline (HTTP carries none) and completes when its batch does.
//
// SIGPIPE: the library writes with send() without MSG_NOSIGNAL (and OpenSSL with write()), so the process
// must ignore SIGPIPE, or a client closing its connection mid-response kills it (scored's main() does).
//
// Lifecycle: Create() checks the options; Start() binds (port 0 picks one) and serves on its own thread;
// BeginShutdown() stops accepting; Shutdown() waits for the requests in progress (the batcher still runs)
// and joins. Thread-safety: handlers run concurrently on the pool; the objects in Config must outlive
// Shutdown().
#ifndef SCORED_SERVER_OPENAI_HTTP_H_
#define SCORED_SERVER_OPENAI_HTTP_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/admission.h"
#include "server/openai_api.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace scored {

class OpenAiHttpServer {
 public:
  struct Config {
    std::string listen;                 // "host:port" / "[v6]:port"; port 0 picks a free one
    std::string model_name;             // /v1/models id; a request naming another model gets 404
    int threads = 16;                   // --openai_threads
    int64_t max_body_bytes = 64 << 20;  // --max_message_bytes
    // --openai_tokenizer_auth: the token also on the tokenizer routes (default: they are open).
    bool tokenizer_auth = false;
    // TLS (all empty: plaintext); the same files as the gRPC listener.
    std::string tls_cert_file, tls_key_file, tls_client_ca_file;
    // Not owned, required, must outlive the server: the way in that gRPC's calls pass too
    // (server/admission.h), and through it the batcher, tokenizer (may be null), metrics and ScoreLimits.
    const ScoreGate* gate = nullptr;
  };

  static absl::StatusOr<std::unique_ptr<OpenAiHttpServer>> Create(Config config);
  ~OpenAiHttpServer();  // Shutdown()
  OpenAiHttpServer(const OpenAiHttpServer&) = delete;
  OpenAiHttpServer& operator=(const OpenAiHttpServer&) = delete;

  // Binds config.listen and starts serving. UNAVAILABLE naming the address when it cannot be bound.
  absl::Status Start();
  int port() const { return port_; }
  // Stops accepting (idempotent); requests in progress go on.
  void BeginShutdown();
  // BeginShutdown(), then waits for the requests in progress and joins the threads. Idempotent.
  void Shutdown();

 private:
  explicit OpenAiHttpServer(Config config);
  void Route();
  void Completions(const httplib::Request& req, httplib::Response& res);
  void Tokenize(const httplib::Request& req, httplib::Response& res);
  void Detokenize(const httplib::Request& req, httplib::Response& res);
  // ScoreGate::Admit with the request's Authorization header.
  absl::Status Admit(const httplib::Request& req) const;
  // Admit for /tokenize, /detokenize, /tokenizer_info with --openai_tokenizer_auth, else the health check
  // alone.
  absl::Status AdmitTokenizerRoute(const httplib::Request& req) const;
  // The memory parsing `body` takes (openai::JsonDomBytes) charged to the budget before it is parsed, into
  // `charge`: RESOURCE_EXHAUSTED (429) when it does not fit, INVALID_ARGUMENT for invalid or too deep JSON.
  absl::Status ChargeParse(const std::string& body, const char* method, MemoryBudget::Charge* charge) const;
  // The /v1/models entry of the one model.
  openai::Json ModelObject() const;
  void Reply(const char* route, absl::Time start, const absl::Status& status, const std::string& json,
             httplib::Response& res) const;

  const Config config_;
  std::unique_ptr<httplib::Server> http_;
  std::thread thread_;
  int port_ = 0;
  std::atomic<bool> stopping_{false};
  std::atomic<bool> listener_returned_{false};  // listen_after_bind() returned
  std::atomic<uint64_t> next_id_{1};
};

}  // namespace scored

#endif  // SCORED_SERVER_OPENAI_HTTP_H_
