// A minimal HTTP/1.0 server for the Prometheus text exposition: GET /metrics returns `render()`.
//
// Why not prometheus-cpp's Exposer: it runs on civetweb, whose threads get a fixed 100 KiB stack; glibc
// places every loaded library's static TLS on each thread's stack, and cuBLASLt alone carries ~94 KiB of it,
// so in a CUDA build civetweb cannot start a thread and the endpoint never comes up.
//
// Concurrency: one thread with a default-sized stack multiplexes every connection with poll() on
// non-blocking sockets, so an idle, slow (one byte a second) or non-reading client never delays another
// scrape. Bounds: at most kMaxConnections (64) open connections; when a new one arrives at the cap, the
// oldest connection still sending its request (else the oldest one) is closed. Each connection has 5 s
// from accept to send its request head (at most 8 KiB; larger: 431) and receive its response, then it is
// closed; responses close the connection.
//
// Lifecycle: Create(listen, render) binds and starts the thread; the destructor stops it (joins) and
// closes every connection. A listen address that is not loopback (e.g. 0.0.0.0) logs a warning at Create:
// the endpoint has no authentication or TLS.
// Requests: GET /metrics (also "/metrics?..."): 200 text/plain; version=0.0.4. GET /: a short text pointing
// to /metrics. Anything else: 404 (405 for methods other than GET/HEAD, 400 for a line that is no request).
// Out of file descriptors, accepting pauses for 100 ms at a time (the open connections are still served).
// Thread-safety: `render` is called from the server thread (once per scrape, one at a time); it must be
// thread-safe with respect to the rest of the program.
#ifndef SCORED_SERVER_METRICS_HTTP_H_
#define SCORED_SERVER_METRICS_HTTP_H_

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"

namespace scored {

class MetricsHttpServer {
 public:
  // listen: "host:port", "[v6]:port"; port 0 picks a free port. UNAVAILABLE naming the address when it
  // cannot be resolved or bound.
  static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> Create(const std::string& listen,
                                                                   std::function<std::string()> render);
  ~MetricsHttpServer();
  MetricsHttpServer(const MetricsHttpServer&) = delete;
  MetricsHttpServer& operator=(const MetricsHttpServer&) = delete;

  int port() const { return port_; }

  // Most connections open at once (a scrape is one short connection; Prometheus opens one at a time).
  static constexpr int kMaxConnections = 64;
  // Per connection, from accept to the last byte of the response.
  static constexpr int kConnectionTimeoutMs = 5000;
  static constexpr size_t kMaxRequestHead = 8192;

 private:
  MetricsHttpServer() = default;
  struct Connection;

  void Serve();
  // Reads what `c` has sent; once its request head is complete (or it half-closed), queues the response.
  // Returns false when the connection is to be closed.
  bool ReadRequest(Connection& c);
  // Sends as much of the queued response as the socket takes; false when done or failed (close it).
  static bool WriteResponse(Connection& c);
  std::string ResponseFor(const std::string& head);

  std::function<std::string()> render_;
  int listen_fd_ = -1;
  int wake_fds_[2] = {-1, -1};  // a pipe: writing to [1] stops Serve()
  int port_ = 0;
  std::thread thread_;
};

}  // namespace scored

#endif  // SCORED_SERVER_METRICS_HTTP_H_
