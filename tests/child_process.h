// A child process of a test: a client binary (e.g. scored-ppl) run with its stdout and stderr in files, and
// waits that block on what they wait for instead of sleeping in a loop: the child's exit (its pidfd) and
// writes to a file (inotify on the file's folder). A wait returns as soon as the condition holds.
//
//   auto ppl = ChildProcess::Spawn({binary, "--data=..."}, out_path, err_path);
//   ASSERT_TRUE(ppl.ok()) << ppl.status();
//   ASSERT_TRUE((*ppl)->WaitFor(journal, [&] { return CountLines(journal) > 20; }, absl::Seconds(60)).ok());
//   (*ppl)->Kill(SIGKILL);
//   EXPECT_EQ((*ppl)->Wait(absl::Seconds(30)), 128 + SIGKILL);
//
// Thread-safety: one thread per ChildProcess. Linux only (pidfd_open, inotify).
#ifndef SCORED_TESTS_CHILD_PROCESS_H_
#define SCORED_TESTS_CHILD_PROCESS_H_

#include <sys/types.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace scored::testing {

class ChildProcess {
 public:
  // Runs argv[0] (a path) with argv; stdout to out_path ("" = /dev/null), stderr to err_path (created or
  // truncated). INTERNAL when the process cannot be started.
  static absl::StatusOr<std::unique_ptr<ChildProcess>> Spawn(const std::vector<std::string>& argv,
                                                             const std::string& out_path,
                                                             const std::string& err_path);
  ~ChildProcess();  // a child still running is killed (SIGKILL) and reaped
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t pid() const { return pid_; }

  // The exit code, or 128 + the signal that ended it; -1 when it was still running after `timeout` (it is
  // then killed and reaped). Repeated calls return the same code.
  int Wait(absl::Duration timeout);

  // Blocks until condition() holds (checked at once and after every write to a file of path's folder), the
  // child exits (FAILED_PRECONDITION, with the exit code) or `timeout` passes (DEADLINE_EXCEEDED).
  absl::Status WaitFor(const std::string& path, const std::function<bool()>& condition,
                       absl::Duration timeout);

  // Sends `signal` (the child is reaped by Wait).
  void Kill(int signal);

 private:
  ChildProcess(pid_t pid, int pidfd) : pid_(pid), pidfd_(pidfd) {}
  // Whether the child has exited (reaps it and records the code); non-blocking.
  bool Reaped();

  pid_t pid_;
  int pidfd_;  // readable once the child exits
  int exit_code_ = -1;
  bool reaped_ = false;
};

// The whole file ("" if it cannot be read).
std::string ReadText(const std::string& path);

// One run to its end: the exit code (as Wait: -1 when still running after `bound`, then killed), stdout and
// stderr (from the files <file_base>.out / .err), and how long it took.
struct ChildRun {
  int exit_code = -1;
  std::string out;
  std::string err;
  absl::Duration took;
};
ChildRun RunToExit(const std::vector<std::string>& argv, const std::string& file_base, absl::Duration bound);

}  // namespace scored::testing

#endif  // SCORED_TESTS_CHILD_PROCESS_H_
