#include "server/metrics_http.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <list>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "engine/base/logging.h"

namespace scored {
namespace {

using Clock = std::chrono::steady_clock;

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

std::string Response(int code, absl::string_view reason, absl::string_view content_type,
                     absl::string_view body, bool head_only) {
  return absl::StrCat("HTTP/1.0 ", code, " ", reason, "\r\nContent-Type: ", content_type,
                      "\r\nContent-Length: ", body.size(), "\r\nConnection: close\r\n\r\n",
                      head_only ? absl::string_view() : body);
}

bool HeadComplete(const std::string& head) {
  return head.find("\r\n\r\n") != std::string::npos || head.find("\n\n") != std::string::npos;
}

// Whether a bound socket address only accepts connections from this machine: 127.0.0.0/8, ::1 or
// ::ffff:127.0.0.0/104.
bool IsLoopbackAddress(const sockaddr_storage& address) {
  if (address.ss_family == AF_INET) {
    const auto* v4 = reinterpret_cast<const sockaddr_in*>(&address);
    return (ntohl(v4->sin_addr.s_addr) >> 24) == 127;
  }
  if (address.ss_family == AF_INET6) {
    const in6_addr& v6 = reinterpret_cast<const sockaddr_in6*>(&address)->sin6_addr;
    return IN6_IS_ADDR_LOOPBACK(&v6) || (IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127);
  }
  return false;
}

}  // namespace

struct MetricsHttpServer::Connection {
  int fd = -1;
  Clock::time_point deadline;
  std::string head;      // the request head received so far
  std::string response;  // non-empty once the request is answered
  size_t sent = 0;       // bytes of `response` sent
};

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
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && ::listen(fd, kMaxConnections) == 0 &&
        ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK) == 0) {
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
  if (!IsLoopbackAddress(bound)) {
    SCORED_LOG(WARNING) << "metrics endpoint on " << listen
                        << " is not loopback-only and is unauthenticated (plain HTTP, no token, no TLS): "
                           "anyone who can reach port "
                        << server->port_
                        << " reads the server's metrics; bind --metrics_listen to 127.0.0.1 or a private "
                           "network";
  }
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
  std::list<Connection> connections;  // in accept order: the front is the oldest
  auto close_connection = [&connections](std::list<Connection>::iterator it) {
    ::close(it->fd);
    return connections.erase(it);
  };
  std::vector<pollfd> fds;
  std::vector<std::list<Connection>::iterator> polled;  // polled[i] is fds[i + 2]'s connection
  // After the process ran out of descriptors, accepting pauses briefly (the listener would stay readable
  // and spin the loop).
  Clock::time_point accept_resumes = Clock::time_point::min();
  for (;;) {
    const Clock::time_point now = Clock::now();
    Clock::time_point next_deadline = Clock::time_point::max();
    for (auto it = connections.begin(); it != connections.end();) {
      if (it->deadline <= now) {
        it = close_connection(it);
      } else {
        next_deadline = std::min(next_deadline, it->deadline);
        ++it;
      }
    }
    if (accept_resumes > now) next_deadline = std::min(next_deadline, accept_resumes);
    const short accept_events = accept_resumes > now ? 0 : POLLIN;
    fds.assign({{listen_fd_, accept_events, 0}, {wake_fds_[0], POLLIN, 0}});
    polled.clear();
    for (auto it = connections.begin(); it != connections.end(); ++it) {
      fds.push_back({it->fd, static_cast<short>(it->response.empty() ? POLLIN : POLLOUT), 0});
      polled.push_back(it);
    }
    int timeout_ms = -1;
    if (next_deadline != Clock::time_point::max()) {
      // Rounded up so that the deadline has passed when poll() returns on time.
      timeout_ms = static_cast<int>(
          std::chrono::duration_cast<std::chrono::milliseconds>(next_deadline - now).count() + 1);
    }
    if (::poll(fds.data(), fds.size(), timeout_ms) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (fds[1].revents != 0) break;
    for (size_t i = 0; i < polled.size(); ++i) {
      if (fds[i + 2].revents == 0) continue;
      Connection& c = *polled[i];
      const bool keep =
          c.response.empty() ? ReadRequest(c) && (c.response.empty() || WriteResponse(c)) : WriteResponse(c);
      if (!keep) close_connection(polled[i]);
    }
    if ((fds[0].revents & POLLIN) == 0) continue;
    for (;;) {
      const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd < 0) {
        // EAGAIN: all taken. Out of descriptors: retry in 100 ms. Others (a reset peer): next round.
        if (errno == EMFILE || errno == ENFILE) {
          accept_resumes = Clock::now() + std::chrono::milliseconds(100);
        }
        break;
      }
      if (connections.size() >= static_cast<size_t>(kMaxConnections)) {
        // Full: drop the oldest connection that has not finished sending its request (an idle or slow
        // client), else the oldest one.
        auto victim = std::find_if(connections.begin(), connections.end(),
                                   [](const Connection& c) { return c.response.empty(); });
        close_connection(victim != connections.end() ? victim : connections.begin());
      }
      Connection c;
      c.fd = fd;
      c.deadline = Clock::now() + std::chrono::milliseconds(kConnectionTimeoutMs);
      connections.push_back(std::move(c));
    }
  }
  for (auto it = connections.begin(); it != connections.end();) it = close_connection(it);
}

bool MetricsHttpServer::ReadRequest(Connection& c) {
  for (;;) {
    char buf[1024];
    const ssize_t n = ::recv(c.fd, buf, sizeof(buf), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    if (n <= 0) {
      // Closed or failed. A client that half-closes after its request line is served as it is.
      if (n < 0 || c.head.empty()) return false;
      c.response = ResponseFor(c.head);
      return true;
    }
    c.head.append(buf, static_cast<size_t>(n));
    if (c.head.size() > kMaxRequestHead) {
      c.response =
          Response(431, "Request Header Fields Too Large", "text/plain", "request head over 8 KiB\n", false);
      return true;
    }
    if (HeadComplete(c.head)) {
      c.response = ResponseFor(c.head);
      return true;
    }
  }
  return true;
}

bool MetricsHttpServer::WriteResponse(Connection& c) {
  while (c.sent < c.response.size()) {
    const ssize_t n = ::send(c.fd, c.response.data() + c.sent, c.response.size() - c.sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;  // the rest when it is writable
    if (n <= 0) return false;  // the scraper went away; nothing to report
    c.sent += static_cast<size_t>(n);
  }
  return false;  // all sent: close
}

std::string MetricsHttpServer::ResponseFor(const std::string& head) {
  const absl::string_view line = absl::string_view(head).substr(0, head.find_first_of("\r\n"));
  const size_t sp1 = line.find(' ');
  const size_t sp2 = sp1 == absl::string_view::npos ? absl::string_view::npos : line.find(' ', sp1 + 1);
  if (sp1 == absl::string_view::npos) {
    return Response(400, "Bad Request", "text/plain", "not an HTTP request\n", false);
  }
  const absl::string_view method = line.substr(0, sp1);
  absl::string_view target =
      line.substr(sp1 + 1, sp2 == absl::string_view::npos ? absl::string_view::npos : sp2 - sp1 - 1);
  target = target.substr(0, target.find('?'));
  const bool head_only = method == "HEAD";
  if (method != "GET" && !head_only) {
    return Response(405, "Method Not Allowed", "text/plain", "only GET\n", false);
  }
  if (target == "/metrics") {
    return Response(200, "OK", "text/plain; version=0.0.4; charset=utf-8", render_(), head_only);
  }
  if (target == "/") return Response(200, "OK", "text/plain", "scored metrics: GET /metrics\n", head_only);
  return Response(404, "Not Found", "text/plain", "not found; metrics are at /metrics\n", head_only);
}

}  // namespace scored
