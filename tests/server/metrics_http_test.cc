// The metrics endpoint (server/metrics_http.h), the real server on 127.0.0.1:0 with a fixed exposition:
// scrapes are answered while idle, slow (one byte a second, reconnecting) or surplus connections are open,
// instead of waiting for each one's 5 s timeout in turn; a non-loopback address logs a warning.
//
// Margins: a scrape here takes milliseconds; the serial server this replaces took 5 s per idle connection
// ahead of it (100 s for 20). Every client socket has a 30 s receive timeout, so a regression fails the
// test instead of hanging it.
#include "server/metrics_http.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace scored {
namespace {

using ::testing::HasSubstr;

constexpr char kExposition[] = "# TYPE scored_test gauge\nscored_test 1\n";

// A TCP connection to 127.0.0.1:port with 30 s send/receive timeouts; -1 on failure.
int Connect(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  timeval timeout{30, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// One request on a fresh connection; returns everything the server sent before closing ("" on failure).
std::string Fetch(int port, const std::string& request) {
  const int fd = Connect(port);
  if (fd < 0) return "";
  std::string response;
  if (::send(fd, request.data(), request.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(request.size())) {
    char buf[4096];
    ssize_t n;
    while ((n = ::recv(fd, buf, sizeof(buf), 0)) > 0) response.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return response;
}

std::string Scrape(int port) { return Fetch(port, "GET /metrics HTTP/1.0\r\n\r\n"); }

class MetricsHttpTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto server = MetricsHttpServer::Create("127.0.0.1:0", [] { return std::string(kExposition); });
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    ASSERT_GT(server_->port(), 0);
  }
  void TearDown() override {
    for (int fd : idle_) ::close(fd);
  }

  // Opens `n` connections that never send anything.
  void OpenIdle(int n) {
    for (int i = 0; i < n; ++i) {
      const int fd = Connect(server_->port());
      ASSERT_GE(fd, 0) << "connection " << i;
      idle_.push_back(fd);
    }
  }

  std::unique_ptr<MetricsHttpServer> server_;
  std::vector<int> idle_;
};

TEST_F(MetricsHttpTest, AnswersRequests) {
  const std::string ok = Scrape(server_->port());
  EXPECT_THAT(ok, HasSubstr("HTTP/1.0 200 OK"));
  EXPECT_THAT(ok, HasSubstr("text/plain; version=0.0.4"));
  EXPECT_THAT(ok, HasSubstr(kExposition));
  EXPECT_THAT(Fetch(server_->port(), "GET /metrics?x=1 HTTP/1.0\r\n\r\n"), HasSubstr(kExposition));
  EXPECT_THAT(Fetch(server_->port(), "GET /other HTTP/1.0\r\n\r\n"), HasSubstr("404 Not Found"));
  EXPECT_THAT(Fetch(server_->port(), "POST /metrics HTTP/1.0\r\n\r\n"), HasSubstr("405"));
  const std::string head = Fetch(server_->port(), "HEAD /metrics HTTP/1.0\r\n\r\n");
  EXPECT_THAT(head, HasSubstr("200 OK"));
  EXPECT_THAT(head, ::testing::Not(HasSubstr(kExposition)));
  EXPECT_THAT(Fetch(server_->port(), std::string(9000, 'a')), HasSubstr("431"));
}

// 20 idle connections (opened before the scrape, so a serial server would take them first).
TEST_F(MetricsHttpTest, ScrapeIsNotDelayedByIdleConnections) {
  OpenIdle(20);
  const absl::Time start = absl::Now();
  const std::string response = Scrape(server_->port());
  const absl::Duration took = absl::Now() - start;
  EXPECT_THAT(response, HasSubstr(kExposition));
  EXPECT_LT(took, absl::Seconds(5)) << "the scrape waited for the idle connections' timeouts";
  std::printf("[ measured ] scrape with 20 idle connections open: %s\n", absl::FormatDuration(took).c_str());
}

// More idle connections than the cap (64): the oldest are dropped and the scrape is still answered.
TEST_F(MetricsHttpTest, ScrapeIsAnsweredBeyondTheConnectionCap) {
  OpenIdle(MetricsHttpServer::kMaxConnections + 36);
  const absl::Time start = absl::Now();
  EXPECT_THAT(Scrape(server_->port()), HasSubstr(kExposition));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  // The first idle connection was dropped to make room: it reads end-of-stream (well before its 5 s
  // timeout would have closed it; the receive timeout only bounds a failure).
  char byte;
  const absl::Time read_start = absl::Now();
  EXPECT_EQ(::recv(idle_.front(), &byte, 1, 0), 0);
  EXPECT_LT(absl::Now() - read_start, absl::Seconds(4));
}

// Four slowloris clients, each sending a request one byte a second and reconnecting whenever the server
// drops it: three scrapes (taken after the clients' 1st, 3rd and 6th byte, across the server's 5 s
// timeout and their reconnections) are all answered at once. A serial server would hold each scrape
// behind the four slow connections, up to 20 s.
TEST_F(MetricsHttpTest, SlowClientsDoNotBlockScrapes) {
  constexpr int kSlowClients = 4;
  const std::string request = "GET /metrics HTTP/1.0\r\nUser-Agent: slow\r\n\r\n";
  std::mutex mu;
  std::condition_variable cv;
  int bytes_sent = 0;  // by all slow clients, under mu
  std::atomic<bool> stop{false};
  std::vector<std::thread> slow;
  for (int k = 0; k < kSlowClients; ++k) {
    slow.emplace_back([&] {
      int fd = -1;
      size_t next = 0;
      while (!stop.load()) {
        if (fd < 0) {
          fd = Connect(server_->port());
          next = 0;
          if (fd < 0) return;
        }
        if (::send(fd, request.data() + next % request.size(), 1, MSG_NOSIGNAL) != 1) {
          ::close(fd);  // dropped by the server (its timeout): reconnect
          fd = -1;
          continue;
        }
        ++next;
        {
          std::lock_guard<std::mutex> lock(mu);
          ++bytes_sent;
        }
        cv.notify_all();
        // The pacing of this client (one byte a second), not a wait for the server under test.
        const absl::Time until = absl::Now() + absl::Seconds(1);
        while (!stop.load() && absl::Now() < until) absl::SleepFor(absl::Milliseconds(20));
      }
      if (fd >= 0) ::close(fd);
    });
  }
  absl::Duration slowest;
  for (int after_bytes : {1, 3, 6}) {
    {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return bytes_sent >= after_bytes * kSlowClients; });
    }
    const absl::Time start = absl::Now();
    EXPECT_THAT(Scrape(server_->port()), HasSubstr(kExposition));
    slowest = std::max(slowest, absl::Now() - start);
  }
  stop.store(true);
  for (std::thread& t : slow) t.join();
  EXPECT_LT(slowest, absl::Seconds(3)) << "a scrape waited behind the slow clients";
  std::printf("[ measured ] slowest scrape beside %d slow clients: %s\n", kSlowClients,
              absl::FormatDuration(slowest).c_str());
}

TEST(MetricsHttpWarningTest, NonLoopbackAddressLogsAWarning) {
  ::testing::internal::CaptureStderr();
  auto any = MetricsHttpServer::Create("0.0.0.0:0", [] { return std::string(kExposition); });
  const std::string log = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(any.ok()) << any.status();
  EXPECT_THAT(log, HasSubstr("metrics endpoint on 0.0.0.0:0 is not loopback-only and is unauthenticated"));

  ::testing::internal::CaptureStderr();
  auto loopback = MetricsHttpServer::Create("127.0.0.1:0", [] { return std::string(kExposition); });
  const std::string quiet = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(loopback.ok()) << loopback.status();
  EXPECT_THAT(quiet, ::testing::Not(HasSubstr("unauthenticated")));
}

}  // namespace
}  // namespace scored
