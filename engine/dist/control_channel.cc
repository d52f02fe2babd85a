#include "engine/dist/control_channel.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <deque>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "engine/base/logging.h"
#include "engine/base/status_macros.h"

namespace scored::dist {
namespace {

// Frame kinds on the wire ([u32 kind][u64 length][bytes], little-endian).
constexpr uint32_t kKindHello = 1;     // follower -> leader: kHelloBytes, see EncodeHello
constexpr uint32_t kKindPayload = 2;   // leader -> follower: the bootstrap payload
constexpr uint32_t kKindMessage = 3;   // leader -> follower: one Broadcast()
constexpr uint32_t kKindShutdown = 4;  // leader -> follower: clean end (empty body)
constexpr uint32_t kKindReject = 5;    // leader -> follower: the join failed; the body says why
constexpr int64_t kHeaderBytes = 12;

// Hello body: [u32 magic][u32 protocol version][u32 node_rank][u32 nnodes].
constexpr uint32_t kHelloMagic = 0x44524353;  // "SCRD" read as little-endian bytes
constexpr uint32_t kProtocolVersion = 1;
constexpr int64_t kHelloBytes = 16;

// A follower that cannot reach the leader yet (not started, DNS name not yet published) retries this often.
constexpr absl::Duration kConnectRetry = absl::Milliseconds(250);
// One connect() attempt gives up after this long, so that the next address (or a re-resolved name) is tried.
constexpr absl::Duration kConnectAttempt = absl::Seconds(5);
// A reject frame is a courtesy to a follower the leader refuses; never wait long for it.
constexpr absl::Duration kRejectSendTimeout = absl::Seconds(1);
// A peer host that vanished without closing its sockets (power loss, network partition) is declared dead
// after 11 s: when the connection is idle, by keepalive probes (5 s idle, then every 2 s, 3 unanswered);
// when data sent to it stays unacknowledged, by TCP_USER_TIMEOUT (without it the kernel retransmits for
// ~15 minutes, and a collective would wait that long). On Linux, TCP_USER_TIMEOUT also bounds the
// keepalive verdict, so both are the same 11 s. A killed process closes its sockets at once.
constexpr int kKeepIdleSeconds = 5;
constexpr int kKeepIntervalSeconds = 2;
constexpr int kKeepCount = 3;
constexpr unsigned int kUserTimeoutMs = 1000u * (kKeepIdleSeconds + kKeepIntervalSeconds * kKeepCount);

std::string ErrnoText(int err) {
  char buf[256];
  // GNU strerror_r returns the message pointer (possibly not buf).
  const char* text = strerror_r(err, buf, sizeof(buf));
  return text;
}

class ScopedFd {
 public:
  ScopedFd() = default;
  explicit ScopedFd(int fd) : fd_(fd) {}
  ~ScopedFd() { Reset(); }
  ScopedFd(ScopedFd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  ScopedFd& operator=(ScopedFd&& other) noexcept {
    if (this != &other) {
      Reset();
      fd_ = std::exchange(other.fd_, -1);
    }
    return *this;
  }
  ScopedFd(const ScopedFd&) = delete;
  ScopedFd& operator=(const ScopedFd&) = delete;

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  void Reset() {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

void PutU32(uint32_t v, char* out) {
  for (int i = 0; i < 4; ++i) out[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}
void PutU64(uint64_t v, char* out) {
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}
uint32_t GetU32(const char* in) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(static_cast<unsigned char>(in[i])) << (8 * i);
  return v;
}
uint64_t GetU64(const char* in) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(static_cast<unsigned char>(in[i])) << (8 * i);
  return v;
}

const char* KindName(uint32_t kind) {
  switch (kind) {
    case kKindHello:
      return "hello";
    case kKindPayload:
      return "payload";
    case kKindMessage:
      return "message";
    case kKindShutdown:
      return "shutdown";
    case kKindReject:
      return "reject";
    default:
      return "unknown";
  }
}

// Milliseconds until `deadline` for poll(): -1 for an infinite deadline, rounded up, clamped to int.
int PollTimeoutMs(absl::Time deadline) {
  if (deadline == absl::InfiniteFuture()) return -1;
  const absl::Duration left = deadline - absl::Now();
  if (left <= absl::ZeroDuration()) return 0;
  const int64_t ms = absl::ToInt64Milliseconds(absl::Ceil(left, absl::Milliseconds(1)));
  return static_cast<int>(std::min<int64_t>(ms, INT_MAX));
}

struct HostPort {
  std::string host;  // empty: any address (listen) / invalid (connect)
  std::string port;
  int port_number = 0;
};

// "host:port", "[v6]:port" or ":port".
absl::StatusOr<HostPort> SplitHostPort(absl::string_view address) {
  HostPort hp;
  absl::string_view rest;
  if (!address.empty() && address.front() == '[') {
    const size_t close = address.find(']');
    if (close == absl::string_view::npos || close + 1 >= address.size() || address[close + 1] != ':') {
      return absl::InvalidArgumentError(
          absl::StrCat("malformed address '", address, "': expected [IPv6]:PORT, HOST:PORT or IPv4:PORT"));
    }
    hp.host = std::string(address.substr(1, close - 1));
    rest = address.substr(close + 2);
  } else {
    const size_t colon = address.rfind(':');
    if (colon == absl::string_view::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("malformed address '", address, "': expected HOST:PORT"));
    }
    hp.host = std::string(address.substr(0, colon));
    if (hp.host.find(':') != std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("malformed address '", address, "': write an IPv6 host in brackets, [::1]:PORT"));
    }
    rest = address.substr(colon + 1);
  }
  if (rest.empty() || rest.size() > 5 || !absl::SimpleAtoi(rest, &hp.port_number) || hp.port_number < 0 ||
      hp.port_number > 65535 || rest.find_first_not_of("0123456789") != absl::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("malformed address '", address, "': the port must be an integer in [0, 65535]"));
  }
  hp.port = std::string(rest);
  return hp;
}

struct AddrInfoDeleter {
  void operator()(addrinfo* ai) const {
    if (ai != nullptr) freeaddrinfo(ai);
  }
};
using AddrInfoPtr = std::unique_ptr<addrinfo, AddrInfoDeleter>;

absl::StatusOr<AddrInfoPtr> Resolve(const HostPort& hp, bool passive) {
  addrinfo hints;
  std::memset(&hints, 0, sizeof(hints));
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_protocol = IPPROTO_TCP;
  if (passive) hints.ai_flags = AI_PASSIVE;
  addrinfo* result = nullptr;
  const int rc = getaddrinfo(hp.host.empty() ? nullptr : hp.host.c_str(), hp.port.c_str(), &hints, &result);
  if (rc != 0) {
    return absl::UnavailableError(absl::StrCat(
        "cannot resolve '", hp.host, "': ", rc == EAI_SYSTEM ? ErrnoText(errno) : gai_strerror(rc)));
  }
  return AddrInfoPtr(result);
}

std::string PeerName(int fd) {
  sockaddr_storage addr;
  socklen_t len = sizeof(addr);
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return "?";
  char host[NI_MAXHOST];
  char port[NI_MAXSERV];
  if (getnameinfo(reinterpret_cast<sockaddr*>(&addr), len, host, sizeof(host), port, sizeof(port),
                  NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
    return "?";
  }
  return addr.ss_family == AF_INET6 ? absl::StrCat("[", host, "]:", port) : absl::StrCat(host, ":", port);
}

// Every connection: no Nagle delay (a batch must leave at once), keepalive and a bound on unacknowledged
// data, so that a vanished host is noticed (see kUserTimeoutMs).
void ConfigureConnection(int fd) {
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &kKeepIdleSeconds, sizeof(kKeepIdleSeconds));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &kKeepIntervalSeconds, sizeof(kKeepIntervalSeconds));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &kKeepCount, sizeof(kKeepCount));
  setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &kUserTimeoutMs, sizeof(kUserTimeoutMs));
}

// Sends one whole frame on a non-blocking socket. Fails with UNAVAILABLE when the connection errors or
// accepts no byte for `stall_timeout`.
absl::Status SendFrame(int fd, uint32_t kind, absl::string_view body, absl::Duration stall_timeout) {
  char header[kHeaderBytes];
  PutU32(kind, header);
  PutU64(body.size(), header + 4);
  size_t header_left = sizeof(header);
  size_t body_left = body.size();
  while (header_left + body_left > 0) {
    iovec iov[2];
    int iovcnt = 0;
    if (header_left > 0) {
      iov[iovcnt].iov_base = header + (sizeof(header) - header_left);
      iov[iovcnt].iov_len = header_left;
      ++iovcnt;
    }
    if (body_left > 0) {
      iov[iovcnt].iov_base = const_cast<char*>(body.data() + (body.size() - body_left));
      iov[iovcnt].iov_len = body_left;
      ++iovcnt;
    }
    msghdr msg;
    std::memset(&msg, 0, sizeof(msg));
    msg.msg_iov = iov;
    msg.msg_iovlen = iovcnt;
    const ssize_t sent = sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (sent < 0) {
      const int err = errno;
      if (err == EINTR) continue;
      if (err != EAGAIN && err != EWOULDBLOCK) return absl::UnavailableError(ErrnoText(err));
      pollfd p = {fd, POLLOUT, 0};
      const int ready = poll(&p, 1, PollTimeoutMs(absl::Now() + stall_timeout));
      if (ready < 0 && errno != EINTR) return absl::UnavailableError(ErrnoText(errno));
      if (ready == 0) {
        return absl::UnavailableError(
            absl::StrCat("no progress sending for ", absl::FormatDuration(stall_timeout), " (peer stalled)"));
      }
      continue;
    }
    size_t n = static_cast<size_t>(sent);
    const size_t from_header = std::min(n, header_left);
    header_left -= from_header;
    n -= from_header;
    body_left -= n;
  }
  return absl::OkStatus();
}

// Reads exactly `size` bytes. UNAVAILABLE when the peer closed or the connection failed, DEADLINE_EXCEEDED
// at `deadline`, CANCELLED when `wake_fd` (if >= 0) turns readable (the channel is being destroyed).
absl::Status RecvAll(int fd, char* out, int64_t size, absl::Time deadline, int wake_fd) {
  int64_t got = 0;
  while (got < size) {
    pollfd p[2] = {{fd, POLLIN, 0}, {wake_fd, POLLIN, 0}};
    const int ready = poll(p, wake_fd >= 0 ? 2 : 1, PollTimeoutMs(deadline));
    if (ready < 0) {
      if (errno == EINTR) continue;
      return absl::UnavailableError(ErrnoText(errno));
    }
    if (ready == 0) return absl::DeadlineExceededError("timed out");
    if (wake_fd >= 0 && p[1].revents != 0) return absl::CancelledError("the channel is closing");
    if (p[0].revents == 0) continue;
    const ssize_t n = recv(fd, out + got, static_cast<size_t>(size - got), MSG_DONTWAIT);
    if (n == 0) return absl::UnavailableError("connection closed by the peer");
    if (n < 0) {
      const int err = errno;
      if (err == EINTR || err == EAGAIN || err == EWOULDBLOCK) continue;
      return absl::UnavailableError(ErrnoText(err));
    }
    got += n;
  }
  return absl::OkStatus();
}

struct Frame {
  uint32_t kind = 0;
  std::string body;
};

// One frame; INTERNAL for an unknown kind or a length over kMaxFrameBytes (nothing is allocated for it).
absl::StatusOr<Frame> ReadFrame(int fd, absl::Time deadline, int wake_fd) {
  char header[kHeaderBytes];
  SCORED_RETURN_IF_ERROR(RecvAll(fd, header, kHeaderBytes, deadline, wake_fd));
  Frame frame;
  frame.kind = GetU32(header);
  const uint64_t length = GetU64(header + 4);
  if (frame.kind < kKindHello || frame.kind > kKindReject) {
    return absl::InternalError(absl::StrCat("protocol error: unknown frame kind ", frame.kind));
  }
  if (length > static_cast<uint64_t>(kMaxFrameBytes)) {
    return absl::InternalError(absl::StrCat("protocol error: ", KindName(frame.kind), " frame of ", length,
                                            " bytes exceeds the limit of ", kMaxFrameBytes, " bytes"));
  }
  frame.body.resize(length);
  SCORED_RETURN_IF_ERROR(RecvAll(fd, frame.body.data(), static_cast<int64_t>(length), deadline, wake_fd));
  return frame;
}

std::string EncodeHello(int node_rank, int nnodes) {
  std::string body(kHelloBytes, '\0');
  PutU32(kHelloMagic, body.data());
  PutU32(kProtocolVersion, body.data() + 4);
  PutU32(static_cast<uint32_t>(node_rank), body.data() + 8);
  PutU32(static_cast<uint32_t>(nnodes), body.data() + 12);
  return body;
}

// Whether a connected TCP socket is connected to itself: a connect() to a local port nobody listens on can
// pick that very port as its source and "succeed" (TCP simultaneous open), which would also keep the
// leader from binding the port.
bool ConnectedToItself(int fd) {
  sockaddr_storage local, peer;
  socklen_t local_len = sizeof(local), peer_len = sizeof(peer);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_len) != 0 ||
      getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_len) != 0) {
    return false;
  }
  if (local.ss_family != peer.ss_family) return false;
  if (local.ss_family == AF_INET) {
    const auto& a = reinterpret_cast<const sockaddr_in&>(local);
    const auto& b = reinterpret_cast<const sockaddr_in&>(peer);
    return a.sin_port == b.sin_port && a.sin_addr.s_addr == b.sin_addr.s_addr;
  }
  if (local.ss_family == AF_INET6) {
    const auto& a = reinterpret_cast<const sockaddr_in6&>(local);
    const auto& b = reinterpret_cast<const sockaddr_in6&>(peer);
    return a.sin6_port == b.sin6_port && std::memcmp(&a.sin6_addr, &b.sin6_addr, sizeof(a.sin6_addr)) == 0;
  }
  return false;
}

// Non-blocking connect to one address, bounded by `deadline`. Returns the connected socket.
absl::StatusOr<ScopedFd> ConnectOnce(const addrinfo* ai, absl::Time deadline) {
  ScopedFd fd(socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol));
  if (!fd.valid()) return absl::UnavailableError(absl::StrCat("socket: ", ErrnoText(errno)));
  if (connect(fd.get(), ai->ai_addr, ai->ai_addrlen) == 0) {
    if (ConnectedToItself(fd.get())) return absl::UnavailableError("connected to itself (no listener yet)");
    return fd;
  }
  if (errno != EINPROGRESS && errno != EINTR) return absl::UnavailableError(ErrnoText(errno));
  while (true) {
    pollfd p = {fd.get(), POLLOUT, 0};
    const int ready = poll(&p, 1, PollTimeoutMs(deadline));
    if (ready < 0) {
      if (errno == EINTR) continue;
      return absl::UnavailableError(ErrnoText(errno));
    }
    if (ready == 0) return absl::UnavailableError("connect timed out");
    break;
  }
  int err = 0;
  socklen_t len = sizeof(err);
  if (getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
  if (err != 0) return absl::UnavailableError(ErrnoText(err));
  if (ConnectedToItself(fd.get())) return absl::UnavailableError("connected to itself (no listener yet)");
  return fd;
}

// Leader side of the join: a connection accepted but whose hello is not complete yet.
struct PendingJoin {
  ScopedFd fd;
  std::string peer;
  std::string buffer;  // the first kHeaderBytes + kHelloBytes bytes received
};

}  // namespace

struct ControlChannel::Impl {
  bool is_leader = false;
  int nnodes = 0;
  int node_rank = 0;
  int port = 0;
  std::string address;
  std::string payload;
  ControlChannelOptions options;
  // Leader: [nnodes], index = node rank of the follower ([0] unused). Follower: [1], the leader.
  std::vector<ScopedFd> peers;
  // Self-pipe: written once by the destructor to wake the reader and watcher threads.
  ScopedFd wake_read;
  ScopedFd wake_write;

  absl::Mutex mu;
  bool stopping ABSL_GUARDED_BY(mu) = false;
  bool watching ABSL_GUARDED_BY(mu) = false;
  // Leader: Shutdown() was called (connections closing after it are no loss).
  bool shutdown_sent ABSL_GUARDED_BY(mu) = false;
  // Leader: the first failure of Broadcast() (the channel is broken from then on).
  absl::Status broken ABSL_GUARDED_BY(mu);
  // Follower: messages received and not yet taken by Receive().
  std::deque<std::string> inbox ABSL_GUARDED_BY(mu);
  // Follower: OK while the leader is connected; CANCELLED after its shutdown; UNAVAILABLE or INTERNAL.
  absl::Status end ABSL_GUARDED_BY(mu);

  std::thread reader;   // follower: reads the leader's frames into `inbox`
  std::thread watcher;  // WatchPeers()

  void ReaderLoop();
  void WatchLeader(const std::function<void(const absl::Status&)>& on_lost);
  void WatchFollowers(const std::function<void(const absl::Status&)>& on_lost);
};

void ControlChannel::Impl::ReaderLoop() {
  const int fd = peers[0].get();
  absl::Status end_status;
  while (true) {
    absl::StatusOr<Frame> frame = ReadFrame(fd, absl::InfiniteFuture(), wake_read.get());
    if (!frame.ok()) {
      if (absl::IsCancelled(frame.status())) {
        end_status = absl::UnavailableError("the control channel was closed on this side");
      } else if (absl::IsInternal(frame.status())) {
        end_status = absl::InternalError(
            absl::StrCat("from the leader (node rank 0) at ", address, ": ", frame.status().message()));
      } else {
        end_status =
            absl::UnavailableError(absl::StrCat("lost the leader (node rank 0) at ", address,
                                                " without a clean shutdown: ", frame.status().message()));
      }
      break;
    }
    if (frame->kind == kKindMessage) {
      absl::MutexLock lock(&mu);
      inbox.push_back(std::move(frame->body));
      continue;
    }
    if (frame->kind == kKindShutdown) {
      end_status = absl::CancelledError("the leader shut the control channel down");
      break;
    }
    end_status = absl::InternalError(absl::StrCat("from the leader (node rank 0) at ", address,
                                                  ": protocol error: unexpected ", KindName(frame->kind),
                                                  " frame after the bootstrap"));
    break;
  }
  absl::MutexLock lock(&mu);
  end = end_status;
}

void ControlChannel::Impl::WatchLeader(const std::function<void(const absl::Status&)>& on_lost) {
  absl::Status lost;
  {
    absl::MutexLock lock(&mu);
    auto done = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return stopping || !end.ok(); };
    mu.Await(absl::Condition(&done));
    if (stopping || absl::IsCancelled(end)) return;
    lost = absl::UnavailableError(end.message());
  }
  on_lost(lost);
}

void ControlChannel::Impl::WatchFollowers(const std::function<void(const absl::Status&)>& on_lost) {
  const int timeout_ms = std::max(1, static_cast<int>(absl::ToInt64Milliseconds(options.watch_interval)));
  std::vector<pollfd> fds;
  std::vector<int> ranks;
  for (int rank = 1; rank < nnodes; ++rank) {
    fds.push_back({peers[rank].get(), POLLIN, 0});
    ranks.push_back(rank);
  }
  fds.push_back({wake_read.get(), POLLIN, 0});
  while (true) {
    absl::Status lost;
    {
      absl::MutexLock lock(&mu);
      if (stopping || shutdown_sent) return;
      if (!broken.ok()) lost = broken;
    }
    if (lost.ok()) {
      for (pollfd& p : fds) p.revents = 0;
      const int ready = poll(fds.data(), fds.size(), timeout_ms);
      if (ready < 0 && errno != EINTR) {
        lost = absl::UnavailableError(absl::StrCat("watching the followers: poll: ", ErrnoText(errno)));
      }
      if (fds.back().revents != 0) return;
      for (size_t i = 0; ready > 0 && lost.ok() && i + 1 < fds.size(); ++i) {
        if (fds[i].revents == 0) continue;
        // Followers never send after their hello: readability means end of stream or an error.
        char byte;
        const ssize_t n = recv(fds[i].fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) continue;
        const std::string why = n == 0  ? std::string("connection closed (process exited or was killed)")
                                : n < 0 ? ErrnoText(errno)
                                        : std::string("protocol error: unexpected data from a follower");
        lost = absl::UnavailableError(absl::StrCat("lost node rank ", ranks[i], ": ", why));
      }
    }
    if (lost.ok()) continue;
    {
      absl::MutexLock lock(&mu);
      if (stopping || shutdown_sent) return;
      if (broken.ok()) broken = lost;
    }
    on_lost(lost);
    return;
  }
}

ControlChannel::ControlChannel(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

ControlChannel::~ControlChannel() {
  {
    absl::MutexLock lock(&impl_->mu);
    impl_->stopping = true;
  }
  const char byte = 1;
  while (write(impl_->wake_write.get(), &byte, 1) < 0 && errno == EINTR) {
  }
  if (impl_->reader.joinable()) impl_->reader.join();
  if (impl_->watcher.joinable()) impl_->watcher.join();
}

namespace {

absl::Status MakeWakePipe(ScopedFd* read_end, ScopedFd* write_end) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) {
    return absl::InternalError(absl::StrCat("pipe2: ", ErrnoText(errno)));
  }
  *read_end = ScopedFd(fds[0]);
  *write_end = ScopedFd(fds[1]);
  return absl::OkStatus();
}

// Tells the refused follower (and those already joined) why the join failed, so they stop at once with
// FAILED_PRECONDITION instead of waiting for a payload that never comes.
void RejectAll(const std::string& why, int offending_fd, const std::vector<ScopedFd>& joined) {
  if (offending_fd >= 0) SendFrame(offending_fd, kKindReject, why, kRejectSendTimeout).IgnoreError();
  for (const ScopedFd& fd : joined) {
    if (fd.valid()) SendFrame(fd.get(), kKindReject, why, kRejectSendTimeout).IgnoreError();
  }
}

absl::StatusOr<ScopedFd> Listen(const std::string& address, const HostPort& hp) {
  SCORED_ASSIGN_OR_RETURN(AddrInfoPtr list, Resolve(hp, /*passive=*/true));
  std::string last_error = "no address";
  // With no host, prefer an IPv6 wildcard socket that also accepts IPv4 (dual stack), else IPv4.
  std::vector<const addrinfo*> candidates;
  for (const addrinfo* ai = list.get(); ai != nullptr; ai = ai->ai_next) candidates.push_back(ai);
  if (hp.host.empty()) {
    std::stable_sort(candidates.begin(), candidates.end(), [](const addrinfo* a, const addrinfo* b) {
      return a->ai_family == AF_INET6 && b->ai_family != AF_INET6;
    });
  }
  for (const addrinfo* ai : candidates) {
    ScopedFd fd(socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol));
    if (!fd.valid()) {
      last_error = ErrnoText(errno);
      continue;
    }
    const int one = 1;
    const int zero = 0;
    // A restarted leader must be able to bind the port again while old connections sit in TIME_WAIT.
    setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (ai->ai_family == AF_INET6) setsockopt(fd.get(), IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
    if (bind(fd.get(), ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd.get(), SOMAXCONN) != 0) {
      last_error = ErrnoText(errno);
      continue;
    }
    return fd;
  }
  return absl::UnavailableError(absl::StrCat("cannot listen on ", address, ": ", last_error));
}

int LocalPort(int fd) {
  sockaddr_storage addr;
  socklen_t len = sizeof(addr);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return 0;
  if (addr.ss_family == AF_INET) return ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  if (addr.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port);
  return 0;
}

}  // namespace

absl::StatusOr<std::string> LeaderListenAddress(absl::string_view rendezvous) {
  SCORED_ASSIGN_OR_RETURN(HostPort hp, SplitHostPort(rendezvous));
  if (hp.port_number == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("malformed rendezvous address '", rendezvous, "': the port must be > 0"));
  }
  return absl::StrCat(":", hp.port);
}

absl::StatusOr<std::unique_ptr<ControlChannel>> ControlChannel::Leader(
    absl::string_view address, int nnodes, absl::string_view payload, const ControlChannelOptions& options,
    const std::function<void(int port)>& on_listening) {
  if (nnodes < 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a control channel needs nnodes >= 2 (one leader and at least one follower), got ", nnodes));
  }
  if (static_cast<int64_t>(payload.size()) > kMaxFrameBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("payload of ", payload.size(), " bytes exceeds ", kMaxFrameBytes));
  }
  SCORED_ASSIGN_OR_RETURN(HostPort hp, SplitHostPort(address));
  auto impl = std::make_unique<Impl>();
  impl->is_leader = true;
  impl->nnodes = nnodes;
  impl->node_rank = 0;
  impl->address = std::string(address);
  impl->payload = std::string(payload);
  impl->options = options;
  impl->peers.resize(nnodes);
  SCORED_RETURN_IF_ERROR(MakeWakePipe(&impl->wake_read, &impl->wake_write));
  SCORED_ASSIGN_OR_RETURN(ScopedFd listener, Listen(impl->address, hp));
  impl->port = LocalPort(listener.get());
  SCORED_LOG(INFO) << "control channel: node rank 0 of " << nnodes << " listening on " << address << " (port "
                   << impl->port << "), waiting for " << nnodes - 1 << " follower(s)";
  if (on_listening) on_listening(impl->port);

  const absl::Time deadline = absl::Now() + options.connect_timeout;
  std::vector<PendingJoin> pending;
  std::vector<std::string> joined_from(nnodes);
  int joined = 0;
  while (joined < nnodes - 1) {
    std::vector<pollfd> fds;
    fds.push_back({listener.get(), POLLIN, 0});
    for (const PendingJoin& p : pending) fds.push_back({p.fd.get(), POLLIN, 0});
    const int timeout_ms = PollTimeoutMs(deadline);
    const int ready = timeout_ms == 0 ? 0 : poll(fds.data(), fds.size(), timeout_ms);
    if (ready < 0) {
      if (errno == EINTR) continue;
      return absl::InternalError(absl::StrCat("control channel: poll: ", ErrnoText(errno)));
    }
    if (ready == 0 && absl::Now() >= deadline) {
      std::vector<int> missing;
      for (int rank = 1; rank < nnodes; ++rank) {
        if (!impl->peers[rank].valid()) missing.push_back(rank);
      }
      RejectAll("the leader gave up waiting for the other followers", -1, impl->peers);
      return absl::DeadlineExceededError(absl::StrCat("node rank(s) ", absl::StrJoin(missing, ", "), " of ",
                                                      nnodes, " did not join the control channel on ",
                                                      address, " within ",
                                                      absl::FormatDuration(options.connect_timeout), " (",
                                                      joined, " of ", nnodes - 1, " follower(s) joined)"));
    }
    // Hellos first (fds[1..] match `pending` as it was when polled), then new connections.
    std::vector<PendingJoin> still_pending;
    for (size_t i = 0; i < pending.size(); ++i) {
      PendingJoin& p = pending[i];
      if (fds[i + 1].revents == 0) {
        still_pending.push_back(std::move(p));
        continue;
      }
      char buf[kHeaderBytes + kHelloBytes];
      const size_t want = sizeof(buf) - p.buffer.size();
      const ssize_t n = recv(p.fd.get(), buf, want, MSG_DONTWAIT);
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
        still_pending.push_back(std::move(p));
        continue;
      }
      if (n <= 0) {
        SCORED_LOG(WARNING) << "control channel: connection from " << p.peer << " closed before its hello"
                            << (n < 0 ? absl::StrCat(": ", ErrnoText(errno)) : std::string());
        continue;
      }
      p.buffer.append(buf, static_cast<size_t>(n));
      if (p.buffer.size() >= static_cast<size_t>(kHeaderBytes)) {
        const uint32_t kind = GetU32(p.buffer.data());
        const uint64_t length = GetU64(p.buffer.data() + 4);
        if (kind != kKindHello || length != static_cast<uint64_t>(kHelloBytes)) {
          // Not a scored follower (a port scanner, a health checker): drop it, keep waiting.
          SCORED_LOG(WARNING) << "control channel: dropped a connection from " << p.peer
                              << " that is not a follower (frame kind " << kind << ", length " << length
                              << ")";
          continue;
        }
      }
      if (p.buffer.size() < static_cast<size_t>(kHeaderBytes + kHelloBytes)) {
        still_pending.push_back(std::move(p));
        continue;
      }
      const char* hello = p.buffer.data() + kHeaderBytes;
      if (GetU32(hello) != kHelloMagic) {
        SCORED_LOG(WARNING) << "control channel: dropped a connection from " << p.peer
                            << " (bad hello magic)";
        continue;
      }
      const uint32_t version = GetU32(hello + 4);
      const int64_t rank = GetU32(hello + 8);
      const int64_t their_nnodes = GetU32(hello + 12);
      std::string refusal;
      if (version != kProtocolVersion) {
        refusal =
            absl::StrCat("node rank ", rank, " at ", p.peer, " speaks control protocol version ", version,
                         ", the leader speaks ", kProtocolVersion, " (run the same scored build everywhere)");
      } else if (their_nnodes != nnodes) {
        refusal =
            absl::StrCat("node rank ", rank, " at ", p.peer, " was started with --nnodes=", their_nnodes,
                         " but the leader has --nnodes=", nnodes);
      } else if (rank < 1 || rank >= nnodes) {
        refusal =
            absl::StrCat("a follower at ", p.peer, " says node rank ", rank, ", outside [1, ", nnodes, ")");
      } else if (impl->peers[rank].valid()) {
        refusal = absl::StrCat("node rank ", rank, " joined twice (from ", joined_from[rank], " and from ",
                               p.peer, "): every process needs its own --node_rank");
      }
      if (!refusal.empty()) {
        RejectAll(refusal, p.fd.get(), impl->peers);
        return absl::FailedPreconditionError(absl::StrCat("control channel: ", refusal));
      }
      ConfigureConnection(p.fd.get());
      joined_from[rank] = p.peer;
      impl->peers[rank] = std::move(p.fd);
      ++joined;
      SCORED_LOG(INFO) << "control channel: node rank " << rank << " joined from " << joined_from[rank]
                       << " (" << joined << " of " << nnodes - 1 << ")";
    }
    pending = std::move(still_pending);
    if (fds[0].revents != 0) {
      ScopedFd conn(accept4(listener.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
      if (conn.valid()) {
        PendingJoin p;
        p.peer = PeerName(conn.get());
        p.fd = std::move(conn);
        pending.push_back(std::move(p));
      }
    }
  }
  // Everyone is in: no more joins (a late duplicate is refused by the kernel, not left hanging).
  listener.Reset();
  pending.clear();
  for (int rank = 1; rank < nnodes; ++rank) {
    absl::Status sent = SendFrame(impl->peers[rank].get(), kKindPayload, impl->payload, options.peer_timeout);
    if (!sent.ok()) {
      return absl::UnavailableError(
          absl::StrCat("sending the bootstrap payload to node rank ", rank, ": ", sent.message()));
    }
  }
  SCORED_LOG(INFO) << "control channel: all " << nnodes - 1 << " follower(s) joined";
  return std::unique_ptr<ControlChannel>(new ControlChannel(std::move(impl)));
}

absl::StatusOr<std::unique_ptr<ControlChannel>> ControlChannel::Follower(
    absl::string_view address, int nnodes, int node_rank, const ControlChannelOptions& options) {
  if (nnodes < 2) {
    return absl::InvalidArgumentError(absl::StrCat("a follower needs nnodes >= 2, got ", nnodes));
  }
  if (node_rank < 1 || node_rank >= nnodes) {
    return absl::InvalidArgumentError(
        absl::StrCat("a follower's node rank must be in [1, ", nnodes, "), got ", node_rank));
  }
  SCORED_ASSIGN_OR_RETURN(HostPort hp, SplitHostPort(address));
  if (hp.host.empty() || hp.port_number == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("malformed leader address '", address, "': a follower needs HOST:PORT with a port > 0"));
  }
  auto impl = std::make_unique<Impl>();
  impl->is_leader = false;
  impl->nnodes = nnodes;
  impl->node_rank = node_rank;
  impl->address = std::string(address);
  impl->options = options;
  SCORED_RETURN_IF_ERROR(MakeWakePipe(&impl->wake_read, &impl->wake_write));

  const absl::Time deadline = absl::Now() + options.connect_timeout;
  ScopedFd fd;
  std::string last_error;
  bool logged_wait = false;
  while (true) {
    absl::StatusOr<AddrInfoPtr> list = Resolve(hp, /*passive=*/false);
    if (!list.ok()) {
      last_error = std::string(list.status().message());
    } else {
      for (const addrinfo* ai = list->get(); ai != nullptr && !fd.valid(); ai = ai->ai_next) {
        absl::StatusOr<ScopedFd> conn = ConnectOnce(ai, std::min(deadline, absl::Now() + kConnectAttempt));
        if (conn.ok()) {
          fd = std::move(*conn);
        } else {
          last_error = std::string(conn.status().message());
        }
      }
    }
    if (fd.valid()) break;
    const absl::Time now = absl::Now();
    if (now >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("node rank ", node_rank, " could not reach the leader at ", address, " within ",
                       absl::FormatDuration(options.connect_timeout), " (last error: ", last_error, ")"));
    }
    if (!logged_wait) {
      SCORED_LOG(INFO) << "control channel: node rank " << node_rank << " waiting for the leader at "
                       << address << " (" << last_error << "); retrying for up to "
                       << absl::FormatDuration(options.connect_timeout);
      logged_wait = true;
    }
    absl::SleepFor(std::min(kConnectRetry, deadline - now));
  }
  ConfigureConnection(fd.get());
  absl::Status hello = SendFrame(fd.get(), kKindHello, EncodeHello(node_rank, nnodes), options.peer_timeout);
  if (!hello.ok()) {
    return absl::UnavailableError(absl::StrCat(
        "node rank ", node_rank, ": sending the hello to the leader at ", address, ": ", hello.message()));
  }
  SCORED_LOG(INFO) << "control channel: node rank " << node_rank << " of " << nnodes
                   << " connected to the leader at " << address << ", waiting for the other followers";
  absl::StatusOr<Frame> frame = ReadFrame(fd.get(), deadline, -1);
  if (!frame.ok()) {
    const absl::Status& s = frame.status();
    if (absl::IsDeadlineExceeded(s)) {
      return absl::DeadlineExceededError(
          absl::StrCat("node rank ", node_rank, " reached the leader at ", address,
                       " but got no bootstrap payload within ", absl::FormatDuration(options.connect_timeout),
                       " (have all ", nnodes - 1, " followers been started?)"));
    }
    if (absl::IsInternal(s)) {
      return absl::InternalError(absl::StrCat("from the leader at ", address, ": ", s.message()));
    }
    return absl::UnavailableError(absl::StrCat(
        "the leader at ", address, " went away before sending the bootstrap payload: ", s.message()));
  }
  if (frame->kind == kKindReject) {
    return absl::FailedPreconditionError(
        absl::StrCat("the leader at ", address, " refused node rank ", node_rank, ": ", frame->body));
  }
  if (frame->kind != kKindPayload) {
    return absl::InternalError(absl::StrCat("from the leader at ", address, ": protocol error: a ",
                                            KindName(frame->kind), " frame before the bootstrap payload"));
  }
  impl->payload = std::move(frame->body);
  impl->peers.push_back(std::move(fd));
  Impl* raw = impl.get();
  impl->reader = std::thread([raw] { raw->ReaderLoop(); });
  return std::unique_ptr<ControlChannel>(new ControlChannel(std::move(impl)));
}

int ControlChannel::node_rank() const { return impl_->node_rank; }
int ControlChannel::nnodes() const { return impl_->nnodes; }
int ControlChannel::port() const { return impl_->port; }
const std::string& ControlChannel::payload() const { return impl_->payload; }

absl::Status ControlChannel::Broadcast(absl::string_view message) {
  if (!impl_->is_leader) return absl::FailedPreconditionError("Broadcast() is for the leader (node rank 0)");
  if (static_cast<int64_t>(message.size()) > kMaxFrameBytes) {
    return absl::InvalidArgumentError(absl::StrCat("message of ", message.size(),
                                                   " bytes exceeds the limit of ", kMaxFrameBytes, " bytes"));
  }
  {
    absl::MutexLock lock(&impl_->mu);
    if (impl_->shutdown_sent) return absl::FailedPreconditionError("the control channel was shut down");
    if (!impl_->broken.ok()) return impl_->broken;
  }
  for (int rank = 1; rank < impl_->nnodes; ++rank) {
    absl::Status sent =
        SendFrame(impl_->peers[rank].get(), kKindMessage, message, impl_->options.peer_timeout);
    if (!sent.ok()) {
      absl::Status failed =
          absl::UnavailableError(absl::StrCat("lost node rank ", rank, ": ", sent.message()));
      absl::MutexLock lock(&impl_->mu);
      if (impl_->broken.ok()) impl_->broken = failed;
      return impl_->broken;
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ControlChannel::Receive() {
  if (impl_->is_leader) return absl::FailedPreconditionError("Receive() is for followers (node rank > 0)");
  absl::MutexLock lock(&impl_->mu);
  auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(impl_->mu) {
    return !impl_->inbox.empty() || !impl_->end.ok();
  };
  impl_->mu.Await(absl::Condition(&ready));
  if (!impl_->inbox.empty()) {
    std::string message = std::move(impl_->inbox.front());
    impl_->inbox.pop_front();
    return message;
  }
  return impl_->end;
}

absl::Status ControlChannel::Shutdown() {
  if (!impl_->is_leader) return absl::OkStatus();
  {
    absl::MutexLock lock(&impl_->mu);
    if (impl_->shutdown_sent) return absl::OkStatus();
    impl_->shutdown_sent = true;
  }
  absl::Status first_error;
  for (int rank = 1; rank < impl_->nnodes; ++rank) {
    absl::Status sent = SendFrame(impl_->peers[rank].get(), kKindShutdown, "", impl_->options.peer_timeout);
    if (!sent.ok() && first_error.ok()) {
      first_error =
          absl::UnavailableError(absl::StrCat("telling node rank ", rank, " to shut down: ", sent.message()));
    }
  }
  return first_error;
}

void ControlChannel::WatchPeers(std::function<void(const absl::Status&)> on_lost) {
  {
    absl::MutexLock lock(&impl_->mu);
    if (impl_->watching || impl_->stopping) return;
    impl_->watching = true;
  }
  Impl* impl = impl_.get();
  if (impl->is_leader) {
    impl->watcher = std::thread([impl, on_lost = std::move(on_lost)] { impl->WatchFollowers(on_lost); });
  } else {
    impl->watcher = std::thread([impl, on_lost = std::move(on_lost)] { impl->WatchLeader(on_lost); });
  }
}

absl::StatusOr<std::unique_ptr<ControlTransport>> TcpControlTransportFactory::Leader(
    absl::string_view rendezvous, int nnodes, absl::string_view payload) {
  SCORED_ASSIGN_OR_RETURN(const std::string listen, LeaderListenAddress(rendezvous));
  SCORED_ASSIGN_OR_RETURN(std::unique_ptr<ControlChannel> channel,
                          ControlChannel::Leader(listen, nnodes, payload, options_));
  return std::unique_ptr<ControlTransport>(std::move(channel));
}

absl::StatusOr<std::unique_ptr<ControlTransport>> TcpControlTransportFactory::Follower(
    absl::string_view rendezvous, int nnodes, int node_rank) {
  SCORED_ASSIGN_OR_RETURN(std::unique_ptr<ControlChannel> channel,
                          ControlChannel::Follower(rendezvous, nnodes, node_rank, options_));
  return std::unique_ptr<ControlTransport>(std::move(channel));
}

}  // namespace scored::dist
