#include "tests/server/scored_process.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <sys/inotify.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/byte_buffer.h"
#include "nlohmann/json.hpp"

namespace scored {
namespace testing {
namespace {

std::string ReadFileOrEmpty(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string Tail(const std::string& text, size_t max_chars) {
  if (text.size() <= max_chars) return text;
  return "..." + text.substr(text.size() - max_chars);
}

bool HasFlag(const std::vector<std::string>& args, const std::string& name) {
  for (const std::string& a : args) {
    if (a == "--" + name || absl::StartsWith(a, "--" + name + "=")) return true;
  }
  return false;
}

// grpc.health.v1.HealthCheckRequest is `string service = 1`; encoded by hand so the helper needs no
// generated health stubs (our gRPC package ships none).
std::string EncodeHealthCheckRequest(const std::string& service) {
  std::string out;
  if (service.empty()) return out;
  out.push_back(0x0a);  // field 1, wire type 2 (length-delimited)
  size_t len = service.size();
  while (len >= 0x80) {
    out.push_back(static_cast<char>((len & 0x7f) | 0x80));
    len >>= 7;
  }
  out.push_back(static_cast<char>(len));
  out += service;
  return out;
}

// grpc.health.v1.HealthCheckResponse is `ServingStatus status = 1` (enum, varint). Absent = 0 (UNKNOWN).
absl::StatusOr<HealthStatus> DecodeHealthCheckResponse(const std::string& bytes) {
  size_t i = 0;
  int64_t status = 0;
  while (i < bytes.size()) {
    const uint8_t tag = static_cast<uint8_t>(bytes[i++]);
    if ((tag & 7) != 0) return absl::DataLossError("unexpected wire type in HealthCheckResponse");
    uint64_t value = 0;
    int shift = 0;
    while (true) {
      if (i >= bytes.size()) return absl::DataLossError("truncated HealthCheckResponse");
      const uint8_t b = static_cast<uint8_t>(bytes[i++]);
      value |= static_cast<uint64_t>(b & 0x7f) << shift;
      if ((b & 0x80) == 0) break;
      shift += 7;
    }
    if ((tag >> 3) == 1) status = static_cast<int64_t>(value);
  }
  return static_cast<HealthStatus>(status);
}

absl::StatusCode FromGrpcCode(grpc::StatusCode code) { return static_cast<absl::StatusCode>(code); }

// Removes `dir` and the files in it (the helper's own flat temporary folder: the log, the port file and
// whatever the daemon left there, e.g. a half-written port file when it was killed).
void RemoveFlatDir(const std::string& dir) {
  if (DIR* d = opendir(dir.c_str())) {
    while (const dirent* entry = readdir(d)) {
      const std::string name = entry->d_name;
      if (name == "." || name == "..") continue;
      unlink((dir + "/" + name).c_str());
    }
    closedir(d);
  }
  rmdir(dir.c_str());
}

}  // namespace

std::string DefaultScoredBinary() {
  const char* override_path = std::getenv("SCORED_TEST_SCORED_BINARY");
  if (override_path != nullptr && override_path[0] != '\0') return override_path;
  return std::string(SCORED_BINARY_DIR) + "/server/scored";
}

std::string StoriesModelDir() {
  const char* data = std::getenv("SCORED_DATA_DIR");
  return std::string(data != nullptr && data[0] != '\0' ? data : SCORED_DATA_DIR) + "/stories260K-hf";
}

absl::StatusOr<ScoredPorts> ReadPortFile(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return absl::NotFoundError(absl::StrCat(path, " does not exist"));
  const std::string text = ReadFileOrEmpty(path);
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object() || !j.contains("grpc") || !j["grpc"].is_number_integer()) {
    return absl::DataLossError(absl::StrCat("malformed port file ", path, ": '", text, "'"));
  }
  ScoredPorts ports;
  ports.grpc = j["grpc"].get<int>();
  if (j.contains("metrics") && j["metrics"].is_number_integer()) ports.metrics = j["metrics"].get<int>();
  return ports;
}

absl::StatusOr<HealthStatus> CheckHealth(const std::string& address, const std::string& service,
                                         absl::Duration timeout) {
  return CheckHealth(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()), service, timeout);
}

absl::StatusOr<HealthStatus> CheckHealth(const std::shared_ptr<grpc::Channel>& channel,
                                         const std::string& service, absl::Duration timeout) {
  grpc::GenericStub stub(channel);
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  const std::string request_bytes = EncodeHealthCheckRequest(service);
  grpc::Slice slice(request_bytes);
  grpc::ByteBuffer request(&slice, 1);
  grpc::ByteBuffer response;
  grpc::Status status;
  absl::Notification done;
  stub.UnaryCall(&context, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request, &response,
                 [&](grpc::Status s) {
                   status = std::move(s);
                   done.Notify();
                 });
  done.WaitForNotification();
  if (!status.ok()) return absl::Status(FromGrpcCode(status.error_code()), status.error_message());
  grpc::Slice out;
  if (!response.DumpToSingleSlice(&out).ok()) return absl::DataLossError("unreadable health response");
  return DecodeHealthCheckResponse(std::string(reinterpret_cast<const char*>(out.begin()), out.size()));
}

absl::Status WaitForHealthServing(const std::string& address, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  absl::Status last = absl::UnknownError("no health check made");
  while (absl::Now() < deadline) {
    absl::StatusOr<HealthStatus> h = CheckHealth(address, "", absl::Seconds(2));
    if (h.ok() && *h == HealthStatus::kServing) return absl::OkStatus();
    last = h.ok() ? absl::UnavailableError(absl::StrCat("health status ", static_cast<int>(*h))) : h.status();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return absl::DeadlineExceededError(absl::StrCat("health of ", address, " not SERVING after ",
                                                  absl::FormatDuration(timeout),
                                                  "; last: ", last.ToString()));
}

absl::StatusOr<std::string> HttpGet(const std::string& host, int port, const std::string& path) {
  addrinfo hints;
  std::memset(&hints, 0, sizeof(hints));
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const std::string port_text = std::to_string(port);
  if (getaddrinfo(host.c_str(), port_text.c_str(), &hints, &res) != 0 || res == nullptr) {
    return absl::UnavailableError(absl::StrCat("cannot resolve ", host));
  }
  int fd = socket(res->ai_family, res->ai_socktype, res->ai_protocol);
  if (fd < 0 || connect(fd, res->ai_addr, res->ai_addrlen) != 0) {
    const int err = errno;
    freeaddrinfo(res);
    if (fd >= 0) close(fd);
    return absl::UnavailableError(absl::StrCat("connect ", host, ":", port, ": ", std::strerror(err)));
  }
  freeaddrinfo(res);
  const std::string request =
      absl::StrCat("GET ", path, " HTTP/1.0\r\nHost: ", host, ":", port, "\r\nConnection: close\r\n\r\n");
  size_t sent = 0;
  while (sent < request.size()) {
    const ssize_t n = send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) {
      close(fd);
      return absl::UnavailableError("send failed");
    }
    sent += static_cast<size_t>(n);
  }
  std::string response;
  char buf[8192];
  while (true) {
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    response.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  const size_t header_end = response.find("\r\n\r\n");
  if (header_end == std::string::npos) return absl::DataLossError("no HTTP header in response");
  const std::string status_line = response.substr(0, response.find("\r\n"));
  if (status_line.find(" 200") == std::string::npos) {
    return absl::UnavailableError(absl::StrCat("HTTP status: ", status_line));
  }
  return response.substr(header_end + 4);
}

absl::StatusOr<double> MetricValue(const std::string& exposition, const std::string& sample) {
  std::istringstream in(exposition);
  std::string line;
  const std::string prefix = sample + " ";
  while (std::getline(in, line)) {
    if (!absl::StartsWith(line, prefix)) continue;
    std::string value = line.substr(prefix.size());
    const size_t space = value.find(' ');  // an optional timestamp follows the value
    if (space != std::string::npos) value.resize(space);
    double v = 0;
    if (value == "+Inf") return HUGE_VAL;
    if (!absl::SimpleAtod(value, &v)) return absl::DataLossError(absl::StrCat("bad value in: ", line));
    return v;
  }
  return absl::NotFoundError(absl::StrCat("no sample ", sample));
}

absl::StatusOr<std::unique_ptr<ScoredProcess>> ScoredProcess::Start(const ScoredProcessOptions& options) {
  const char* tmp_root = std::getenv("TMPDIR");
  std::string templ = absl::StrCat(tmp_root != nullptr ? tmp_root : "/tmp", "/scored_test_XXXXXX");
  if (mkdtemp(templ.data()) == nullptr) {
    return absl::InternalError(absl::StrCat("mkdtemp: ", std::strerror(errno)));
  }
  std::unique_ptr<ScoredProcess> proc(new ScoredProcess());
  proc->tmp_dir_ = templ;
  proc->log_path_ = templ + "/scored.log";
  proc->port_file_ = templ + "/ports.json";

  std::vector<std::string> argv = {options.binary};
  for (const std::string& a : options.args) argv.push_back(a);
  if (!HasFlag(options.args, "listen")) argv.push_back("--listen=127.0.0.1:0");
  if (!HasFlag(options.args, "metrics_listen")) argv.push_back("--metrics_listen=127.0.0.1:0");
  if (HasFlag(options.args, "port_file")) {
    for (const std::string& a : options.args) {
      if (absl::StartsWith(a, "--port_file=")) proc->port_file_ = a.substr(strlen("--port_file="));
    }
  } else {
    argv.push_back("--port_file=" + proc->port_file_);
  }
  std::vector<char*> c_argv;
  for (std::string& a : argv) c_argv.push_back(a.data());
  c_argv.push_back(nullptr);

  const int log_fd = open(proc->log_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (log_fd < 0)
    return absl::InternalError(absl::StrCat("open ", proc->log_path_, ": ", std::strerror(errno)));
  const pid_t pid = fork();
  if (pid < 0) {
    close(log_fd);
    return absl::InternalError(absl::StrCat("fork: ", std::strerror(errno)));
  }
  if (pid == 0) {
    // Child: only async-signal-safe calls until exec.
    dup2(log_fd, STDOUT_FILENO);
    dup2(log_fd, STDERR_FILENO);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    execv(c_argv[0], c_argv.data());
    _exit(127);
  }
  close(log_fd);
  proc->pid_ = pid;

  const absl::Time deadline = absl::Now() + options.startup_timeout;
  auto fail = [&](const std::string& what) {
    proc->keep_files_ = false;
    return absl::UnavailableError(absl::StrCat(
        "scored did not start (", what, "); command:",
        [&] {
          std::string s;
          for (const std::string& a : argv) s += " " + a;
          return s;
        }(),
        "\nlog tail:\n", Tail(proc->ReadLog(), 4000)));
  };
  while (true) {
    absl::StatusOr<int> exited = proc->Wait(absl::ZeroDuration());
    if (exited.ok()) return fail(absl::StrCat("exited with code ", *exited));
    absl::StatusOr<ScoredPorts> ports = ReadPortFile(proc->port_file_);
    if (ports.ok()) {
      proc->ports_ = *ports;
      break;
    }
    if (absl::Now() > deadline) return fail("no port file before the timeout");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (options.wait_for_serving) {
    absl::Status s = WaitForHealthServing(proc->grpc_address(), deadline - absl::Now());
    if (!s.ok()) return fail(s.ToString());
  }
  return proc;
}

ScoredProcess::~ScoredProcess() {
  bool killed_here = false;
  if (pid_ > 0 && !exited_) {
    kill(pid_, SIGTERM);
    if (!Wait(absl::Seconds(30)).ok()) {
      kill(pid_, SIGKILL);
      killed_here = true;
      Wait(absl::Seconds(10)).IgnoreError();
    }
  }
  const bool expected_signal = last_signal_sent_ != 0 && exit_code_ == 128 + last_signal_sent_;
  const bool failed = !exited_ || killed_here || (exit_code_ != 0 && !expected_signal);
  if (keep_files_ && failed) {
    std::cerr << "scored log kept at " << log_path_ << "\n";
    return;
  }
  RemoveFlatDir(tmp_dir_);
}

std::string ScoredProcess::grpc_address() const { return absl::StrCat("127.0.0.1:", ports_.grpc); }

std::string ScoredProcess::ReadLog() const { return ReadFileOrEmpty(log_path_); }

absl::Status ScoredProcess::WaitForLog(const std::string& text, absl::Duration timeout) const {
  const absl::Time deadline = absl::Now() + timeout;
  const int fd = ::inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
  if (fd < 0) return absl::InternalError(absl::StrCat("inotify_init1: ", std::strerror(errno)));
  // Watched before the first read: a line written after that read wakes the poll below.
  const bool watched = ::inotify_add_watch(fd, log_path_.c_str(), IN_MODIFY) >= 0;
  absl::Status result = absl::OkStatus();
  while (ReadLog().find(text) == std::string::npos) {
    const absl::Duration left = deadline - absl::Now();
    if (!watched || left <= absl::ZeroDuration()) {
      result = absl::DeadlineExceededError(absl::StrCat("the log of scored never showed '", text, "' within ",
                                                        absl::FormatDuration(timeout), "; its tail:\n",
                                                        Tail(ReadLog(), 4000)));
      break;
    }
    pollfd p{fd, POLLIN, 0};
    ::poll(&p, 1, static_cast<int>(std::min<int64_t>(absl::ToInt64Milliseconds(left) + 1, 60000)));
    char events[4096];
    while (::read(fd, events, sizeof(events)) > 0) {
    }
  }
  ::close(fd);
  return result;
}

absl::Status ScoredProcess::SendSignal(int signal_number) {
  if (exited_) return absl::FailedPreconditionError("scored already exited");
  if (kill(pid_, signal_number) != 0) return absl::InternalError(std::strerror(errno));
  last_signal_sent_ = signal_number;
  return absl::OkStatus();
}

absl::StatusOr<int> ScoredProcess::Wait(absl::Duration timeout) {
  if (exited_) return exit_code_;
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    int wstatus = 0;
    const pid_t r = waitpid(pid_, &wstatus, WNOHANG);
    if (r == pid_) {
      exited_ = true;
      exit_code_ = WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : 128 + WTERMSIG(wstatus);
      return exit_code_;
    }
    if (r < 0 && errno != EINTR) return absl::InternalError(absl::StrCat("waitpid: ", std::strerror(errno)));
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat("scored (pid ", pid_, ") still running"));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

}  // namespace testing
}  // namespace scored
