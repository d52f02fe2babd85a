// A minimal HTTP/1.0 server for the Prometheus text exposition: GET /metrics returns `render()`.
//
// Why not prometheus-cpp's Exposer: it runs on civetweb, whose threads get a fixed 100 KiB stack; glibc
// places every loaded library's static TLS on each thread's stack, and cuBLASLt alone carries ~94 KiB of it,
// so in a CUDA build civetweb cannot start a thread and the endpoint never comes up. Scrapes are rare and
// tiny: one thread with a default-sized stack answers them one at a time.
//
// Lifecycle: Create(listen, render) binds and starts the thread; the destructor stops it (joins).
// Requests: GET /metrics (also "/metrics?..."): 200 text/plain; version=0.0.4. GET /: a short text pointing
// to /metrics. Anything else: 404 (405 for methods other than GET/HEAD). A client has 5 s to send its
// request head (at most 8 KiB); responses close the connection.
// Thread-safety: `render` is called from the server thread; it must be thread-safe.
#ifndef SCORED_SERVER_METRICS_HTTP_H_
#define SCORED_SERVER_METRICS_HTTP_H_

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

 private:
  MetricsHttpServer() = default;
  void Serve();
  void HandleConnection(int fd);

  std::function<std::string()> render_;
  int listen_fd_ = -1;
  int wake_fds_[2] = {-1, -1};  // a pipe: writing to [1] stops Serve()
  int port_ = 0;
  std::thread thread_;
};

}  // namespace scored

#endif  // SCORED_SERVER_METRICS_HTTP_H_
