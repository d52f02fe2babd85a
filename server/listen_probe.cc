#include "server/listen_probe.h"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace scored {

absl::Status ProbeListenPort(const std::string& flag, const std::string& listen) {
  const size_t colon = listen.rfind(':');
  if (colon == std::string::npos) return absl::OkStatus();
  std::string host = listen.substr(0, colon);
  const std::string port = listen.substr(colon + 1);
  int port_number = 0;
  if (!absl::SimpleAtoi(port, &port_number) || port_number <= 0) return absl::OkStatus();
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* result = nullptr;
  if (::getaddrinfo(host.empty() ? nullptr : host.c_str(), port.c_str(), &hints, &result) != 0) {
    return absl::OkStatus();
  }
  bool taken = false;
  for (addrinfo* ai = result; ai != nullptr && !taken; ai = ai->ai_next) {
    const int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) continue;
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    taken = ::bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 && errno == EADDRINUSE;
    ::close(fd);
  }
  ::freeaddrinfo(result);
  if (!taken) return absl::OkStatus();
  return absl::UnavailableError(
      absl::StrCat("cannot listen on ", listen, " (", flag,
                   "): the port is already in use, checked before loading the "
                   "model (another scored or program listens there; `ss -ltnp 'sport = :",
                   port, "'` names it; port 0 picks a free one)"));
}

}  // namespace scored
