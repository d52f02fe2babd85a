// The real `scored` in multi-process tensor-parallel mode on one host with 2 GPUs: a follower
// (`--nnodes 2 --node_rank 1`, CUDA_VISIBLE_DEVICES=1, no listener) and a leader (`--node_rank 0`,
// CUDA_VISIBLE_DEVICES=0, serving gRPC), against one `scored --tp 2` process on both GPUs:
//   1. every Score result through the leader equals the one-process result bit for bit (same shards, same
//      kernels; the all-reduce of two partials is one commutative add), concurrent requests included;
//      SIGTERM to the leader ends both processes with exit 0 (the follower is told to stop);
//   2. a follower killed with SIGKILL turns the leader's health NOT_SERVING and makes it exit non-zero
//      within 60 s (the bound the control channel's peer watch easily meets: a killed process's socket
//      closes at once);
//   3. a leader killed with SIGKILL makes the follower exit non-zero within 60 s;
//   4. the control channel's protection: a follower with a wrong --auth_token_file is refused (it exits
//      non-zero naming its credentials, the leader logs the refusal); with TLS on the leader, a plaintext
//      follower never joins (it exits non-zero after --rendezvous_timeout_s).
// Model: stories260K (real trained weights), token windows of WikiText-2 test, both under $SCORED_DATA_DIR
// (default: the build's data folder). $SCORED_TEST_SCORED_BINARY picks the daemon (default: the build's).
// Needs 2 GPUs (label multi_gpu); skips cleanly with fewer.
#include <cuda_runtime_api.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <future>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "scored/v1/scorer.grpc.pb.h"
#include "tests/server/scored_process.h"

extern char** environ;

namespace scored {
namespace {

using testing::CheckHealth;
using testing::HealthStatus;
using testing::ScoredProcess;
using testing::ScoredProcessOptions;

// Detection bound of the brief: a rank that dies is reported within a bounded time (no silent hang).
constexpr absl::Duration kDetectBound = absl::Seconds(60);

// $SCORED_DATA_DIR (a GPU machine carries the assets elsewhere), else the build's data folder.
std::string DataDir() {
  const char* env = std::getenv("SCORED_DATA_DIR");
  return env != nullptr && env[0] != '\0' ? env : SCORED_DATA_DIR;
}

int GpuCount() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) return 0;  // any error means no usable GPU
  return count;
}

int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr;
  std::memset(&addr, 0, sizeof(addr));
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  close(fd);
  return port;
}

std::string Tail(const std::string& path, size_t bytes = 3000) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  return text.size() > bytes ? text.substr(text.size() - bytes) : text;
}

// A follower `scored` process: no port file and no listener, so not a ScoredProcess. Output to a log.
class FollowerProcess {
 public:
  static absl::StatusOr<std::unique_ptr<FollowerProcess>> Start(const std::string& binary,
                                                                const std::vector<std::string>& args,
                                                                const std::string& visible_devices,
                                                                const std::string& log_path) {
    std::vector<std::string> argv_text = {binary};
    argv_text.insert(argv_text.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (std::string& a : argv_text) argv.push_back(a.data());
    argv.push_back(nullptr);
    std::vector<std::string> env_text;
    for (char** e = environ; *e != nullptr; ++e) {
      if (std::strncmp(*e, "CUDA_VISIBLE_DEVICES=", 21) != 0) env_text.push_back(*e);
    }
    env_text.push_back("CUDA_VISIBLE_DEVICES=" + visible_devices);
    std::vector<char*> envp;
    for (std::string& e : env_text) envp.push_back(e.data());
    envp.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
    auto process = std::unique_ptr<FollowerProcess>(new FollowerProcess());
    process->log_path_ = log_path;
    const int rc = posix_spawn(&process->pid_, binary.c_str(), &actions, nullptr, argv.data(), envp.data());
    posix_spawn_file_actions_destroy(&actions);
    if (rc != 0) return absl::InternalError(absl::StrCat("posix_spawn ", binary, ": ", std::strerror(rc)));
    return process;
  }

  ~FollowerProcess() {
    if (pid_ > 0 && !exited_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }

  void Kill(int signal_number) { kill(pid_, signal_number); }

  // Exit code, or 128 + signal; DEADLINE_EXCEEDED while still running after `timeout`.
  absl::StatusOr<int> Wait(absl::Duration timeout) {
    const absl::Time deadline = absl::Now() + timeout;
    while (!exited_) {
      int status = 0;
      const pid_t r = waitpid(pid_, &status, WNOHANG);
      if (r == pid_) {
        exited_ = true;
        exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        break;
      }
      if (absl::Now() >= deadline) return absl::DeadlineExceededError("follower still running");
      absl::SleepFor(absl::Milliseconds(50));
    }
    return exit_code_;
  }

  std::string LogTail() const { return Tail(log_path_); }
  std::string Log() const { return Tail(log_path_, 1 << 20); }

 private:
  FollowerProcess() = default;
  pid_t pid_ = -1;
  bool exited_ = false;
  int exit_code_ = -1;
  std::string log_path_;
};

// Sets an environment variable for the scope (ScoredProcess children inherit the environment).
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    const char* old = std::getenv(name);
    had_ = old != nullptr;
    if (had_) old_ = old;
    setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (had_) {
      setenv(name_, old_.c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }

 private:
  const char* name_;
  bool had_ = false;
  std::string old_;
};

std::vector<std::string> CommonArgs() {
  return {"--model=" + DataDir() + "/stories260K-hf", "--backend=cuda", "--tp=2", "--max_batch_tokens=4096",
          "--shutdown_grace_s=5"};
}

std::vector<std::string> NodeArgs(int node_rank, int rendezvous_port) {
  std::vector<std::string> args = CommonArgs();
  args.push_back("--nnodes=2");
  args.push_back(absl::StrCat("--node_rank=", node_rank));
  args.push_back(absl::StrCat("--rendezvous=127.0.0.1:", rendezvous_port));
  return args;
}

std::unique_ptr<v1::Scorer::Stub> Stub(const std::string& address) {
  return v1::Scorer::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
}

// WikiText-2 test windows, tokenized by the server itself: lengths 512 (the model's context), 300, 17, 2.
absl::StatusOr<std::vector<std::vector<int32_t>>> Windows(v1::Scorer::Stub* stub) {
  const std::string data_dir = DataDir();
  std::ifstream in(data_dir + "/wikitext-2-raw/wiki.test.raw");
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str().substr(0, 20000);
  if (text.empty()) return absl::NotFoundError("wikitext-2-raw/wiki.test.raw is missing under " + data_dir);
  v1::TokenizeRequest request;
  request.set_text(text);
  request.set_add_bos(true);
  v1::TokenizeResponse response;
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
  const grpc::Status status = stub->Tokenize(&context, request, &response);
  if (!status.ok()) return absl::UnavailableError("Tokenize: " + status.error_message());
  std::vector<int32_t> ids(response.ids().begin(), response.ids().end());
  std::vector<std::vector<int32_t>> windows;
  int64_t at = 0;
  for (int64_t n : {512, 300, 17, 2}) {
    if (at + n > static_cast<int64_t>(ids.size())) return absl::OutOfRangeError("too few tokens");
    windows.emplace_back(ids.begin() + at, ids.begin() + at + n);
    at += n;
  }
  return windows;
}

v1::ScoreRequest MakeRequest(const std::vector<int32_t>& ids) {
  v1::ScoreRequest request;
  for (int32_t id : ids) request.mutable_tokens()->add_ids(id);
  request.set_top_k(5);
  request.set_want_rank(true);
  request.set_want_entropy(true);
  return request;
}

absl::StatusOr<v1::ScoreResponse> ScoreOnce(v1::Scorer::Stub* stub, const std::vector<int32_t>& ids) {
  v1::ScoreResponse response;
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(60)));
  const grpc::Status status = stub->Score(&context, MakeRequest(ids), &response);
  if (!status.ok()) {
    return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
  }
  return response;
}

// Every number of the two responses, compared bit for bit (float bits, not values).
void ExpectBitwiseEqual(const v1::ScoreResponse& a, const v1::ScoreResponse& b, const std::string& what) {
  SCOPED_TRACE(what);
  ASSERT_EQ(a.num_scored(), b.num_scored());
  ASSERT_EQ(a.logprob_size(), b.logprob_size());
  EXPECT_EQ(std::memcmp(a.logprob().data(), b.logprob().data(), sizeof(float) * a.logprob_size()), 0);
  ASSERT_EQ(a.entropy_size(), b.entropy_size());
  EXPECT_EQ(std::memcmp(a.entropy().data(), b.entropy().data(), sizeof(float) * a.entropy_size()), 0);
  EXPECT_TRUE(std::equal(a.greedy().begin(), a.greedy().end(), b.greedy().begin(), b.greedy().end()));
  EXPECT_TRUE(std::equal(a.rank().begin(), a.rank().end(), b.rank().begin(), b.rank().end()));
  const double sum_a = a.sum_logprob();
  const double sum_b = b.sum_logprob();
  EXPECT_EQ(std::memcmp(&sum_a, &sum_b, sizeof(double)), 0) << sum_a << " vs " << sum_b;
  ASSERT_EQ(a.top_k_size(), b.top_k_size());
  for (int j = 0; j < a.top_k_size(); ++j) {
    ASSERT_EQ(a.top_k(j).tokens_size(), b.top_k(j).tokens_size());
    for (int k = 0; k < a.top_k(j).tokens_size(); ++k) {
      EXPECT_EQ(a.top_k(j).tokens(k).id(), b.top_k(j).tokens(k).id()) << "position " << j;
      const float x = a.top_k(j).tokens(k).logprob();
      const float y = b.top_k(j).tokens(k).logprob();
      EXPECT_EQ(std::memcmp(&x, &y, sizeof(float)), 0) << "position " << j;
    }
  }
}

class MultiProcessScoredTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const int gpus = GpuCount();
    if (gpus < 2) GTEST_SKIP() << "needs 2 GPUs, found " << gpus;
    binary_ = testing::DefaultScoredBinary();
    ASSERT_EQ(access(binary_.c_str(), X_OK), 0) << "no scored binary at " << binary_;
    char dir_template[] = "/tmp/scored-mp-XXXXXX";
    ASSERT_NE(mkdtemp(dir_template), nullptr);
    dir_ = dir_template;
  }

  // Starts follower (GPU 1) then leader (GPU 0) and waits for the leader's health SERVING. FreePort()'s port
  // is free when chosen but released before the leader binds it, so another socket on the host can take it
  // in between (seen once on a GPU machine: the leader failed with "Address already in use"): that case,
  // and only that one, starts the pair again on a new port, at most 3 times.
  void StartPair() {
    for (int attempt = 1;; ++attempt) {
      const int port = FreePort();
      ASSERT_GT(port, 0);
      absl::StatusOr<std::unique_ptr<FollowerProcess>> follower =
          FollowerProcess::Start(binary_, NodeArgs(1, port), "1", dir_ + "/follower.log");
      ASSERT_TRUE(follower.ok()) << follower.status();
      follower_ = std::move(*follower);
      ScopedEnv only_gpu0("CUDA_VISIBLE_DEVICES", "0");
      ScoredProcessOptions options;
      options.binary = binary_;
      options.args = NodeArgs(0, port);
      absl::StatusOr<std::unique_ptr<ScoredProcess>> leader = ScoredProcess::Start(options);
      if (!leader.ok() && attempt < 3 &&
          leader.status().message().find("Address already in use") != absl::string_view::npos) {
        follower_.reset();  // SIGKILL, reaped
        continue;
      }
      ASSERT_TRUE(leader.ok()) << leader.status() << "\nfollower log:\n" << follower_->LogTail();
      leader_ = std::move(*leader);
      return;
    }
  }

  std::string Logs() const {
    return absl::StrCat("\nleader log:\n", leader_ ? Tail(leader_->log_path()) : std::string("(none)"),
                        "\nfollower log:\n", follower_ ? follower_->LogTail() : std::string("(none)"));
  }

  std::string binary_;
  std::string dir_;
  std::unique_ptr<FollowerProcess> follower_;
  std::unique_ptr<ScoredProcess> leader_;
};

TEST_F(MultiProcessScoredTest, BitwiseEqualToOneProcessAndCleanShutdown) {
  // The one-process --tp 2 reference on both GPUs.
  std::vector<std::vector<int32_t>> windows;
  std::vector<v1::ScoreResponse> reference;
  std::string reference_fingerprint;
  {
    ScoredProcessOptions options;
    options.binary = binary_;
    options.args = CommonArgs();
    absl::StatusOr<std::unique_ptr<ScoredProcess>> single = ScoredProcess::Start(options);
    ASSERT_TRUE(single.ok()) << single.status();
    auto stub = Stub((*single)->grpc_address());
    absl::StatusOr<std::vector<std::vector<int32_t>>> w = Windows(stub.get());
    ASSERT_TRUE(w.ok()) << w.status();
    windows = *w;
    for (const auto& ids : windows) {
      absl::StatusOr<v1::ScoreResponse> r = ScoreOnce(stub.get(), ids);
      ASSERT_TRUE(r.ok()) << r.status();
      reference.push_back(*r);
    }
    v1::ModelInfo info;
    grpc::ClientContext context;
    ASSERT_TRUE(stub->GetModelInfo(&context, v1::GetModelInfoRequest(), &info).ok());
    reference_fingerprint = info.model_fingerprint();
    ASSERT_TRUE((*single)->SendSignal(SIGTERM).ok());
    absl::StatusOr<int> code = (*single)->Wait(absl::Seconds(60));
    ASSERT_TRUE(code.ok() && *code == 0) << "one-process scored did not exit 0";
  }

  StartPair();
  ASSERT_NE(leader_, nullptr);
  auto stub = Stub(leader_->grpc_address());
  {
    v1::ModelInfo info;
    grpc::ClientContext context;
    ASSERT_TRUE(stub->GetModelInfo(&context, v1::GetModelInfoRequest(), &info).ok());
    EXPECT_EQ(info.tp(), 2);
    EXPECT_EQ(info.backend(), "cuda");
    EXPECT_EQ(info.model_fingerprint(), reference_fingerprint);
  }
  for (size_t i = 0; i < windows.size(); ++i) {
    absl::StatusOr<v1::ScoreResponse> r = ScoreOnce(stub.get(), windows[i]);
    ASSERT_TRUE(r.ok()) << r.status() << Logs();
    ExpectBitwiseEqual(*r, reference[i], absl::StrCat("window ", i, " alone"));
  }
  // All at once, so that the batcher packs them into shared batches: still the same bits.
  std::vector<std::future<absl::StatusOr<v1::ScoreResponse>>> concurrent;
  for (int round = 0; round < 3; ++round) {
    for (const auto& ids : windows) {
      concurrent.push_back(
          std::async(std::launch::async, [&stub, &ids] { return ScoreOnce(stub.get(), ids); }));
    }
  }
  for (size_t i = 0; i < concurrent.size(); ++i) {
    absl::StatusOr<v1::ScoreResponse> r = concurrent[i].get();
    ASSERT_TRUE(r.ok()) << r.status() << Logs();
    ExpectBitwiseEqual(*r, reference[i % windows.size()], absl::StrCat("concurrent request ", i));
  }

  // SIGTERM to the leader: it drains, tells the follower to stop, and both exit 0.
  ASSERT_TRUE(leader_->SendSignal(SIGTERM).ok());
  absl::StatusOr<int> leader_code = leader_->Wait(kDetectBound);
  ASSERT_TRUE(leader_code.ok()) << "leader did not exit after SIGTERM" << Logs();
  EXPECT_EQ(*leader_code, 0) << Logs();
  absl::StatusOr<int> follower_code = follower_->Wait(kDetectBound);
  ASSERT_TRUE(follower_code.ok()) << "follower did not exit after the leader's shutdown" << Logs();
  EXPECT_EQ(*follower_code, 0) << Logs();
}

TEST_F(MultiProcessScoredTest, KilledFollowerMakesLeaderNotServingAndExitNonZero) {
  StartPair();
  ASSERT_NE(leader_, nullptr);
  auto stub = Stub(leader_->grpc_address());
  ASSERT_TRUE(ScoreOnce(stub.get(), {1, 2, 3, 4, 5}).ok()) << Logs();

  const absl::Time killed = absl::Now();
  follower_->Kill(SIGKILL);
  ASSERT_TRUE(follower_->Wait(absl::Seconds(10)).ok());
  // Health leaves SERVING (NOT_SERVING while the leader lingers, then the port closes).
  absl::Duration to_not_serving = absl::InfiniteDuration();
  while (absl::Now() - killed < kDetectBound) {
    absl::StatusOr<HealthStatus> health = CheckHealth(leader_->grpc_address(), "", absl::Seconds(2));
    if (!health.ok() || *health != HealthStatus::kServing) {
      to_not_serving = absl::Now() - killed;
      break;
    }
    absl::SleepFor(absl::Milliseconds(100));
  }
  ASSERT_LT(to_not_serving, kDetectBound) << "leader still SERVING after its follower was killed" << Logs();
  absl::StatusOr<v1::ScoreResponse> after = ScoreOnce(stub.get(), {1, 2, 3});
  EXPECT_EQ(after.status().code(), absl::StatusCode::kUnavailable) << after.status();
  absl::StatusOr<int> code = leader_->Wait(kDetectBound - (absl::Now() - killed) + absl::Seconds(5));
  ASSERT_TRUE(code.ok()) << "leader did not exit after losing its follower" << Logs();
  EXPECT_NE(*code, 0) << Logs();
  std::cout << "[ timing ] follower SIGKILL -> leader not SERVING in " << absl::FormatDuration(to_not_serving)
            << ", exited " << *code << " after " << absl::FormatDuration(absl::Now() - killed) << std::endl;
}

TEST_F(MultiProcessScoredTest, KilledLeaderMakesFollowerExitNonZero) {
  StartPair();
  ASSERT_NE(leader_, nullptr);
  const absl::Time killed = absl::Now();
  ASSERT_TRUE(leader_->SendSignal(SIGKILL).ok());
  ASSERT_TRUE(leader_->Wait(absl::Seconds(10)).ok());
  absl::StatusOr<int> code = follower_->Wait(kDetectBound);
  ASSERT_TRUE(code.ok()) << "follower did not exit after losing its leader" << Logs();
  EXPECT_NE(*code, 0) << Logs();
  std::cout << "[ timing ] leader SIGKILL -> follower exited " << *code << " after "
            << absl::FormatDuration(absl::Now() - killed) << std::endl;
}

// Writes `text` to dir/name; returns the path.
std::string WriteFile(const std::string& dir, const std::string& name, const std::string& text) {
  const std::string path = dir + "/" + name;
  std::ofstream(path) << text;
  return path;
}

// Node rank 0 that waits in its rendezvous (no follower it accepts joins): a plain process with a log.
std::unique_ptr<FollowerProcess> StartWaitingLeader(const std::string& binary, int port,
                                                    const std::vector<std::string>& extra,
                                                    const std::string& log) {
  std::vector<std::string> args = NodeArgs(0, port);
  args.insert(args.end(), {"--listen=127.0.0.1:0", "--metrics_listen=", "--rendezvous_timeout_s=120"});
  args.insert(args.end(), extra.begin(), extra.end());
  absl::StatusOr<std::unique_ptr<FollowerProcess>> leader = FollowerProcess::Start(binary, args, "0", log);
  return leader.ok() ? std::move(*leader) : nullptr;
}

TEST_F(MultiProcessScoredTest, FollowerWithAWrongTokenIsRefused) {
  const int port = FreePort();
  ASSERT_GT(port, 0);
  const std::string right = WriteFile(dir_, "right.token", "the-cluster-token\n");
  const std::string wrong = WriteFile(dir_, "wrong.token", "not-the-cluster-token\n");
  std::unique_ptr<FollowerProcess> leader =
      StartWaitingLeader(binary_, port, {"--auth_token_file=" + right}, dir_ + "/leader.log");
  ASSERT_NE(leader, nullptr);
  std::vector<std::string> args = NodeArgs(1, port);
  args.insert(args.end(), {"--auth_token_file=" + wrong, "--rendezvous_timeout_s=60"});
  absl::StatusOr<std::unique_ptr<FollowerProcess>> follower =
      FollowerProcess::Start(binary_, args, "1", dir_ + "/follower.log");
  ASSERT_TRUE(follower.ok()) << follower.status();
  const absl::StatusOr<int> code = (*follower)->Wait(kDetectBound);
  ASSERT_TRUE(code.ok()) << "the follower with a wrong token still runs\n" << (*follower)->LogTail();
  EXPECT_NE(*code, 0);
  EXPECT_NE((*follower)->Log().find("refused node rank 1's credentials"), std::string::npos)
      << (*follower)->LogTail();
  EXPECT_EQ((*follower)->Log().find("joined the leader"), std::string::npos) << (*follower)->LogTail();
  // The leader logs the refusal (it may write the line after the follower has exited).
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (leader->Log().find("control channel: refused a peer") == std::string::npos &&
         absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(100));
  }
  EXPECT_NE(leader->Log().find("control channel: refused a peer"), std::string::npos) << leader->LogTail();
}

TEST_F(MultiProcessScoredTest, PlaintextFollowerOfATlsLeaderIsRefused) {
  if (std::system("openssl version > /dev/null 2>&1") != 0) GTEST_SKIP() << "needs the openssl command";
  const std::string make_cert = absl::StrCat(
      "cd '", dir_, "' && openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes ",
      "-keyout key.pem -out cert.pem -days 2 -subj /CN=localhost ",
      "-addext subjectAltName=DNS:localhost,IP:127.0.0.1 > openssl.log 2>&1");
  ASSERT_EQ(std::system(make_cert.c_str()), 0) << Tail(dir_ + "/openssl.log");
  const int port = FreePort();
  ASSERT_GT(port, 0);
  std::unique_ptr<FollowerProcess> leader = StartWaitingLeader(
      binary_, port, {"--tls_cert=" + dir_ + "/cert.pem", "--tls_key=" + dir_ + "/key.pem"},
      dir_ + "/leader.log");
  ASSERT_NE(leader, nullptr);
  std::vector<std::string> args = NodeArgs(1, port);
  args.push_back("--rendezvous_timeout_s=15");
  absl::StatusOr<std::unique_ptr<FollowerProcess>> follower =
      FollowerProcess::Start(binary_, args, "1", dir_ + "/follower.log");
  ASSERT_TRUE(follower.ok()) << follower.status();
  const absl::StatusOr<int> code = (*follower)->Wait(kDetectBound);
  ASSERT_TRUE(code.ok()) << "the plaintext follower still runs\n" << (*follower)->LogTail();
  EXPECT_NE(*code, 0);
  EXPECT_NE((*follower)->Log().find("could not"), std::string::npos) << (*follower)->LogTail();
  EXPECT_EQ((*follower)->Log().find("joined the leader"), std::string::npos) << (*follower)->LogTail();
  EXPECT_EQ(leader->Log().find("node rank 1 joined from"), std::string::npos) << leader->LogTail();
}

}  // namespace
}  // namespace scored
