// The gRPC control plane of multi-process tensor parallelism (server/control_service.h) over real sockets
// on the loopback interface, port 0 everywhere (tests never collide): the join, the broadcast, the ends,
// liveness, and the Score service's security (token, TLS, mTLS). Every wait is bounded: a hang fails the
// test instead of stalling CI. Processes that must die by SIGKILL are this binary re-run with a filter
// that selects the child's role (fork + exec: a forked copy of a process that already runs gRPC's
// threads must not use gRPC).
#include "server/control_service.h"

#include <net/if.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <future>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/server/test_certs.h"

namespace scored {
namespace {

using ::testing::HasSubstr;
using TransportOr = absl::StatusOr<std::unique_ptr<dist::ControlTransport>>;

// How long a test waits for something that should take milliseconds before declaring a hang.
constexpr auto kBound = std::chrono::seconds(30);

ControlServiceOptions Fast() {
  ControlServiceOptions o;
  o.join_timeout = absl::Seconds(10);
  o.peer_timeout = absl::Seconds(5);
  o.keepalive_time = absl::Seconds(1);
  o.keepalive_timeout = absl::Seconds(1);
  return o;
}

std::shared_ptr<GrpcControlTransportFactory> MakeFactory(const ControlSecurity& security = ControlSecurity(),
                                                         ControlServiceOptions options = Fast()) {
  absl::StatusOr<std::shared_ptr<GrpcControlTransportFactory>> f =
      GrpcControlTransportFactory::Create(security, options);
  EXPECT_TRUE(f.ok()) << f.status();
  return f.ok() ? *f : nullptr;
}

// A leader running Leader() on its own thread; `port` is known once it listens.
struct LeaderThread {
  std::promise<int> port_promise;
  std::future<TransportOr> result;
  int port = 0;

  LeaderThread(int nnodes, const std::string& payload, const ControlSecurity& security = ControlSecurity(),
               ControlServiceOptions options = Fast(), const std::string& address = "127.0.0.1:0") {
    std::future<int> port_future = port_promise.get_future();
    options.on_listening = [this](int p) { port_promise.set_value(p); };
    std::shared_ptr<GrpcControlTransportFactory> factory = MakeFactory(security, options);
    result = std::async(std::launch::async, [factory, address, nnodes, payload] {
      return factory->Leader(address, nnodes, payload);
    });
    if (port_future.wait_for(kBound) == std::future_status::ready) port = port_future.get();
  }

  TransportOr Get() {
    if (result.wait_for(kBound) != std::future_status::ready)
      return absl::DeadlineExceededError("leader hung");
    return result.get();
  }
};

std::string Loopback(int port) { return absl::StrCat("127.0.0.1:", port); }

std::future<TransportOr> StartFollower(int port, int nnodes, int node_rank,
                                       const ControlSecurity& security = ControlSecurity(),
                                       ControlServiceOptions options = Fast()) {
  std::shared_ptr<GrpcControlTransportFactory> factory = MakeFactory(security, options);
  return std::async(std::launch::async, [factory, port, nnodes, node_rank] {
    return factory->Follower(Loopback(port), nnodes, node_rank);
  });
}

TransportOr GetBounded(std::future<TransportOr>& f) {
  if (f.wait_for(kBound) != std::future_status::ready) return absl::DeadlineExceededError("follower hung");
  return f.get();
}

// A port that nothing listens on right now (a leader bound to it and gone).
int FreePort() {
  int port = 0;
  {
    LeaderThread probe(2, "probe", ControlSecurity(), [] {
      ControlServiceOptions o = Fast();
      o.join_timeout = absl::Milliseconds(1);
      return o;
    }());
    port = probe.port;
    probe.Get().IgnoreError();
  }
  return port;
}

struct Group {
  std::unique_ptr<dist::ControlTransport> leader;
  std::vector<std::unique_ptr<dist::ControlTransport>> followers;  // [nnodes - 1], node rank i + 1
};

Group JoinGroup(int nnodes, const std::string& payload, const ControlSecurity& security = ControlSecurity()) {
  Group g;
  LeaderThread leader(nnodes, payload, security);
  EXPECT_GT(leader.port, 0);
  std::vector<std::future<TransportOr>> futures;
  for (int rank = 1; rank < nnodes; ++rank)
    futures.push_back(StartFollower(leader.port, nnodes, rank, security));
  TransportOr l = leader.Get();
  EXPECT_TRUE(l.ok()) << l.status();
  if (l.ok()) g.leader = std::move(*l);
  for (auto& f : futures) {
    TransportOr c = GetBounded(f);
    EXPECT_TRUE(c.ok()) << c.status();
    if (c.ok()) g.followers.push_back(std::move(*c));
  }
  return g;
}

struct LostProbe {
  absl::Notification fired;
  absl::Status status;
  std::function<void(const absl::Status&)> Callback() {
    return [this](const absl::Status& s) {
      status = s;
      fired.Notify();
    };
  }
};

// --- the join, the broadcast and the ends ---

TEST(ControlServiceTest, MalformedArgumentsAreInvalid) {
  std::shared_ptr<GrpcControlTransportFactory> f = MakeFactory();
  EXPECT_EQ(f->Leader("127.0.0.1:0", 1, "id").status().code(), absl::StatusCode::kInvalidArgument);
  for (const char* address :
       {"127.0.0.1", "127.0.0.1:", "127.0.0.1:99999", "127.0.0.1:x1", "[::1:5", "::1:5"}) {
    EXPECT_EQ(f->Leader(address, 2, "id").status().code(), absl::StatusCode::kInvalidArgument) << address;
    EXPECT_EQ(f->Follower(address, 2, 1).status().code(), absl::StatusCode::kInvalidArgument) << address;
  }
  EXPECT_EQ(f->Follower("127.0.0.1:0", 2, 1).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(f->Follower("127.0.0.1:5", 2, 0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(f->Follower("127.0.0.1:5", 2, 2).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(f->Follower("127.0.0.1:5", 1, 1).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ControlServiceTest, PayloadReachesOneToThreeFollowers) {
  for (int nnodes = 2; nnodes <= 4; ++nnodes) {
    SCOPED_TRACE(nnodes);
    std::string payload(128, '\0');  // binary bytes, NUL included (an NCCL unique id)
    for (size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<char>(i * 7 + nnodes);
    Group g = JoinGroup(nnodes, payload);
    ASSERT_NE(g.leader, nullptr);
    ASSERT_EQ(g.followers.size(), static_cast<size_t>(nnodes - 1));
    EXPECT_EQ(g.leader->node_rank(), 0);
    EXPECT_EQ(g.leader->nnodes(), nnodes);
    EXPECT_EQ(g.leader->payload(), payload);
    for (int i = 0; i < nnodes - 1; ++i) {
      EXPECT_EQ(g.followers[i]->node_rank(), i + 1);
      EXPECT_EQ(g.followers[i]->nnodes(), nnodes);
      EXPECT_EQ(g.followers[i]->payload(), payload);
    }
  }
}

TEST(ControlServiceTest, MessagesArriveInOrderIncludingTenMegabytes) {
  Group g = JoinGroup(4, "id");
  ASSERT_EQ(g.followers.size(), 3u);
  std::string big(10 << 20, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>((i * 2654435761u) >> 13);
  std::vector<std::string> sent = {"first", "", big, "after-big"};
  for (int i = 0; i < 50; ++i) sent.push_back(absl::StrCat("batch ", i));
  std::vector<std::future<std::vector<std::string>>> received;
  for (auto& f : g.followers) {
    dist::ControlTransport* c = f.get();
    received.push_back(std::async(std::launch::async, [c, n = sent.size()] {
      std::vector<std::string> got;
      for (size_t i = 0; i < n; ++i) {
        absl::StatusOr<std::string> m = c->Receive();
        if (!m.ok()) break;
        got.push_back(std::move(*m));
      }
      return got;
    }));
  }
  for (const std::string& m : sent) ASSERT_TRUE(g.leader->Broadcast(m).ok());
  for (auto& r : received) {
    ASSERT_EQ(r.wait_for(kBound), std::future_status::ready);
    const std::vector<std::string> got = r.get();
    ASSERT_EQ(got.size(), sent.size());
    for (size_t i = 0; i < sent.size(); ++i) EXPECT_TRUE(got[i] == sent[i]) << "message " << i;
  }
}

TEST(ControlServiceTest, FollowerStartedBeforeLeaderRetries) {
  const int port = FreePort();
  ASSERT_GT(port, 0);
  std::future<TransportOr> follower = StartFollower(port, 2, 1);
  absl::SleepFor(absl::Milliseconds(600));  // several refused attempts first (this test is about the order)
  LeaderThread leader(2, "late leader", ControlSecurity(), Fast(), Loopback(port));
  EXPECT_EQ(leader.port, port);
  TransportOr l = leader.Get();
  TransportOr f = GetBounded(follower);
  ASSERT_TRUE(l.ok()) << l.status();
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ((*f)->payload(), "late leader");
}

TEST(ControlServiceTest, FollowerGivesUpWhenNoLeader) {
  ControlServiceOptions o = Fast();
  o.join_timeout = absl::Milliseconds(700);
  const absl::Time start = absl::Now();
  TransportOr f = MakeFactory(ControlSecurity(), o)->Follower(Loopback(FreePort()), 2, 1);
  EXPECT_EQ(f.status().code(), absl::StatusCode::kDeadlineExceeded) << f.status();
  EXPECT_THAT(std::string(f.status().message()), HasSubstr("could not reach the leader"));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

TEST(ControlServiceTest, DuplicateNodeRankIsRefused) {
  LeaderThread leader(3, "id");
  std::future<TransportOr> a = StartFollower(leader.port, 3, 1);
  std::future<TransportOr> b = StartFollower(leader.port, 3, 1);
  TransportOr l = leader.Get();
  EXPECT_EQ(l.status().code(), absl::StatusCode::kFailedPrecondition) << l.status();
  EXPECT_THAT(std::string(l.status().message()), HasSubstr("node rank 1 joined twice"));
  for (auto* f : {&a, &b}) {  // both learn why from the leader
    TransportOr c = GetBounded(*f);
    EXPECT_EQ(c.status().code(), absl::StatusCode::kFailedPrecondition) << c.status();
    EXPECT_THAT(std::string(c.status().message()), HasSubstr("joined twice"));
  }
}

TEST(ControlServiceTest, NnodesMismatchIsRefused) {
  LeaderThread leader(2, "id");
  std::future<TransportOr> f = StartFollower(leader.port, 3, 1);
  TransportOr l = leader.Get();
  EXPECT_EQ(l.status().code(), absl::StatusCode::kFailedPrecondition) << l.status();
  EXPECT_THAT(std::string(l.status().message()), HasSubstr("--nnodes=3 but the leader has --nnodes=2"));
  TransportOr c = GetBounded(f);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kFailedPrecondition) << c.status();
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("--nnodes=3 but the leader has --nnodes=2"));
}

TEST(ControlServiceTest, JoinTimeoutNamesTheMissingRanks) {
  ControlServiceOptions o = Fast();
  o.join_timeout = absl::Seconds(1);
  const absl::Time start = absl::Now();
  LeaderThread leader(4, "id", ControlSecurity(), o);
  std::future<TransportOr> two = StartFollower(leader.port, 4, 2);
  TransportOr l = leader.Get();
  EXPECT_EQ(l.status().code(), absl::StatusCode::kDeadlineExceeded) << l.status();
  EXPECT_THAT(std::string(l.status().message()), HasSubstr("node rank(s) 1, 3 of 4 did not join"));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  TransportOr c = GetBounded(two);
  EXPECT_FALSE(c.ok());
}

TEST(ControlServiceTest, ReceiveIsCancelledAfterShutdown) {
  Group g = JoinGroup(3, "id");
  ASSERT_EQ(g.followers.size(), 2u);
  ASSERT_TRUE(g.leader->Broadcast("last batch").ok());
  ASSERT_TRUE(g.leader->Shutdown().ok());
  EXPECT_TRUE(g.leader->Shutdown().ok());  // idempotent
  EXPECT_EQ(g.leader->Broadcast("too late").code(), absl::StatusCode::kFailedPrecondition);
  for (auto& f : g.followers) {
    absl::StatusOr<std::string> m = f->Receive();
    ASSERT_TRUE(m.ok()) << m.status();
    EXPECT_EQ(*m, "last batch");
    EXPECT_EQ(f->Receive().status().code(), absl::StatusCode::kCancelled);
    EXPECT_EQ(f->Receive().status().code(), absl::StatusCode::kCancelled);
    EXPECT_TRUE(f->Shutdown().ok());  // a no-op on followers
  }
}

TEST(ControlServiceTest, LeaderDestroyedWithoutShutdownIsUnavailable) {
  Group g = JoinGroup(2, "id");
  ASSERT_EQ(g.followers.size(), 1u);
  ASSERT_TRUE(g.leader->Broadcast("one").ok());
  // Received before the leader goes: what was sent is delivered, then the end.
  absl::StatusOr<std::string> m = g.followers[0]->Receive();
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(*m, "one");
  g.leader.reset();
  absl::StatusOr<std::string> end = g.followers[0]->Receive();
  EXPECT_EQ(end.status().code(), absl::StatusCode::kUnavailable) << end.status();
  EXPECT_THAT(std::string(end.status().message()), HasSubstr("without a clean shutdown"));
}

TEST(ControlServiceTest, LeaderWatchReportsAFollowerThatWentAway) {
  Group g = JoinGroup(3, "id");
  ASSERT_EQ(g.followers.size(), 2u);
  LostProbe probe;
  g.leader->WatchPeers(probe.Callback());
  ASSERT_TRUE(g.leader->Broadcast("healthy").ok());
  EXPECT_FALSE(probe.fired.HasBeenNotified());  // healthy peers are not reported
  const absl::Time gone = absl::Now();
  g.followers[1].reset();  // node rank 2
  ASSERT_TRUE(probe.fired.WaitForNotificationWithTimeout(absl::Seconds(5)));
  EXPECT_LT(absl::Now() - gone, absl::Seconds(1));
  EXPECT_EQ(probe.status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(probe.status.message()), HasSubstr("node rank 2"));
  EXPECT_EQ(g.leader->Broadcast("x").code(), absl::StatusCode::kUnavailable);  // broken from then on
}

TEST(ControlServiceTest, FollowerWatchReportsTheLeaderGoingAway) {
  Group g = JoinGroup(2, "id");
  ASSERT_EQ(g.followers.size(), 1u);
  LostProbe probe;
  g.followers[0]->WatchPeers(probe.Callback());
  EXPECT_FALSE(probe.fired.HasBeenNotified());
  const absl::Time gone = absl::Now();
  g.leader.reset();
  ASSERT_TRUE(probe.fired.WaitForNotificationWithTimeout(absl::Seconds(5)));
  EXPECT_LT(absl::Now() - gone, absl::Seconds(1));
  EXPECT_EQ(probe.status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(probe.status.message()), HasSubstr("node rank 0"));
}

TEST(ControlServiceTest, CleanShutdownIsNotReportedAsLoss) {
  Group g = JoinGroup(2, "id");
  ASSERT_EQ(g.followers.size(), 1u);
  LostProbe leader_probe;
  LostProbe follower_probe;
  g.leader->WatchPeers(leader_probe.Callback());
  g.followers[0]->WatchPeers(follower_probe.Callback());
  ASSERT_TRUE(g.leader->Shutdown().ok());
  EXPECT_EQ(g.followers[0]->Receive().status().code(), absl::StatusCode::kCancelled);
  g.followers[0].reset();
  g.leader.reset();
  EXPECT_FALSE(leader_probe.fired.HasBeenNotified());
  EXPECT_FALSE(follower_probe.fired.HasBeenNotified());
}

TEST(ControlServiceTest, BroadcastToAGoneFollowerFailsNamingIt) {
  Group g = JoinGroup(3, "id");
  ASSERT_EQ(g.followers.size(), 2u);
  g.followers[0].reset();  // node rank 1
  absl::Status s;
  const absl::Time start = absl::Now();
  while (s.ok() && absl::Now() - start < absl::Seconds(10)) {
    s = g.leader->Broadcast(std::string(64 << 10, 'x'));  // the first ones may go before the loss shows
  }
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("node rank 1"));
}

// Runs this test binary again as a child with `filter` and the extra environment `env` (fork + exec only:
// see the header comment). Returns the child's pid, or -1.
pid_t SpawnSelf(const std::string& filter, const std::vector<std::string>& env) {
  static char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) return -1;
  self[n] = '\0';
  std::string filter_arg = "--gtest_filter=" + filter;
  char* argv[] = {self, filter_arg.data(), nullptr};
  std::vector<char*> envp;
  for (const std::string& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  const pid_t child = fork();
  if (child == 0) {
    execve(self, argv, envp.data());
    _exit(127);
  }
  return child;
}

// --- a follower process killed with SIGKILL (this binary re-run as the follower) ---

// The child's role: joins the leader at CONTROL_TEST_PORT as node rank 1 of 2, writes one byte to the fd
// CONTROL_TEST_JOINED_FD, then waits to be killed. Skipped unless run as that child.
TEST(ControlServiceChild, FollowerThatWaitsToBeKilled) {
  const char* port_text = std::getenv("CONTROL_TEST_PORT");
  const char* fd_text = std::getenv("CONTROL_TEST_JOINED_FD");
  int port = 0;
  int fd = -1;
  if (port_text == nullptr || fd_text == nullptr || !absl::SimpleAtoi(port_text, &port) ||
      !absl::SimpleAtoi(fd_text, &fd)) {
    GTEST_SKIP() << "only run as the child of LeaderWatchDetectsAFollowerProcessKilledWithSigkill";
  }
  TransportOr c = MakeFactory()->Follower(Loopback(port), 2, 1);
  ASSERT_TRUE(c.ok()) << c.status();
  const char ok = 1;
  ASSERT_EQ(write(fd, &ok, 1), 1);
  absl::SleepFor(absl::Seconds(60));  // the parent kills it long before
}

TEST(ControlServiceTest, LeaderWatchDetectsAFollowerProcessKilledWithSigkill) {
  LeaderThread leader(2, "id");
  ASSERT_GT(leader.port, 0);
  int joined_pipe[2];
  ASSERT_EQ(pipe(joined_pipe), 0);
  const pid_t child = SpawnSelf("ControlServiceChild.FollowerThatWaitsToBeKilled",
                                {absl::StrCat("CONTROL_TEST_PORT=", leader.port),
                                 absl::StrCat("CONTROL_TEST_JOINED_FD=", joined_pipe[1])});
  ASSERT_GT(child, 0);
  close(joined_pipe[1]);
  TransportOr l = leader.Get();
  ASSERT_TRUE(l.ok()) << l.status();
  char ok = 0;
  ASSERT_EQ(read(joined_pipe[0], &ok, 1), 1);
  close(joined_pipe[0]);
  LostProbe probe;
  (*l)->WatchPeers(probe.Callback());
  const absl::Time killed = absl::Now();
  ASSERT_EQ(kill(child, SIGKILL), 0);
  int wstatus = 0;
  ASSERT_EQ(waitpid(child, &wstatus, 0), child);
  EXPECT_TRUE(WIFSIGNALED(wstatus) && WTERMSIG(wstatus) == SIGKILL);
  ASSERT_TRUE(probe.fired.WaitForNotificationWithTimeout(absl::Seconds(5)));
  std::cout << "[ timing ] killed follower noticed after " << absl::ToDoubleSeconds(absl::Now() - killed)
            << " s" << std::endl;
  EXPECT_LT(absl::Now() - killed, absl::Seconds(2));
  EXPECT_EQ(probe.status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(probe.status.message()), HasSubstr("lost node rank 1"));
  EXPECT_EQ((*l)->Broadcast("x").code(), absl::StatusCode::kUnavailable);
}

// Sets the loopback interface of this process's network namespace up or down. False without permission.
bool SetLoopbackUp(bool up) {
  const int fd = socket(AF_INET, SOCK_DGRAM, 0);
  if (fd < 0) return false;
  ifreq ifr;
  std::memset(&ifr, 0, sizeof(ifr));
  std::strncpy(ifr.ifr_name, "lo", IFNAMSIZ - 1);
  bool ok = ioctl(fd, SIOCGIFFLAGS, &ifr) == 0;
  if (ok) {
    ifr.ifr_flags = static_cast<short>(up ? (ifr.ifr_flags | IFF_UP) : (ifr.ifr_flags & ~IFF_UP));
    ok = ioctl(fd, SIOCSIFFLAGS, &ifr) == 0;
  }
  close(fd);
  return ok;
}

// The child's role in VanishedHostIsDetectedByKeepalive: in a private network namespace, a leader and a
// follower on its loopback interface, which then goes down under them (no FIN, no RST: packets just stop,
// as when a host loses power). Writes the seconds until both ends reported the loss to the fd
// CONTROL_TEST_RESULT_FD; exits 77 without the permission for a namespace, 1 on a failure.
TEST(ControlServiceChild, VanishedHost) {
  const char* fd_text = std::getenv("CONTROL_TEST_RESULT_FD");
  const char* in_flight_text = std::getenv("CONTROL_TEST_IN_FLIGHT");
  int fd = -1;
  if (fd_text == nullptr || in_flight_text == nullptr || !absl::SimpleAtoi(fd_text, &fd)) {
    GTEST_SKIP() << "only run as the child of VanishedHostIsDetectedByKeepalive";
  }
  // Before gRPC starts any thread: every later thread is in the new namespace.
  if (unshare(CLONE_NEWNET) != 0 || !SetLoopbackUp(true)) _exit(77);
  Group g = JoinGroup(2, "id");
  if (g.leader == nullptr || g.followers.size() != 1) _exit(1);
  LostProbe leader_probe;
  LostProbe follower_probe;
  g.leader->WatchPeers(leader_probe.Callback());
  g.followers[0]->WatchPeers(follower_probe.Callback());
  if (!SetLoopbackUp(false)) _exit(77);
  const absl::Time gone = absl::Now();
  if (std::string(in_flight_text) == "1" && !g.leader->Broadcast("a batch").ok()) _exit(1);
  const bool noticed =
      leader_probe.fired.WaitForNotificationWithTimeout(absl::Seconds(20)) &&
      follower_probe.fired.WaitForNotificationWithTimeout(absl::Seconds(20) - (absl::Now() - gone));
  const double seconds = absl::ToDoubleSeconds(absl::Now() - gone);
  if (write(fd, &seconds, sizeof(seconds)) != sizeof(seconds)) _exit(1);
  // Threads may still wait on the dead connections: leave without running destructors.
  _exit(noticed && absl::IsUnavailable(leader_probe.status) && absl::IsUnavailable(follower_probe.status)
            ? 0
            : 1);
}

// A peer host that vanishes without closing anything: both ends notice through HTTP/2 keepalive within
// keepalive_time + keepalive_timeout (1 s + 1 s in these tests; 5 s + 5 s by default) plus scheduling
// slack, idle and with a batch in flight. Needs permission for a private network namespace (root);
// skipped otherwise.
TEST(ControlServiceTest, VanishedHostIsDetectedByKeepalive) {
  for (const bool in_flight : {false, true}) {
    SCOPED_TRACE(in_flight ? "batch in flight" : "idle");
    int result_pipe[2];
    ASSERT_EQ(pipe(result_pipe), 0);
    const pid_t child = SpawnSelf("ControlServiceChild.VanishedHost",
                                  {absl::StrCat("CONTROL_TEST_RESULT_FD=", result_pipe[1]),
                                   absl::StrCat("CONTROL_TEST_IN_FLIGHT=", in_flight ? 1 : 0)});
    ASSERT_GT(child, 0);
    close(result_pipe[1]);
    int wstatus = 0;
    ASSERT_EQ(waitpid(child, &wstatus, 0), child);
    double seconds = -1;
    const bool got = read(result_pipe[0], &seconds, sizeof(seconds)) == sizeof(seconds);
    close(result_pipe[0]);
    ASSERT_TRUE(WIFEXITED(wstatus));
    if (WEXITSTATUS(wstatus) == 77) GTEST_SKIP() << "no permission for a private network namespace";
    EXPECT_EQ(WEXITSTATUS(wstatus), 0) << "not noticed by both ends within 20 s";
    EXPECT_TRUE(got);
    EXPECT_LT(seconds, 8.0);
    std::cout << "[ timing ] vanished host (" << (in_flight ? "batch in flight" : "idle")
              << ") noticed by both ends after " << seconds << " s" << std::endl;
  }
}

// --- security: the Score service's bearer token, TLS and mTLS ---

std::string WriteTemp(const std::string& name, const std::string& text) {
  const std::string path = absl::StrCat(::testing::TempDir(), "/control_service_test_", getpid(), "_", name);
  std::ofstream(path) << text;
  return path;
}

ControlSecurity WithToken(const std::string& token) {
  ControlSecurity s;
  s.auth_token_file = WriteTemp(absl::StrCat("token_", std::hash<std::string>()(token)), token + "\n");
  return s;
}

constexpr char kToken[] = "control-test-token-0123456789";

TEST(ControlServiceTest, TokenJoinWorks) {
  Group g = JoinGroup(2, "id", WithToken(kToken));
  ASSERT_EQ(g.followers.size(), 1u);
  ASSERT_TRUE(g.leader->Broadcast("with token").ok());
  EXPECT_EQ(g.followers[0]->Receive().value_or(""), "with token");
}

TEST(ControlServiceTest, WrongOrMissingTokenIsRefusedAndLogged) {
  for (const bool missing : {false, true}) {
    SCOPED_TRACE(missing ? "no token" : "wrong token");
    ControlServiceOptions o = Fast();
    o.join_timeout = absl::Seconds(2);
    ::testing::internal::CaptureStderr();
    LeaderThread leader(2, "id", WithToken(kToken), o);
    const ControlSecurity follower = missing ? ControlSecurity() : WithToken("another-token-0123456789");
    std::future<TransportOr> f = StartFollower(leader.port, 2, 1, follower);
    TransportOr c = GetBounded(f);
    TransportOr l = leader.Get();
    const std::string log = ::testing::internal::GetCapturedStderr();
    EXPECT_EQ(c.status().code(), absl::StatusCode::kUnauthenticated) << c.status();
    EXPECT_THAT(std::string(c.status().message()),
                HasSubstr(missing ? "requires a bearer token" : "not valid"));
    EXPECT_EQ(l.status().code(), absl::StatusCode::kDeadlineExceeded) << l.status();  // never joined
    EXPECT_THAT(log, HasSubstr("control channel: refused a peer at"));
  }
}

// Test certificates made with the openssl command line (as tests/server/scored_security_e2e_test.cc):
//   ca.pem/key      the cluster's CA
//   node.pem/key    CN=localhost, SAN IP:127.0.0.1 + DNS:localhost, serverAuth + clientAuth, signed by ca
//   chain.pem       node.pem then ca.pem (a certificate file that holds its root: TLS without a CA flag)
const testing::TestCerts* Certs() {
  const std::string ec = testing::kOpensslEcKey;
  const std::string script = absl::StrCat(
      "openssl req -x509 ", ec, " -keyout ca.key -out ca.pem -days 30 -subj '/CN=scored control test CA' ",
      "-addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign\n",
      "openssl req -new ", ec, " -keyout node.key -out node.csr -subj '/CN=localhost'\n",
      "printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\\nbasicConstraints=CA:FALSE\\n",
      "extendedKeyUsage=serverAuth,clientAuth\\n' > node.ext\n",
      "openssl x509 -req -in node.csr -CA ca.pem -CAkey ca.key -set_serial 2 -days 30 ",
      "-extfile node.ext -out node.pem\n", "cat node.pem ca.pem > chain.pem\n",
      "openssl verify -CAfile ca.pem node.pem\n");
  std::string error;
  const testing::TestCerts* certs = testing::TestCerts::Get("scored_control_certs", script, &error);
  if (certs == nullptr) ADD_FAILURE() << "making the test certificates failed:\n" << error;
  return certs;
}

class ControlServiceTlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!testing::HaveOpenssl()) GTEST_SKIP() << "no openssl command line";
    certs_ = Certs();
    ASSERT_NE(certs_, nullptr) << "making the test certificates failed";
  }
  ControlSecurity Tls(const std::string& token = "") const {
    ControlSecurity s = token.empty() ? ControlSecurity() : WithToken(token);
    s.tls.cert_file = certs_->path("chain.pem");
    s.tls.key_file = certs_->path("node.key");
    return s;
  }
  ControlSecurity Mtls() const {
    ControlSecurity s;
    s.tls.cert_file = certs_->path("node.pem");
    s.tls.key_file = certs_->path("node.key");
    s.tls.client_ca_file = certs_->path("ca.pem");
    return s;
  }
  const testing::TestCerts* certs_ = nullptr;
};

TEST_F(ControlServiceTlsTest, TlsAndTokenWork) {
  Group g = JoinGroup(3, "over tls", Tls(kToken));
  ASSERT_EQ(g.followers.size(), 2u);
  EXPECT_EQ(g.followers[1]->payload(), "over tls");
  ASSERT_TRUE(g.leader->Broadcast("batch").ok());
  for (auto& f : g.followers) EXPECT_EQ(f->Receive().value_or(""), "batch");
  ASSERT_TRUE(g.leader->Shutdown().ok());
  for (auto& f : g.followers) EXPECT_EQ(f->Receive().status().code(), absl::StatusCode::kCancelled);
}

TEST_F(ControlServiceTlsTest, PlaintextFollowerIsRefusedByATlsLeader) {
  ControlServiceOptions o = Fast();
  o.join_timeout = absl::Seconds(2);
  LeaderThread leader(2, "id", Tls(kToken), o);
  std::future<TransportOr> f = StartFollower(leader.port, 2, 1, WithToken(kToken), o);
  TransportOr c = GetBounded(f);
  TransportOr l = leader.Get();
  EXPECT_EQ(c.status().code(), absl::StatusCode::kUnavailable) << c.status();
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("closed every connection during the handshake"));
  EXPECT_EQ(l.status().code(), absl::StatusCode::kDeadlineExceeded) << l.status();  // never joined
}

TEST_F(ControlServiceTlsTest, MtlsWorksWithAClientCertificateOnly) {
  {
    Group g = JoinGroup(2, "mtls", Mtls());
    ASSERT_EQ(g.followers.size(), 1u);
    ASSERT_TRUE(g.leader->Broadcast("batch").ok());
    EXPECT_EQ(g.followers[0]->Receive().value_or(""), "batch");
  }
  // A follower with TLS but no client certificate fails the handshake: never joined.
  ControlServiceOptions o = Fast();
  o.join_timeout = absl::Seconds(2);
  LeaderThread leader(2, "id", Mtls(), o);
  ControlSecurity anonymous;
  anonymous.tls.cert_file = certs_->path("chain.pem");
  anonymous.tls.key_file = certs_->path("node.key");
  std::future<TransportOr> f = StartFollower(leader.port, 2, 1, anonymous, o);
  TransportOr c = GetBounded(f);
  TransportOr l = leader.Get();
  EXPECT_EQ(c.status().code(), absl::StatusCode::kUnavailable) << c.status();
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("closed every connection during the handshake"));
  EXPECT_EQ(l.status().code(), absl::StatusCode::kDeadlineExceeded) << l.status();
}

}  // namespace
}  // namespace scored
