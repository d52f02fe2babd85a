#include "tests/child_process.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/inotify.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace scored::testing {
namespace {

int CodeOf(int status) { return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status); }

// Milliseconds left until `deadline` for poll(), at least 0.
int MillisLeft(absl::Time deadline) {
  const int64_t ms = absl::ToInt64Milliseconds(deadline - absl::Now());
  return static_cast<int>(std::max<int64_t>(0, std::min<int64_t>(ms, 1 << 30)));
}

}  // namespace

absl::StatusOr<std::unique_ptr<ChildProcess>> ChildProcess::Spawn(const std::vector<std::string>& argv,
                                                                  const std::string& out_path,
                                                                  const std::string& err_path) {
  if (argv.empty()) return absl::InvalidArgumentError("ChildProcess: empty argv");
  std::vector<std::string> args = argv;
  std::vector<char*> cargv;
  for (std::string& a : args) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  const std::string out = out_path.empty() ? "/dev/null" : out_path;
  const pid_t pid = ::fork();
  if (pid < 0) return absl::InternalError(absl::StrCat("fork: ", std::strerror(errno)));
  if (pid == 0) {
    const int out_fd = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int err_fd = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (out_fd < 0 || err_fd < 0 || ::dup2(out_fd, 1) < 0 || ::dup2(err_fd, 2) < 0) ::_exit(127);
    ::execv(cargv[0], cargv.data());
    ::_exit(127);
  }
  const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (pidfd < 0) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    return absl::InternalError(absl::StrCat("pidfd_open: ", std::strerror(errno)));
  }
  return std::unique_ptr<ChildProcess>(new ChildProcess(pid, pidfd));
}

ChildProcess::~ChildProcess() {
  if (!reaped_) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
  ::close(pidfd_);
}

bool ChildProcess::Reaped() {
  if (reaped_) return true;
  int status = 0;
  if (::waitpid(pid_, &status, WNOHANG) != pid_) return false;
  reaped_ = true;
  exit_code_ = CodeOf(status);
  return true;
}

int ChildProcess::Wait(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (!Reaped()) {
    pollfd fd{pidfd_, POLLIN, 0};
    if (::poll(&fd, 1, MillisLeft(deadline)) == 0) break;  // timed out (-1 with EINTR: wait again)
  }
  if (reaped_) return exit_code_;
  ::kill(pid_, SIGKILL);
  int status = 0;
  ::waitpid(pid_, &status, 0);
  reaped_ = true;
  exit_code_ = -1;
  return -1;
}

absl::Status ChildProcess::WaitFor(const std::string& path, const std::function<bool()>& condition,
                                   absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  const int watch = ::inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
  if (watch < 0) return absl::InternalError(absl::StrCat("inotify_init1: ", std::strerror(errno)));
  const std::string folder = std::filesystem::path(path).parent_path().string();
  if (::inotify_add_watch(watch, folder.empty() ? "." : folder.c_str(),
                          IN_MODIFY | IN_CREATE | IN_MOVED_TO | IN_CLOSE_WRITE) < 0) {
    ::close(watch);
    return absl::InternalError(absl::StrCat("inotify_add_watch ", folder, ": ", std::strerror(errno)));
  }
  absl::Status result = absl::DeadlineExceededError(absl::StrCat("waiting on ", path));
  while (true) {
    // Registered before the check: a write between the check and poll() still wakes it.
    if (condition()) {
      result = absl::OkStatus();
      break;
    }
    if (Reaped()) {
      result = absl::FailedPreconditionError(absl::StrCat("the child exited (", exit_code_, ")"));
      break;
    }
    pollfd fds[2] = {{watch, POLLIN, 0}, {pidfd_, POLLIN, 0}};
    if (::poll(fds, 2, MillisLeft(deadline)) == 0) {
      if (condition()) result = absl::OkStatus();
      break;
    }
    char events[4096];
    while (::read(watch, events, sizeof(events)) > 0) {
    }
  }
  ::close(watch);
  return result;
}

void ChildProcess::Kill(int signal) {
  if (!reaped_) ::kill(pid_, signal);
}

std::string ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream buf;
  buf << in.rdbuf();
  return buf.str();
}

ChildRun RunToExit(const std::vector<std::string>& argv, const std::string& file_base, absl::Duration bound) {
  ChildRun run;
  const std::string out_path = file_base + ".out", err_path = file_base + ".err";
  const absl::Time start = absl::Now();
  absl::StatusOr<std::unique_ptr<ChildProcess>> child = ChildProcess::Spawn(argv, out_path, err_path);
  if (!child.ok()) {
    run.err = child.status().ToString();
    return run;
  }
  run.exit_code = (*child)->Wait(bound);
  run.took = absl::Now() - start;
  run.out = ReadText(out_path);
  run.err = ReadText(err_path);
  return run;
}

}  // namespace scored::testing
