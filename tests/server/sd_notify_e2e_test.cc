// Readiness via systemd's notify protocol (server/sd_notify.h): the real `scored` started with
// NOTIFY_SOCKET pointing at a unix datagram socket this test binds sends READY=1 once it serves (health is
// SERVING by then) and STOPPING=1 when SIGTERM starts the drain, from its own pid (systemd's
// NotifyAccess=main checks the sender). Plus NotifyServiceManager's errors, without a server.
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstddef>
#include <cstring>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/sd_notify.h"
#include "tests/server/scored_process.h"

namespace scored {
namespace {

using ::testing::HasSubstr;
using testing::HealthStatus;

// A bound unix datagram socket receiving with sender credentials (SO_PASSCRED).
class NotifyListener {
 public:
  // `name`: a path, or "@name" for the abstract namespace (the NOTIFY_SOCKET spelling).
  explicit NotifyListener(const std::string& name) : name_(name) {
    fd_ = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, name.data(), name.size());
    if (name[0] == '@') addr.sun_path[0] = '\0';
    const int one = 1;
    bound_ = fd_ >= 0 && setsockopt(fd_, SOL_SOCKET, SO_PASSCRED, &one, sizeof(one)) == 0 &&
             bind(fd_, reinterpret_cast<const sockaddr*>(&addr),
                  static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + name.size())) == 0;
  }
  ~NotifyListener() {
    if (fd_ >= 0) close(fd_);
    if (name_[0] == '/') unlink(name_.c_str());
  }
  bool bound() const { return bound_; }

  struct Message {
    std::string text;
    pid_t sender = 0;
  };
  // Blocks in recvmsg until a datagram arrives or `timeout` passes (DEADLINE_EXCEEDED).
  absl::StatusOr<Message> Receive(absl::Duration timeout) {
    const timeval tv = absl::ToTimeval(timeout);
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    char data[4096];
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(ucred))];
    iovec iov{data, sizeof(data)};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    const ssize_t n = recvmsg(fd_, &msg, 0);
    if (n < 0) return absl::DeadlineExceededError(absl::StrCat("recvmsg: ", std::strerror(errno)));
    Message m;
    m.text.assign(data, static_cast<size_t>(n));
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_CREDENTIALS) {
        ucred cred;
        std::memcpy(&cred, CMSG_DATA(c), sizeof(cred));
        m.sender = cred.pid;
      }
    }
    return m;
  }

 private:
  std::string name_;
  int fd_ = -1;
  bool bound_ = false;
};

void ExpectReadyThenStopping(const std::string& socket_name) {
  NotifyListener listener(socket_name);
  ASSERT_TRUE(listener.bound()) << socket_name << ": " << std::strerror(errno);
  ASSERT_EQ(setenv("NOTIFY_SOCKET", socket_name.c_str(), 1), 0);
  testing::ScoredProcessOptions opts;
  opts.args = {"--model=" + testing::StoriesModelDir(), "--backend=cpu"};
  opts.wait_for_serving = false;
  auto proc = testing::ScoredProcess::Start(opts);
  unsetenv("NOTIFY_SOCKET");
  ASSERT_TRUE(proc.ok()) << proc.status();

  auto ready = listener.Receive(absl::Seconds(120));
  ASSERT_TRUE(ready.ok()) << ready.status() << "\n" << (*proc)->ReadLog();
  EXPECT_THAT(ready->text, HasSubstr("READY=1"));
  EXPECT_EQ(ready->sender, (*proc)->pid());
  // Ready means serving: health says so at once, no wait.
  auto health = testing::CheckHealth((*proc)->grpc_address(), "");
  ASSERT_TRUE(health.ok()) << health.status();
  EXPECT_EQ(*health, HealthStatus::kServing);

  ASSERT_TRUE((*proc)->SendSignal(SIGTERM).ok());
  auto stopping = listener.Receive(absl::Seconds(60));
  ASSERT_TRUE(stopping.ok()) << stopping.status() << "\n" << (*proc)->ReadLog();
  EXPECT_THAT(stopping->text, HasSubstr("STOPPING=1"));
  EXPECT_EQ(stopping->sender, (*proc)->pid());
  auto code = (*proc)->Wait(absl::Seconds(60));
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 0);
}

TEST(SdNotifyE2eTest, ReadyOnceServingAndStoppingOnDrainToAPathSocket) {
  ExpectReadyThenStopping(absl::StrCat(::testing::TempDir(), "/notify.", getpid(), ".sock"));
}

TEST(SdNotifyE2eTest, ReadyAndStoppingToAnAbstractSocket) {
  ExpectReadyThenStopping(absl::StrCat("@scored-notify-test.", getpid()));
}

TEST(SdNotifyTest, NothingToDoWithoutNotifySocket) {
  unsetenv("NOTIFY_SOCKET");
  EXPECT_TRUE(NotifyServiceManager("READY=1").ok());
  ASSERT_EQ(setenv("NOTIFY_SOCKET", "", 1), 0);
  EXPECT_TRUE(NotifyServiceManager("READY=1").ok());
  unsetenv("NOTIFY_SOCKET");
}

TEST(SdNotifyTest, BadOrAbsentSocketIsAnError) {
  ASSERT_EQ(setenv("NOTIFY_SOCKET", "relative/path", 1), 0);
  EXPECT_EQ(NotifyServiceManager("READY=1").code(), absl::StatusCode::kInvalidArgument);
  ASSERT_EQ(setenv("NOTIFY_SOCKET", ("/" + std::string(200, 'x')).c_str(), 1), 0);
  EXPECT_EQ(NotifyServiceManager("READY=1").code(), absl::StatusCode::kInvalidArgument);
  ASSERT_EQ(setenv("NOTIFY_SOCKET", absl::StrCat(::testing::TempDir(), "/absent.sock").c_str(), 1), 0);
  const absl::Status absent = NotifyServiceManager("READY=1");
  EXPECT_EQ(absent.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(absent.message()), HasSubstr("absent.sock"));
  unsetenv("NOTIFY_SOCKET");
}

}  // namespace
}  // namespace scored
