// An HTTP/1.1 server for traffic that may be hostile: the OpenAI-compatible endpoint's transport
// (server/openai_http.h). Boost.Beast over Boost.Asio (Debian 12's Boost 1.74, header-only), chosen because
// it reads a request in two bounded steps the caller controls: the head (request line and header fields)
// under a byte limit and a deadline, then, only if the caller accepts the head, the body under a byte limit
// that holds for chunked bodies too and a deadline of its own. The previous library (cpp-httplib 0.11.4)
// read headers without a limit, enforced its body limit only with Content-Length, read the whole body before
// any handler (so before the token check), gave every connection a thread for as long as the client kept it
// (16 slow clients stopped the endpoint) and answered one request of a pipelined write.
//
// What this server guarantees, per connection, before any handler runs:
//   - head: at most Limits::max_header_bytes (request line + fields) and max_header_fields fields, else
//     431 and close; it must arrive within header_timeout of the connection's accept (or of the previous
//     response), else the connection is closed (a slow or idle client holds no thread, only its socket).
//   - the Router sees the head (no body yet): it refuses (a 401 without the token, 404, 405, 503) without the
//     body being read, and the connection closes after the refusal; or it names the handler.
//   - body: at most max_body_bytes whether Content-Length or chunked (413 and close as soon as the limit is
//     passed, or at once for a Content-Length over it), within body_timeout of the head's end (else closed).
//     `Expect: 100-continue` is answered 100 once the head is accepted.
//   - connections: at most max_connections open in all and max_connections_per_client per remote address.
//     At the total cap, the connection that has waited longest for a head (idle keep-alive since its last
//     response was queued, or slow) is closed to admit the new one (one in a handler or writing, after its
//     response); when none waits, the new one gets 503 and is closed. Past the per-address cap, 429 and
//     close.
//   - pipelining: requests sent back to back on one connection are answered in order, one at a time.
//   - responses are written within write_timeout, else the connection is closed.
// Handlers (which may block: the OpenAI handlers wait for the engine) run on a pool of worker_threads; the
// I/O runs on io_threads, so a blocked handler never stops reads, accepts or the drain.
//
// Lifecycle: Create() checks the config and TLS files; Start() binds (port 0 picks one) and serves;
// BeginShutdown() stops accepting and closes at once every connection that is not in a handler (idle, slow
// head, slow body), and the others after their response; Shutdown() waits for the handlers in progress, then
// for their responses (write_timeout at most), and joins every thread. Thread-safety: Start / BeginShutdown
// / Shutdown from one thread; the Router and handlers run concurrently (Router on I/O threads: it must not
// block). The Router must outlive Shutdown().
#ifndef SCORED_SERVER_HTTP_SERVER_H_
#define SCORED_SERVER_HTTP_SERVER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace scored {

struct HttpRequest {
  std::string method;  // "GET", "POST", ... as sent
  std::string path;    // the target without its query
  std::string body;    // empty in the head the Router sees
  std::string remote_addr;
  int remote_port = 0;
  std::vector<std::pair<std::string, std::string>> headers;  // as sent, in order

  // The first field named `name` (case-insensitive); "" / false when absent.
  bool has_header(std::string_view name) const;
  std::string header(std::string_view name) const;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;  // extra fields

  void set_content(std::string content, std::string type) {
    body = std::move(content);
    content_type = std::move(type);
  }
  void set_header(std::string name, std::string value) {
    headers.emplace_back(std::move(name), std::move(value));
  }
};

class HttpServer {
 public:
  struct Limits {
    int64_t max_header_bytes = 16 << 10;  // request line + header fields
    int max_header_fields = 64;
    int64_t max_body_bytes = 64 << 20;
    absl::Duration header_timeout = absl::Seconds(10);
    absl::Duration body_timeout = absl::Seconds(60);
    absl::Duration write_timeout = absl::Seconds(60);
    int max_connections = 512;
    int max_connections_per_client = 64;
  };

  using Handler = std::function<void(const HttpRequest& request, HttpResponse& response)>;
  // What answers a request, decided from its head: `handler` (the body is then read and the handler runs on
  // a worker), or, when `handler` is empty, `refusal`, sent without reading the body (the connection closes).
  struct Dispatch {
    Handler handler;
    HttpResponse refusal;
  };
  using Router = std::function<Dispatch(const HttpRequest& head)>;
  // The body for a refusal this server makes itself (431, 413, 400, 429, 503): status and message.
  using ErrorBody = std::function<std::string(int status, const std::string& message)>;

  struct Config {
    std::string host;  // numeric address or "localhost"; "[v6]" brackets removed by the caller
    int port = 0;      // 0 picks a free one
    int worker_threads = 16;
    int io_threads = 2;
    Limits limits;
    // TLS (all empty: plaintext); with a client CA, clients must present a certificate it signed.
    std::string tls_cert_file, tls_key_file, tls_client_ca_file;
    Router router;         // required
    ErrorBody error_body;  // required
    std::string log_name;  // names the listener in log lines, e.g. "--openai_listen"
  };

  // INVALID_ARGUMENT for a missing router / error_body, thread counts < 1, or TLS files that do not load.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Create(Config config);
  ~HttpServer();  // Shutdown()
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds and starts serving. UNAVAILABLE naming the address when it cannot be bound.
  absl::Status Start();
  int port() const;
  // Stops accepting; closes every connection not in a handler. Idempotent.
  void BeginShutdown();
  // BeginShutdown(), then waits for the handlers and their responses and joins. Idempotent.
  void Shutdown();

  // Open connections now (for tests and the log).
  int open_connections() const;

  class Impl;

 private:
  explicit HttpServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace scored

#endif  // SCORED_SERVER_HTTP_SERVER_H_
