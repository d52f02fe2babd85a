#include "client/ppl/local_server.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "nlohmann/json.hpp"

namespace scored {
namespace ppl {
namespace {

bool IsExecutable(const std::string& path) {
  std::error_code ec;
  return std::filesystem::is_regular_file(path, ec) && ::access(path.c_str(), X_OK) == 0;
}

std::string SelfDir() {
  std::error_code ec;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string() : self.parent_path().string();
}

std::string LogTail(const std::string& path, size_t bytes = 3000) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string all = ss.str();
  return all.size() > bytes ? all.substr(all.size() - bytes) : all;
}

// The gRPC port of scored's --port_file ({"grpc": P, ...}), 0 while it is absent or incomplete.
int ReadGrpcPort(const std::string& path) {
  std::ifstream in(path);
  if (!in) return 0;
  const nlohmann::json ports = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (ports.is_discarded() || !ports.contains("grpc") || !ports["grpc"].is_number_integer()) return 0;
  return ports["grpc"].get<int>();
}

// In the child: its own signal mask cleared (scored-ppl blocks SIGINT/SIGTERM for its signal thread), SIGTERM
// when the parent dies, output to `log`, then exec. Only async-signal-safe calls.
[[noreturn]] void ExecChild(const std::vector<std::string>& argv, const std::string& log) {
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd >= 0) {
    ::dup2(fd, STDOUT_FILENO);
    ::dup2(fd, STDERR_FILENO);
  }
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  ::execv(args[0], args.data());
  ::_exit(127);
}

}  // namespace

absl::StatusOr<std::string> FindScoredBinary(const std::string& binary) {
  if (!binary.empty()) {
    if (IsExecutable(binary)) return binary;
    return absl::NotFoundError(absl::StrCat("--scored_binary ", binary, " is not an executable file"));
  }
  const std::string self = SelfDir();
  for (const std::string& candidate : {self + "/scored", self + "/../../server/scored"}) {
    if (!self.empty() && IsExecutable(candidate))
      return std::filesystem::path(candidate).lexically_normal().string();
  }
  const char* path = std::getenv("PATH");
  for (const absl::string_view dir : absl::StrSplit(path != nullptr ? path : "", ':', absl::SkipEmpty())) {
    const std::string candidate = absl::StrCat(dir, "/scored");
    if (IsExecutable(candidate)) return candidate;
  }
  return absl::NotFoundError(
      "--model: no scored binary found beside scored-ppl, in the build tree or on PATH (give "
      "--scored_binary)");
}

absl::StatusOr<std::unique_ptr<LocalServer>> LocalServer::Start(const Options& options) {
  absl::StatusOr<std::string> binary = FindScoredBinary(options.binary);
  if (!binary.ok()) return binary.status();
  std::string dir = (std::filesystem::temp_directory_path() / "scored-ppl-XXXXXX").string();
  if (::mkdtemp(dir.data()) == nullptr) {
    return absl::InternalError(absl::StrCat("cannot make a temporary folder: ", std::strerror(errno)));
  }
  std::unique_ptr<LocalServer> server(new LocalServer());
  server->dir_ = dir;
  server->log_path_ = dir + "/scored.log";
  server->stop_timeout_ = options.stop_timeout;
  const std::string port_file = dir + "/ports.json";
  std::vector<std::string> argv = {*binary, "--model=" + options.model, "--listen=127.0.0.1:0",
                                   "--metrics_listen=", "--port_file=" + port_file};
  argv.insert(argv.end(), options.extra_args.begin(), options.extra_args.end());
  std::fprintf(stderr, "scored-ppl: starting %s on %s (log %s)\n", binary->c_str(), options.model.c_str(),
               server->log_path_.c_str());
  server->pid_ = ::fork();
  if (server->pid_ < 0) return absl::InternalError(absl::StrCat("fork: ", std::strerror(errno)));
  if (server->pid_ == 0) ExecChild(argv, server->log_path_);
  const absl::Time deadline = absl::Now() + options.startup_timeout;
  while (true) {
    int status = 0;
    if (::waitpid(server->pid_, &status, WNOHANG) == server->pid_) {
      server->pid_ = -1;
      const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      return absl::FailedPreconditionError(
          absl::StrCat("scored exited with status ", code, " before serving ", options.model, "; its log (",
                       server->log_path_, "):\n", LogTail(server->log_path_)));
    }
    if (const int port = ReadGrpcPort(port_file); port > 0) {
      server->address_ = absl::StrCat("127.0.0.1:", port);
      break;
    }
    if (absl::Now() > deadline) {
      return absl::DeadlineExceededError(absl::StrCat("scored did not serve ", options.model, " within ",
                                                      absl::FormatDuration(options.startup_timeout),
                                                      "; its log: ", server->log_path_));
    }
    absl::SleepFor(absl::Milliseconds(50));  // the port file appears once the model is loaded
  }
  std::fprintf(stderr, "scored-ppl: scored serves %s on %s\n", options.model.c_str(),
               server->address_.c_str());
  return server;
}

LocalServer::~LocalServer() {
  if (pid_ > 0) {
    ::kill(pid_, SIGTERM);
    const absl::Time deadline = absl::Now() + stop_timeout_;
    int status = 0;
    while (::waitpid(pid_, &status, WNOHANG) == 0) {
      if (absl::Now() > deadline) {
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, &status, 0);
        break;
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
  }
  if (!address_.empty()) {  // a start that failed keeps its folder: the error names its log
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
}

}  // namespace ppl
}  // namespace scored
