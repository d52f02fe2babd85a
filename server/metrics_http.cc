#include "server/metrics_http.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace scored {
namespace {

constexpr size_t kMaxRequestHead = 8192;
constexpr int kRequestTimeoutMs = 5000;

absl::Status SplitHostPort(const std::string& listen, std::string* host, std::string* port) {
  const size_t colon = listen.rfind(':');
  if (colon == std::string::npos || colon + 1 == listen.size()) {
    return absl::InvalidArgumentError(absl::StrCat("metrics address '", listen, "' is not host:port"));
  }
  *host = listen.substr(0, colon);
  *port = listen.substr(colon + 1);
  if (host->size() >= 2 && host->front() == '[' && host->back() == ']')
    *host = host->substr(1, host->size() - 2);
  int port_number = 0;
  if (!absl::SimpleAtoi(*port, &port_number) || port_number < 0 || port_number > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("metrics address '", listen, "' has a bad port"));
  }
  return absl::OkStatus();
}

void WriteAll(int fd, absl::string_view data) {
  while (!data.empty()) {
    const ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // the scraper went away; nothing to report
    data.remove_prefix(static_cast<size_t>(n));
  }
}

void Respond(int fd, int code, absl::string_view reason, absl::string_view content_type,
             absl::string_view body, bool head_only) {
  WriteAll(fd, absl::StrCat("HTTP/1.0 ", code, " ", reason, "\r\nContent-Type: ", content_type,
                            "\r\nContent-Length: ", body.size(), "\r\nConnection: close\r\n\r\n"));
  if (!head_only) WriteAll(fd, body);
}

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Create(
    const std::string& listen, std::function<std::string()> render) {
  std::string host, port;
  if (absl::Status s = SplitHostPort(listen, &host, &port); !s.ok())
    return absl::UnavailableError(s.message());
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* result = nullptr;
  if (const int rc = ::getaddrinfo(host.empty() ? nullptr : host.c_str(), port.c_str(), &hints, &result);
      rc != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot resolve metrics address ", listen, ": ", gai_strerror(rc)));
  }
  std::unique_ptr<MetricsHttpServer> server(new MetricsHttpServer());
  std::string last_error = "no address";
  for (addrinfo* ai = result; ai != nullptr && server->listen_fd_ < 0; ai = ai->ai_next) {
    const int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) continue;
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && ::listen(fd, 16) == 0) {
      server->listen_fd_ = fd;
    } else {
      last_error = std::strerror(errno);
      ::close(fd);
    }
  }
  ::freeaddrinfo(result);
  if (server->listen_fd_ < 0) {
    return absl::UnavailableError(absl::StrCat("cannot serve metrics on ", listen, ": ", last_error));
  }
  sockaddr_storage bound{};
  socklen_t len = sizeof(bound);
  ::getsockname(server->listen_fd_, reinterpret_cast<sockaddr*>(&bound), &len);
  server->port_ = bound.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
                                              : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  if (::pipe2(server->wake_fds_, O_CLOEXEC) != 0) {
    ::close(server->listen_fd_);
    return absl::UnavailableError(absl::StrCat("metrics endpoint: pipe: ", std::strerror(errno)));
  }
  server->render_ = std::move(render);
  server->thread_ = std::thread([s = server.get()] { s->Serve(); });
  return server;
}

MetricsHttpServer::~MetricsHttpServer() {
  if (thread_.joinable()) {
    const char stop = 1;
    ssize_t unused = ::write(wake_fds_[1], &stop, 1);
    (void)unused;
    thread_.join();
  }
  for (int fd : {listen_fd_, wake_fds_[0], wake_fds_[1]}) {
    if (fd >= 0) ::close(fd);
  }
}

void MetricsHttpServer::Serve() {
  for (;;) {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_fds_[0], POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[1].revents != 0) return;
    if ((fds[0].revents & POLLIN) == 0) continue;
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    HandleConnection(fd);
    ::close(fd);
  }
}

void MetricsHttpServer::HandleConnection(int fd) {
  std::string head;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kRequestTimeoutMs);
  while (head.find("\r\n\r\n") == std::string::npos && head.find("\n\n") == std::string::npos) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0 || head.size() > kMaxRequestHead) return;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) return;
    char buf[1024];
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) {
      if (n < 0 && errno == EINTR) continue;
      break;  // a client that half-closes after its request line is served as is
    }
    head.append(buf, static_cast<size_t>(n));
  }
  const absl::string_view line = absl::string_view(head).substr(0, head.find_first_of("\r\n"));
  const size_t sp1 = line.find(' ');
  const size_t sp2 = sp1 == absl::string_view::npos ? absl::string_view::npos : line.find(' ', sp1 + 1);
  if (sp1 == absl::string_view::npos) return;
  const absl::string_view method = line.substr(0, sp1);
  absl::string_view target =
      line.substr(sp1 + 1, sp2 == absl::string_view::npos ? absl::string_view::npos : sp2 - sp1 - 1);
  target = target.substr(0, target.find('?'));
  const bool head_only = method == "HEAD";
  if (method != "GET" && !head_only) {
    Respond(fd, 405, "Method Not Allowed", "text/plain", "only GET\n", false);
  } else if (target == "/metrics") {
    Respond(fd, 200, "OK", "text/plain; version=0.0.4; charset=utf-8", render_(), head_only);
  } else if (target == "/") {
    Respond(fd, 200, "OK", "text/plain", "scored metrics: GET /metrics\n", head_only);
  } else {
    Respond(fd, 404, "Not Found", "text/plain", "not found; metrics are at /metrics\n", head_only);
  }
}

}  // namespace scored
