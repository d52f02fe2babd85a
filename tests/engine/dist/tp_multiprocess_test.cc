// Multi-process tensor parallelism on one host: a leader process (this one, GPU 0) and a follower process
// (this binary again, run with only GPU 1 visible) form --tp 2 --nnodes 2 over the control channel and
// NCCL. The leader's results must equal, bit for bit, the one-process --tp 2 engine's (the same shards and
// kernels; an fp32 all-reduce of two partials is one commutative add). Destroying the leader ends the
// follower cleanly (exit 0); a follower that dies makes the leader UNAVAILABLE without a hang.
// Needs 2 GPUs (label multi_gpu); skips cleanly with fewer.
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "engine/cuda/cuda_engine.h"
#include "engine/engine.h"
#include "engine/score_contract.h"
#include "server/control_service.h"
#include "tests/engine/cuda/gpu_fixture.h"

extern char** environ;

namespace scored {
namespace {

using ::scored::testing::EnvOr;

const std::string kFixturesDir = EnvOr("SCORED_FIXTURES_DIR", SCORED_FIXTURES_DIR);
constexpr char kFollowerEnv[] = "SCORED_TP_FOLLOWER_RENDEZVOUS";

EngineOptions Options(int nnodes, int node_rank, const std::string& rendezvous) {
  EngineOptions options;
  options.model_dir = kFixturesDir + "/llama-w4a16-g128-actorder";
  options.backend = Backend::kCuda;
  options.dtype = ComputeDtype::kBf16;
  options.tp = 2;
  options.max_batch_tokens = 2048;
  options.nnodes = nnodes;
  options.node_rank = node_rank;
  options.rendezvous = rendezvous;
  if (nnodes > 1) {
    // The server's gRPC control plane (plaintext, no token: loopback only), as scored sets it.
    absl::StatusOr<std::shared_ptr<GrpcControlTransportFactory>> factory =
        GrpcControlTransportFactory::Create(ControlSecurity());
    if (factory.ok()) options.control_transport = *factory;
  }
  return options;
}

std::vector<ScoreRequest> Requests() {
  std::mt19937 rng(7);
  std::vector<ScoreRequest> requests;
  for (int n : {100, 33, 250}) {
    ScoreRequest r;
    for (int j = 0; j < n; ++j) r.tokens.push_back(static_cast<int32_t>(rng() % 512));
    r.want_rank = true;
    r.want_entropy = true;
    requests.push_back(r);
  }
  return requests;
}

// The follower's side: this binary re-run with kFollowerEnv set runs only this test.
TEST(TpFollowerProcess, Run) {
  const char* rendezvous = std::getenv(kFollowerEnv);
  if (rendezvous == nullptr) GTEST_SKIP() << "runs only as the follower process of TpMultiProcessTest";
  const absl::Status status = RunFollower(Options(2, 1, rendezvous));
  EXPECT_TRUE(status.ok()) << status;
}

// Starts the follower process (GPU 1 only) for `rendezvous`; returns its pid or -1.
pid_t SpawnFollower(const std::string& rendezvous) {
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string kv = *e;
    if (kv.rfind("CUDA_VISIBLE_DEVICES=", 0) == 0 || kv.rfind(kFollowerEnv, 0) == 0) continue;
    env_strings.push_back(kv);
  }
  env_strings.push_back("CUDA_VISIBLE_DEVICES=1");
  env_strings.push_back(std::string(kFollowerEnv) + "=" + rendezvous);
  std::vector<char*> env;
  for (std::string& kv : env_strings) env.push_back(kv.data());
  env.push_back(nullptr);
  std::string exe = "/proc/self/exe", filter = "--gtest_filter=TpFollowerProcess.Run";
  char* argv[] = {exe.data(), filter.data(), nullptr};
  pid_t pid = -1;
  if (posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, argv, env.data()) != 0) return -1;
  return pid;
}

// Waits up to `timeout` for `pid`; its exit status, or -1 (killed after the timeout).
int WaitFor(pid_t pid, std::chrono::seconds timeout) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < end) {
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  return -1;
}

class TpMultiProcessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::getenv(kFollowerEnv) != nullptr) GTEST_SKIP() << "follower process";
    if (CudaDeviceCount() < 2) GTEST_SKIP() << "needs 2 usable CUDA devices";
  }
  std::string Rendezvous() const { return "127.0.0.1:" + std::to_string(20000 + getpid() % 20000); }
};

TEST_F(TpMultiProcessTest, TwoProcessesMatchOneProcessBitwiseAndEndCleanly) {
  std::vector<ScoreResult> want;
  {
    auto single = CreateCudaEngine(Options(1, 0, ""));
    ASSERT_TRUE(single.ok()) << single.status();
    auto result = ScoreAll(*(*single), Requests());
    ASSERT_TRUE(result.ok()) << result.status();
    want = *std::move(result);
  }
  const std::string rendezvous = Rendezvous();
  const pid_t follower = SpawnFollower(rendezvous);
  ASSERT_GT(follower, 0);
  {
    auto leader = CreateCudaEngine(Options(2, 0, rendezvous));
    if (!leader.ok()) WaitFor(follower, std::chrono::seconds(1));
    ASSERT_TRUE(leader.ok()) << leader.status();
    EXPECT_EQ((*leader)->info().tp, 2);
    for (int round = 0; round < 2; ++round) {
      auto got = ScoreAll(*(*leader), Requests());
      ASSERT_TRUE(got.ok()) << got.status();
      ASSERT_EQ(got->size(), want.size());
      for (size_t s = 0; s < want.size(); ++s) {
        EXPECT_EQ((*got)[s].logprob, want[s].logprob) << "sequence " << s;
        EXPECT_EQ((*got)[s].greedy, want[s].greedy) << "sequence " << s;
        EXPECT_EQ((*got)[s].rank, want[s].rank) << "sequence " << s;
        EXPECT_EQ((*got)[s].entropy, want[s].entropy) << "sequence " << s;
      }
    }
  }
  EXPECT_EQ(WaitFor(follower, std::chrono::seconds(60)), 0) << "the follower must end cleanly";
}

TEST_F(TpMultiProcessTest, DeadFollowerMakesLeaderUnavailable) {
  const std::string rendezvous = Rendezvous();
  const pid_t follower = SpawnFollower(rendezvous);
  ASSERT_GT(follower, 0);
  auto leader = CreateCudaEngine(Options(2, 0, rendezvous));
  if (!leader.ok()) WaitFor(follower, std::chrono::seconds(1));
  ASSERT_TRUE(leader.ok()) << leader.status();
  ASSERT_TRUE(ScoreAll(*(*leader), Requests()).ok());
  kill(follower, SIGKILL);
  waitpid(follower, nullptr, 0);
  const auto start = std::chrono::steady_clock::now();
  while ((*leader)->fatal_status().ok() &&
         std::chrono::steady_clock::now() - start < std::chrono::seconds(20)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ((*leader)->fatal_status().code(), absl::StatusCode::kUnavailable) << (*leader)->fatal_status();
  auto later = ScoreAll(*(*leader), Requests());
  EXPECT_EQ(later.status().code(), absl::StatusCode::kUnavailable) << later.status();
}

}  // namespace
}  // namespace scored
