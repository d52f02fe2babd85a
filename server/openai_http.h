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
// Transport: server/http_server.h (Boost.Beast; why there): the head read under a byte limit and
// --openai_header_timeout_s, the token checked on the head so a refused body is never read, the body under
// --max_message_bytes (chunked too) and --openai_body_timeout_s, --openai_max_connections open connections
// (the one waiting longest for a request closed first) and --openai_max_connections_per_client per address,
// pipelined requests answered in order. --openai_threads handlers run at once (each waits for the engine);
// an open connection holds no thread. A request waiting for the engine has no deadline (HTTP carries none)
// and completes when its batch does.
//
// Lifecycle: Create() checks the options; Start() binds (port 0 picks one) and serves; BeginShutdown() stops
// accepting and closes every idle or slow connection at once; Shutdown() waits for the requests in progress
// (the batcher still runs) and their responses, and joins. Thread-safety: handlers run concurrently on the
// pool; the objects in Config must outlive Shutdown().
#ifndef SCORED_SERVER_OPENAI_HTTP_H_
#define SCORED_SERVER_OPENAI_HTTP_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/admission.h"
#include "server/http_server.h"
#include "server/openai_api.h"

namespace scored {

class OpenAiHttpServer {
 public:
  struct Config {
    std::string listen;                 // "host:port" / "[v6]:port"; port 0 picks a free one
    std::string model_name;             // /v1/models id; a request naming another model gets 404
    int threads = 16;                   // --openai_threads
    int64_t max_body_bytes = 64 << 20;  // --max_message_bytes
    int64_t max_queue = 256;            // --max_queue: with max_seq_len, the longest JSON array parsed
    // Head and body limits, timeouts and connection caps (server/http_server.h); max_body_bytes above wins
    // over limits.max_body_bytes.
    HttpServer::Limits limits;
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
  // The route of a request head (server/http_server.h Router): on a route with a body the token is checked
  // here, before the body is read.
  HttpServer::Dispatch Dispatch(const HttpRequest& head) const;
  // A refusal sent without reading the body, counted as `route`'s request.
  HttpServer::Dispatch Refusal(const char* route, const absl::Status& status) const;
  static HttpServer::Dispatch MethodNotAllowed(const char* allowed);
  // The 501 message of an OpenAI route scored does not serve; null for any other path.
  static const char* NotServed(const std::string& path);
  void Completions(const HttpRequest& req, HttpResponse& res);
  void Tokenize(const HttpRequest& req, HttpResponse& res);
  void Detokenize(const HttpRequest& req, HttpResponse& res);
  void Health(const HttpRequest& req, HttpResponse& res);
  void Models(const HttpRequest& req, HttpResponse& res);
  void NotServedRoute(const HttpRequest& req, HttpResponse& res);
  void TokenizerInfo(const HttpRequest& req, HttpResponse& res);
  // ScoreGate::Admit with the request's Authorization header.
  absl::Status Admit(const HttpRequest& req) const;
  // Admit for /tokenize, /detokenize, /tokenizer_info with --openai_tokenizer_auth, else the health check
  // alone.
  absl::Status AdmitTokenizerRoute(const HttpRequest& req) const;
  // The memory parsing `body` takes (openai::JsonDomBytes) charged to the budget before it is parsed, into
  // `charge`: RESOURCE_EXHAUSTED (429) when it does not fit, INVALID_ARGUMENT for invalid or too deep JSON.
  absl::Status ChargeParse(const std::string& body, const char* method, MemoryBudget::Charge* charge) const;
  // The /v1/models entry of the one model.
  openai::Json ModelObject() const;
  void Reply(const char* route, absl::Time start, const absl::Status& status, const std::string& json,
             HttpResponse& res) const;

  const Config config_;
  std::unique_ptr<HttpServer> http_;
  int port_ = 0;
  std::atomic<bool> stopping_{false};
  std::atomic<uint64_t> next_id_{1};
};

}  // namespace scored

#endif  // SCORED_SERVER_OPENAI_HTTP_H_
