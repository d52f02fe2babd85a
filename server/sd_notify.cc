#include "server/sd_notify.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace scored {

absl::Status NotifyServiceManager(absl::string_view state) {
  const char* env = std::getenv("NOTIFY_SOCKET");
  if (env == nullptr || env[0] == '\0') return absl::OkStatus();
  const absl::string_view path = env;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path[0] != '/' && path[0] != '@') {
    return absl::InvalidArgumentError(
        absl::StrCat("NOTIFY_SOCKET '", path, "' is neither an absolute path nor @abstract"));
  }
  if (path.size() >= sizeof(addr.sun_path)) {
    return absl::InvalidArgumentError(
        absl::StrCat("NOTIFY_SOCKET '", path, "' is longer than ", sizeof(addr.sun_path) - 1, " bytes"));
  }
  std::memcpy(addr.sun_path, path.data(), path.size());
  // An abstract address starts with a NUL byte and its length counts exactly its bytes.
  if (path[0] == '@') addr.sun_path[0] = '\0';
  const socklen_t addr_len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + path.size());

  const int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::UnavailableError(absl::StrCat("NOTIFY_SOCKET: socket: ", std::strerror(errno)));
  const ssize_t sent = sendto(fd, state.data(), state.size(), MSG_NOSIGNAL,
                              reinterpret_cast<const sockaddr*>(&addr), addr_len);
  const int send_errno = errno;
  close(fd);
  if (sent < 0) {
    return absl::UnavailableError(
        absl::StrCat("NOTIFY_SOCKET ", path, ": sendto: ", std::strerror(send_errno)));
  }
  if (static_cast<size_t>(sent) != state.size()) {
    return absl::UnavailableError(
        absl::StrCat("NOTIFY_SOCKET ", path, ": sent ", sent, " of ", state.size(), " bytes"));
  }
  return absl::OkStatus();
}

}  // namespace scored
