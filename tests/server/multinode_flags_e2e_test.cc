// The real `scored` binary with the multi-process flags: every flag error exits 1 before anything loads,
// with a message naming the flag; a follower (--node_rank > 0) opens no listener, and when it cannot follow
// (here: no cuda backend) it exits 1 at once with its role and the engine's reason.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "engine/engine.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/server/scored_process.h"

namespace scored {
namespace {

using ::testing::HasSubstr;

struct ProcessRun {
  int exit_code = -1;
  std::string output;  // stdout + stderr
};

// Runs scored with `args` under `timeout` seconds (coreutils timeout: a hang shows as exit 124).
ProcessRun RunScored(const std::vector<std::string>& args, int timeout = 60) {
  const std::string command = absl::StrCat("timeout ", timeout, " '", testing::DefaultScoredBinary(), "' ",
                                           absl::StrJoin(args, " "), " 2>&1");
  ProcessRun run;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return run;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), pipe)) > 0) run.output.append(buf, n);
  const int status = pclose(pipe);
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return run;
}

std::string Model() { return "--model=" + testing::StoriesModelDir(); }

TEST(MultiNodeFlagsTest, FlagErrorsExitOneNamingTheFlag) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{Model(), "--nnodes=0"}, "--nnodes must be in [1, 256], got 0"},
      {{Model(), "--nnodes=2", "--node_rank=2", "--backend=cuda", "--tp=2"},
       "--node_rank must be in [0, --nnodes)"},
      {{Model(), "--nnodes=2", "--backend=cpu"}, "--nnodes 2 needs --backend=cuda"},
      {{Model(), "--nnodes=2", "--backend=cuda", "--tp=3", "--rendezvous=h:1"}, "--tp 3 is not a multiple"},
      {{Model(), "--nnodes=2", "--backend=cuda", "--tp=2"}, "needs --rendezvous=HOST:PORT"},
      {{Model(), "--nnodes=2", "--backend=cuda", "--tp=2", "--rendezvous=nohostport"},
       "--rendezvous must be"},
      {{Model(), "--nnodes=2", "--backend=cuda", "--tp=2", "--rendezvous=h:0"},
       "--rendezvous needs a port > 0"},
      {{Model(), "--rendezvous=h:1"}, "--rendezvous is for multi-process"},
      // The tensor-parallel execution settings (EngineOptions::tp_row_chunks / tp_exchange).
      {{Model(), "--tp_row_chunks=9"}, "--tp_row_chunks must be in [0, 8] (0 = auto), got 9"},
      {{Model(), "--tp_exchange=shared-memory"}, "--tp_exchange must be copy or nccl, got 'shared-memory'"},
      // The mixture-of-experts kernel choices (EngineOptions::moe_gemm / moe_sm90_schedule).
      {{Model(), "--moe_gemm=wgmma"}, "--moe_gemm must be mma, sm90 or sm90_dequant, got 'wgmma'"},
      {{Model(), "--moe_sm90_schedule=stream-k"},
       "--moe_sm90_schedule must be cooperative, cooperative2x1 or pingpong, got 'stream-k'"},
      {{Model(), "--kv_cache_quant=on"}, "--kv_cache_quant must be auto or off, got 'on'"},
  };
  for (const auto& [args, message] : cases) {
    const ProcessRun run = RunScored(args);
    EXPECT_EQ(run.exit_code, 1) << absl::StrJoin(args, " ") << "\n" << run.output;
    EXPECT_THAT(run.output, HasSubstr(message)) << absl::StrJoin(args, " ");
  }
}

TEST(MultiNodeFlagsTest, FollowerThatCannotFollowExitsOneWithItsRole) {
  // Port 1 on loopback: nobody listens there. Without the cuda backend the engine refuses at once;
  // with it the follower loads, retries the rendezvous, and gives up after its connect timeout (5 min),
  // longer than this test waits: only the first case can run here.
  if (CudaBackendAvailable()) GTEST_SKIP() << "a GPU is present: the follower would wait for its leader";
  const absl::Time start = absl::Now();
  const ProcessRun run = RunScored({Model(), "--nnodes=2", "--node_rank=1", "--backend=cuda", "--tp=2",
                                    "--rendezvous=127.0.0.1:1", "--listen=0.0.0.0:0"});
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_LT(absl::Now() - start, absl::Seconds(30));
  // The remote --listen without TLS or token is no error on a follower: it listens on nothing.
  EXPECT_THAT(run.output,
              HasSubstr("follower node rank 1 of 2 (tensor-parallel ranks 1..1 of 2 on local GPUs 0..0)"));
  EXPECT_THAT(run.output, HasSubstr("no gRPC listener on this node"));
  EXPECT_THAT(run.output, HasSubstr("exiting: "));
}

// SIGTERM while the server is still starting (here a 60 s load, --fault_inject=slow_load_ms; in real life a
// large checkpoint on a cold disk, or node rank 0 waiting for its follower processes) ends it at once
// with exit code 0 instead of after the load: nothing is in flight yet.
// The signal is sent once scored has logged "waiting 60000 ms before loading": main() blocks SIGTERM before
// anything else (a pending signal then waits for the signal thread), so every line scored logs comes after
// its signal handling is in place. A signal sent earlier (a fixed delay on a loaded machine) could land
// before main() and kill the process by the default action (exit 143).
TEST(MultiNodeFlagsTest, SigtermDuringStartupExitsAtOnce) {
  // Per process: other test runs on the machine must not write the log this test waits on.
  const std::string log_path =
      absl::StrCat(::testing::TempDir(), "/sigterm_during_startup.", ::getpid(), ".log");
  std::string binary = testing::DefaultScoredBinary();
  std::vector<std::string> args = {binary,
                                   Model(),
                                   "--backend=cpu",
                                   "--listen=127.0.0.1:0",
                                   "--metrics_listen=127.0.0.1:0",
                                   "--fault_inject=slow_load_ms:60000"};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  // Emptied here, before the child exists: a log left by an earlier run must not be taken for this one's.
  const int log_fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  ASSERT_GE(log_fd, 0) << log_path;
  ::close(log_fd);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    const int fd = ::open(log_path.c_str(), O_WRONLY | O_APPEND);
    if (fd < 0 || ::dup2(fd, 1) < 0 || ::dup2(fd, 2) < 0) ::_exit(127);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  auto read_log = [&log_path] {
    std::ifstream in(log_path, std::ios::binary);
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
  };
  // Exit status, or -1 once `timeout` has passed (the child is then killed).
  auto wait_exit = [pid](absl::Duration timeout) {
    const absl::Time deadline = absl::Now() + timeout;
    int status = 0;
    while (::waitpid(pid, &status, WNOHANG) == 0) {
      if (absl::Now() > deadline) {
        ::kill(pid, SIGKILL);
        ::waitpid(pid, &status, 0);
        return -1;
      }
      absl::SleepFor(absl::Milliseconds(10));
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  };
  // Startup up to the fault's wait takes well under a second; 60 s only bounds a hang.
  const absl::Time wait_deadline = absl::Now() + absl::Seconds(60);
  while (read_log().find("waiting 60000 ms before loading") == std::string::npos) {
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid) FAIL() << "scored exited before loading:\n" << read_log();
    if (absl::Now() > wait_deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      FAIL() << "no 'waiting ... before loading' line within 60 s:\n" << read_log();
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
  const absl::Time signalled = absl::Now();
  ASSERT_EQ(::kill(pid, SIGTERM), 0);
  const int code = wait_exit(absl::Seconds(50));
  const absl::Duration took = absl::Now() - signalled;
  const std::string output = read_log();
  EXPECT_EQ(code, 0) << output;
  EXPECT_LT(took, absl::Seconds(20)) << output;  // the load alone would take 60 s more
  EXPECT_THAT(output, HasSubstr("received SIGTERM while starting, exiting")) << output;
}

// What a lost follower looks like to node rank 0's server: the engine turns fatal on its own while no
// request runs. Here the CPU engine is made to (--fault_inject=fatal_after_ms): health must leave SERVING
// and the process exit 1 without any traffic, within the 200 ms poll + 2 s linger (5 s allows slack).
TEST(MultiNodeFlagsTest, IdleEngineFailureTurnsNotServingAndExitsOne) {
  testing::ScoredProcessOptions options;
  options.args = {Model(), "--backend=cpu", "--fault_inject=fatal_after_ms:3000"};
  absl::StatusOr<std::unique_ptr<testing::ScoredProcess>> proc = testing::ScoredProcess::Start(options);
  ASSERT_TRUE(proc.ok()) << proc.status();
  // The fault is 3 s after the load; poll health until it leaves SERVING.
  const absl::Time start = absl::Now();
  absl::Duration not_serving_after = absl::InfiniteDuration();
  while (absl::Now() - start < absl::Seconds(20)) {
    absl::StatusOr<testing::HealthStatus> health =
        testing::CheckHealth((*proc)->grpc_address(), "", absl::Seconds(2));
    if (!health.ok() || *health != testing::HealthStatus::kServing) {
      not_serving_after = absl::Now() - start;
      break;
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_LT(not_serving_after, absl::Seconds(8)) << (*proc)->ReadLog();
  absl::StatusOr<int> code = (*proc)->Wait(absl::Seconds(10));
  ASSERT_TRUE(code.ok()) << "still running after its engine failed\n" << (*proc)->ReadLog();
  EXPECT_EQ(*code, 1);
  EXPECT_THAT((*proc)->ReadLog(), HasSubstr("injected fatal engine error 3000 ms after start"));
}

}  // namespace
}  // namespace scored
