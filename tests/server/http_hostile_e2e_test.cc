// Hostile clients against the OpenAI-compatible endpoint of the real `scored` (CPU backend, stories260K-hf,
// --openai_listen 127.0.0.1:0, a token): each case of the adversarial trial's HTTP findings, on raw sockets
// so that the test, not a client library, decides what goes on the wire. Memory is read from /proc (VmRSS).
//   - a chunked body past --max_message_bytes: 413 as soon as the limit passes; without the token, 401 before
//     any of the body is read; RSS bounded either way.
//   - a flood of header lines: 431 after 16 KiB; RSS bounded.
//   - slow heads (1 byte a second on more connections than --openai_threads): /health still answers at once,
//     and the slow connections are closed at --openai_header_timeout_s.
//   - SIGTERM with slow clients connected: the process exits 0 at once.
//   - three pipelined requests in one write: three responses, in order.
//   - connection caps: per address 429; at the total cap the connection idle longest is closed for a new one.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/server/scored_process.h"

namespace scored {
namespace {

// RSS bounds hold for the release build; under AddressSanitizer its quarantine keeps freed blocks resident
// and its shadow grows with every allocation, so RSS measures the sanitizer (the sanitizer stage checks the
// rest).
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kRssMeaningful = false;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kRssMeaningful = false;
#else
constexpr bool kRssMeaningful = true;
#endif
#else
constexpr bool kRssMeaningful = true;
#endif

using ::scored::testing::ScoredProcess;
using ::scored::testing::ScoredProcessOptions;

constexpr char kToken[] = "hostile-e2e-token-0123456789";

const bool kSigpipeIgnored = [] {
  signal(SIGPIPE, SIG_IGN);
  return true;
}();

// One TCP connection to 127.0.0.1:port.
class Conn {
 public:
  explicit Conn(int port) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
  }
  ~Conn() {
    if (fd_ >= 0) close(fd_);
  }
  Conn(const Conn&) = delete;
  Conn& operator=(const Conn&) = delete;

  bool connected() const { return connected_; }
  // False once the peer stopped reading (reset, closed).
  bool Send(const std::string& data) {
    size_t off = 0;
    while (off < data.size()) {
      const ssize_t n = send(fd_, data.data() + off, data.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return false;
      off += static_cast<size_t>(n);
    }
    return true;
  }
  // Reads until the peer closes or `timeout` passes; what arrived.
  std::string ReadUntilClosed(absl::Duration timeout, bool* closed = nullptr) {
    std::string out;
    const absl::Time end = absl::Now() + timeout;
    if (closed != nullptr) *closed = false;
    while (absl::Now() < end) {
      pollfd p{fd_, POLLIN, 0};
      const int left = static_cast<int>(absl::ToInt64Milliseconds(end - absl::Now()));
      if (poll(&p, 1, left > 0 ? left : 1) <= 0) continue;
      char buf[65536];
      const ssize_t n = recv(fd_, buf, sizeof(buf), 0);
      if (n <= 0) {
        if (closed != nullptr) *closed = true;
        break;
      }
      out.append(buf, static_cast<size_t>(n));
    }
    return out;
  }
  // Reads until `count` complete responses (by Content-Length) arrived or `timeout` passes.
  std::vector<std::string> ReadResponses(int count, absl::Duration timeout) {
    std::vector<std::string> responses;
    std::string buffer;
    const absl::Time end = absl::Now() + timeout;
    while (static_cast<int>(responses.size()) < count && absl::Now() < end) {
      const size_t head_end = buffer.find("\r\n\r\n");
      if (head_end != std::string::npos) {
        const std::string head = buffer.substr(0, head_end);
        size_t length = 0;
        for (absl::string_view line : absl::StrSplit(head, "\r\n")) {
          if (absl::StartsWithIgnoreCase(line, "content-length:")) {
            absl::SimpleAtoi(absl::StripAsciiWhitespace(line.substr(15)), &length);
          }
        }
        if (buffer.size() >= head_end + 4 + length) {
          responses.push_back(buffer.substr(0, head_end + 4 + length));
          buffer.erase(0, head_end + 4 + length);
          continue;
        }
      }
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, 100) <= 0) continue;
      char buf[65536];
      const ssize_t n = recv(fd_, buf, sizeof(buf), 0);
      if (n <= 0) break;
      buffer.append(buf, static_cast<size_t>(n));
    }
    return responses;
  }

 private:
  int fd_ = -1;
  bool connected_ = false;
};

int64_t RssKiB(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    if (absl::StartsWith(line, "VmRSS:")) {
      int64_t kib = 0;
      absl::SimpleAtoi(absl::StripAsciiWhitespace(absl::StripSuffix(line.substr(6), "kB")), &kib);
      return kib;
    }
  }
  return -1;
}

int StatusOf(const std::string& response) {
  int status = 0;
  if (response.size() >= 12) absl::SimpleAtoi(response.substr(9, 3), &status);
  return status;
}

std::string Get(const std::string& path, bool close = false) {
  return absl::StrCat("GET ", path, " HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ", kToken, "\r\n",
                      close ? "Connection: close\r\n" : "", "\r\n");
}

class HttpHostileTest : public ::testing::Test {
 protected:
  void StartScored(std::vector<std::string> extra) {
    const std::string token = ::testing::TempDir() + "/hostile_token";
    std::ofstream(token) << kToken << "\n";
    ScoredProcessOptions o;
    o.args = {"--model=" + scored::testing::StoriesModelDir(), "--backend=cpu", "--openai_listen=127.0.0.1:0",
              "--auth_token_file=" + token, "--max_message_bytes=4194304"};
    for (std::string& a : extra) o.args.push_back(std::move(a));
    auto p = ScoredProcess::Start(o);
    ASSERT_TRUE(p.ok()) << p.status();
    proc_ = std::move(*p);
    std::ifstream in(proc_->port_file());
    const nlohmann::json ports = nlohmann::json::parse(in, nullptr, false);
    ASSERT_TRUE(ports.contains("openai") && ports["openai"].is_number_integer());
    port_ = ports["openai"].get<int>();
  }
  // /health on a fresh connection: its status and how long it took.
  std::pair<int, absl::Duration> Health() {
    const absl::Time start = absl::Now();
    Conn c(port_);
    if (!c.connected() || !c.Send(Get("/health", true))) return {0, absl::Now() - start};
    const std::vector<std::string> r = c.ReadResponses(1, absl::Seconds(10));
    return {r.empty() ? 0 : StatusOf(r[0]), absl::Now() - start};
  }

  std::unique_ptr<ScoredProcess> proc_;
  int port_ = 0;
};

// 64 MiB of 1 MiB chunks against a 4 MiB --max_message_bytes.
std::string ChunkedHead(bool with_token) {
  return absl::StrCat("POST /v1/completions HTTP/1.1\r\nHost: x\r\n",
                      with_token ? absl::StrCat("Authorization: Bearer ", kToken, "\r\n") : "",
                      "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n");
}

int64_t SendChunks(Conn& c, int chunks) {
  const std::string chunk = absl::StrCat("100000\r\n", std::string(1 << 20, ' '), "\r\n");
  int64_t sent = 0;
  for (int i = 0; i < chunks && c.Send(chunk); ++i) sent += 1 << 20;
  return sent;
}

TEST_F(HttpHostileTest, ChunkedBodiesAreBoundedAndNeverReadWithoutTheToken) {
  StartScored({});
  const int64_t rss_before = RssKiB(proc_->pid());
  {
    Conn c(port_);
    ASSERT_TRUE(c.Send(ChunkedHead(/*with_token=*/false)));
    const std::vector<std::string> r = c.ReadResponses(1, absl::Seconds(10));
    ASSERT_EQ(r.size(), 1u);
    EXPECT_EQ(StatusOf(r[0]), 401) << r[0];           // before any chunk was sent
    EXPECT_LT(SendChunks(c, 64), int64_t{64} << 20);  // the server stops reading
  }
  for (int i = 0; i < 4; ++i) {
    Conn c(port_);
    ASSERT_TRUE(c.Send(ChunkedHead(/*with_token=*/true)));
    SendChunks(c, 64);
    const std::string r = c.ReadUntilClosed(absl::Seconds(10));
    EXPECT_EQ(StatusOf(r), 413) << r.substr(0, 200);
    EXPECT_TRUE(absl::StrContains(r, "--max_message_bytes")) << r.substr(0, 400);
  }
  const int64_t rss_after = RssKiB(proc_->pid());
  // Each refused body is held at most once (4 MiB); 256 MiB were sent in all.
  if (kRssMeaningful) {
    EXPECT_LT(rss_after - rss_before, 32 << 10) << rss_before << " -> " << rss_after << " KiB";
  }
  EXPECT_EQ(Health().first, 200);
}

TEST_F(HttpHostileTest, HeaderFloodIs431AndBounded) {
  StartScored({});
  const int64_t rss_before = RssKiB(proc_->pid());
  for (int i = 0; i < 4; ++i) {
    Conn c(port_);
    ASSERT_TRUE(c.Send("GET /v1/models HTTP/1.1\r\nHost: x\r\n"));
    const std::string line = absl::StrCat("X-Flood: ", std::string(1000, 'a'), "\r\n");
    for (int k = 0; k < 16384 && c.Send(line); ++k) {
    }
    const std::string r = c.ReadUntilClosed(absl::Seconds(10));
    EXPECT_EQ(StatusOf(r), 431) << r.substr(0, 200);
  }
  {
    Conn c(port_);  // many small fields
    std::string head = "GET /v1/models HTTP/1.1\r\nHost: x\r\n";
    for (int k = 0; k < 100; ++k) absl::StrAppend(&head, "X-", k, ": 1\r\n");
    ASSERT_TRUE(c.Send(head + "\r\n"));
    EXPECT_EQ(StatusOf(c.ReadUntilClosed(absl::Seconds(10))), 431);
  }
  if (kRssMeaningful) {
    EXPECT_LT(RssKiB(proc_->pid()) - rss_before, 16 << 10);
  }
  EXPECT_EQ(Health().first, 200);
}

TEST_F(HttpHostileTest, SlowHeadsDoNotStopTheEndpointAndAreClosedAtTheirDeadline) {
  StartScored({"--openai_threads=4", "--openai_header_timeout_s=2"});
  std::vector<std::unique_ptr<Conn>> slow;
  for (int i = 0; i < 32; ++i) {
    slow.push_back(std::make_unique<Conn>(port_));
    ASSERT_TRUE(slow.back()->Send("GET /hea"));
  }
  const absl::Time opened = absl::Now();
  for (int i = 0; i < 5; ++i) {
    for (auto& c : slow) c->Send("a");
    const auto [status, took] = Health();
    EXPECT_EQ(status, 200);
    EXPECT_LT(took, absl::Seconds(1)) << "/health took " << took << " beside 32 slow clients";
    absl::SleepFor(absl::Milliseconds(200));  // the slow clients' pace, not a wait for the server
  }
  int closed = 0;
  for (auto& c : slow) {
    bool was_closed = false;
    c->ReadUntilClosed(absl::Seconds(10), &was_closed);
    closed += was_closed ? 1 : 0;
  }
  EXPECT_EQ(closed, 32);
  EXPECT_GE(absl::Now() - opened, absl::Seconds(2) - absl::Milliseconds(100));
}

TEST_F(HttpHostileTest, SigtermExitsAtOnceWithSlowClientsConnected) {
  StartScored({});
  std::vector<std::unique_ptr<Conn>> slow;
  for (int i = 0; i < 20; ++i) {
    slow.push_back(std::make_unique<Conn>(port_));
    ASSERT_TRUE(slow.back()->Send("POST /v1/completions HTTP/1.1\r\nHost: x\r\nX-Slow: a"));
  }
  {
    Conn half_body(port_);  // a head with the token, then a body that never comes
    ASSERT_TRUE(
        half_body.Send(absl::StrCat("POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ",
                                    kToken, "\r\nContent-Length: 1000\r\n\r\n{\"prompt\"")));
    EXPECT_EQ(Health().first, 200);
    const absl::Time start = absl::Now();
    ASSERT_TRUE(proc_->SendSignal(SIGTERM).ok());
    absl::StatusOr<int> code = proc_->Wait(absl::Seconds(10));
    ASSERT_TRUE(code.ok()) << code.status();
    EXPECT_EQ(*code, 0);
    EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  }
}

TEST_F(HttpHostileTest, PipelinedRequestsAreAnsweredInOrder) {
  StartScored({});
  Conn c(port_);
  const std::string body = R"({"prompt": [1, 2, 3, 4], "max_tokens": 0, "echo": true, "logprobs": 1})";
  ASSERT_TRUE(
      c.Send(absl::StrCat(Get("/health"), Get("/v1/models"), "POST /v1/completions HTTP/1.1\r\nHost: x\r\n",
                          "Authorization: Bearer ", kToken, "\r\nContent-Length: ", body.size(), "\r\n\r\n",
                          body, Get("/v1/models/nope", /*close=*/true))));
  const std::vector<std::string> r = c.ReadResponses(4, absl::Seconds(30));
  ASSERT_EQ(r.size(), 4u);
  EXPECT_EQ(StatusOf(r[0]), 200);
  EXPECT_TRUE(absl::StrContains(r[0], "\"ok\"")) << r[0];
  EXPECT_EQ(StatusOf(r[1]), 200);
  EXPECT_TRUE(absl::StrContains(r[1], "\"list\"")) << r[1];
  EXPECT_EQ(StatusOf(r[2]), 200);
  EXPECT_TRUE(absl::StrContains(r[2], "token_logprobs")) << r[2];
  EXPECT_EQ(StatusOf(r[3]), 404);
}

TEST_F(HttpHostileTest, AnIdListLongerThanAPromptIsRefusedBeforeItIsParsed) {
  StartScored({});
  std::string body = R"({"prompt": [)";
  for (int i = 0; i < 1000000; ++i) body += "7,";  // 2 MB: a million ids against max_seq_len 512
  body += "7], \"max_tokens\": 0, \"echo\": true, \"logprobs\": 1}";
  const int64_t rss_before = RssKiB(proc_->pid());
  Conn c(port_);
  ASSERT_TRUE(
      c.Send(absl::StrCat("POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ", kToken,
                          "\r\nContent-Length: ", body.size(), "\r\nConnection: close\r\n\r\n", body)));
  const std::vector<std::string> r = c.ReadResponses(1, absl::Seconds(30));
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(StatusOf(r[0]), 400) << r[0];
  EXPECT_TRUE(absl::StrContains(r[0], "513 or more elements")) << r[0];
  if (kRssMeaningful) {  // the body once; no DOM of it
    EXPECT_LT(RssKiB(proc_->pid()) - rss_before, 16 << 10);
  }
}

TEST_F(HttpHostileTest, PerAddressCapIs429) {
  StartScored({"--openai_max_connections_per_client=6"});
  std::vector<std::unique_ptr<Conn>> mine;
  for (int i = 0; i < 6; ++i) {
    mine.push_back(std::make_unique<Conn>(port_));
    ASSERT_TRUE(mine.back()->Send(Get("/health")));  // served, then open on keep-alive
    ASSERT_EQ(mine.back()->ReadResponses(1, absl::Seconds(10)).size(), 1u);
  }
  Conn over(port_);  // the 7th from this address
  const std::string r = over.ReadUntilClosed(absl::Seconds(10));
  EXPECT_EQ(StatusOf(r), 429) << r;
  EXPECT_TRUE(absl::StrContains(r, "more than 6 connections from 127.0.0.1")) << r;
}

TEST_F(HttpHostileTest, AtTheTotalCapTheLongestWaitingConnectionMakesRoom) {
  StartScored({"--openai_max_connections=8"});
  std::vector<std::unique_ptr<Conn>> open;
  for (int i = 0; i < 8; ++i) {
    open.push_back(std::make_unique<Conn>(port_));
    ASSERT_TRUE(open.back()->Send(Get("/health")));  // served in turn, then idle on keep-alive
    ASSERT_EQ(open.back()->ReadResponses(1, absl::Seconds(10)).size(), 1u);
  }
  Conn ninth(port_);
  ASSERT_TRUE(ninth.Send(Get("/health", /*close=*/true)));
  const std::vector<std::string> r = ninth.ReadResponses(1, absl::Seconds(10));
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(StatusOf(r[0]), 200);
  bool first_closed = false;
  open.front()->ReadUntilClosed(absl::Seconds(10), &first_closed);
  EXPECT_TRUE(first_closed) << "the connection idle longest was not closed";
  ASSERT_TRUE(open[1]->Send(Get("/health")));  // the others still served
  const std::vector<std::string> second = open[1]->ReadResponses(1, absl::Seconds(10));
  ASSERT_EQ(second.size(), 1u);
  EXPECT_EQ(StatusOf(second[0]), 200);
}

}  // namespace
}  // namespace scored
