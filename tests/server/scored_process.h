// Test helpers that run the real `scored` daemon as a subprocess (for end-to-end tests of the server
// and of clients such as scored-ppl).
//
//   scored::testing::ScoredProcessOptions opts;
//   opts.args = {"--model=" + scored::testing::StoriesModelDir(), "--backend=cpu"};
//   auto proc = scored::testing::ScoredProcess::Start(opts);   // waits for health SERVING
//   ASSERT_TRUE(proc.ok()) << proc.status();
//   auto channel = grpc::CreateChannel((*proc)->grpc_address(), grpc::InsecureChannelCredentials());
//   ...
//   // ~ScoredProcess sends SIGTERM and reaps the child (SIGKILL after 30 s).
//
// What Start() does: makes a fresh temporary folder, runs `scored` with the caller's args plus
// `--listen=127.0.0.1:0 --metrics_listen=127.0.0.1:0 --port_file=<tmp>/ports.json` (unless the caller
// passes its own --listen / --metrics_listen / --port_file), sends the child's stdout+stderr to
// <tmp>/scored.log, waits for the port file, then polls grpc.health.v1.Health/Check("") until
// SERVING. If the child exits or the timeout passes first, the error carries the tail of its log.
//
// The port file `scored` writes (atomically: temporary file then rename) is one JSON object:
//   {"grpc": <port>, "metrics": <port or null when --metrics_listen is empty>}
//
// Thread-safety: a ScoredProcess is used from one thread; the free functions are thread-safe.
#ifndef SCORED_TESTS_SERVER_SCORED_PROCESS_H_
#define SCORED_TESTS_SERVER_SCORED_PROCESS_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace grpc {
class Channel;
}  // namespace grpc

namespace scored {
namespace testing {

// $SCORED_TEST_SCORED_BINARY if set (e.g. a sanitizer build of the daemon), else
// $SCORED_BINARY_DIR/server/scored (the build tree's daemon).
std::string DefaultScoredBinary();
// $SCORED_DATA_DIR/stories260K-hf (the small real Llama every CPU test uses): the environment's
// SCORED_DATA_DIR if set (a copy of the tree on another machine), else the one compiled in.
std::string StoriesModelDir();

struct ScoredPorts {
  int grpc = 0;
  int metrics = 0;  // 0 when the metrics endpoint is disabled (JSON null)
};

// Parses a port file written by `scored --port_file`. NOT_FOUND while it does not exist yet.
absl::StatusOr<ScoredPorts> ReadPortFile(const std::string& path);

// grpc.health.v1 ServingStatus values.
enum class HealthStatus { kUnknown = 0, kServing = 1, kNotServing = 2, kServiceUnknown = 3 };

// One Health/Check call on `address` ("127.0.0.1:P") for `service` ("" = the whole server), with the
// given deadline. Returns the RPC's error status when the call fails (e.g. UNAVAILABLE: not listening).
absl::StatusOr<HealthStatus> CheckHealth(const std::string& address, const std::string& service,
                                         absl::Duration timeout = absl::Seconds(5));
// The same over a caller's channel (e.g. TLS credentials).
absl::StatusOr<HealthStatus> CheckHealth(const std::shared_ptr<grpc::Channel>& channel,
                                         const std::string& service,
                                         absl::Duration timeout = absl::Seconds(5));

// Polls CheckHealth(address, "") until SERVING or `timeout` passes (DEADLINE_EXCEEDED then).
absl::Status WaitForHealthServing(const std::string& address, absl::Duration timeout);

// Plain HTTP/1.0 GET of http://host:port/path; returns the body of a 200 response.
absl::StatusOr<std::string> HttpGet(const std::string& host, int port, const std::string& path);

// Value of one sample line of Prometheus text exposition, e.g.
// MetricValue(text, "scored_requests_total{method=\"Score\",code=\"OK\"}"). Label order must match the
// exposition (prometheus-cpp writes labels sorted by name). NOT_FOUND if absent.
absl::StatusOr<double> MetricValue(const std::string& exposition, const std::string& sample);

struct ScoredProcessOptions {
  std::string binary = DefaultScoredBinary();
  std::vector<std::string> args;  // e.g. {"--model=DIR", "--backend=cpu"}
  absl::Duration startup_timeout = absl::Seconds(120);
  bool wait_for_serving = true;  // false: return once the port file exists
};

class ScoredProcess {
 public:
  static absl::StatusOr<std::unique_ptr<ScoredProcess>> Start(const ScoredProcessOptions& options);

  // SIGTERM, then waits up to 30 s, then SIGKILL; removes the temporary folder and everything in it,
  // unless a started child failed: exited non-zero, was killed by a signal the test did not send through
  // SendSignal, or had to be killed here (then the folder is kept and the log's path printed to stderr).
  // A child the test killed on purpose (e.g. SendSignal(SIGKILL), then Wait) counts as a clean exit.
  ~ScoredProcess();
  ScoredProcess(const ScoredProcess&) = delete;
  ScoredProcess& operator=(const ScoredProcess&) = delete;

  pid_t pid() const { return pid_; }
  int grpc_port() const { return ports_.grpc; }
  int metrics_port() const { return ports_.metrics; }
  std::string grpc_address() const;  // "127.0.0.1:<grpc_port>"
  const std::string& log_path() const { return log_path_; }
  const std::string& port_file() const { return port_file_; }
  std::string ReadLog() const;
  // Blocks (inotify on the log file, no polling) until the log holds `text`; DEADLINE_EXCEEDED naming it,
  // with the log's tail, if `timeout` passes first.
  absl::Status WaitForLog(const std::string& text, absl::Duration timeout) const;

  // Sends `signal_number` to the child; a death by that signal is then expected (see ~ScoredProcess).
  absl::Status SendSignal(int signal_number);
  // Waits for the child to exit. Returns its exit code, or 128 + signal if a signal killed it.
  // DEADLINE_EXCEEDED if it is still running after `timeout` (it is not killed then).
  absl::StatusOr<int> Wait(absl::Duration timeout);
  bool running() const { return !exited_; }

 private:
  ScoredProcess() = default;

  pid_t pid_ = -1;
  bool exited_ = false;
  bool keep_files_ = true;  // false when Start() failed: its error already carries the log tail
  int exit_code_ = -1;
  int last_signal_sent_ = 0;  // the last signal sent through SendSignal (0: none)
  ScoredPorts ports_;
  std::string tmp_dir_;
  std::string log_path_;
  std::string port_file_;
};

}  // namespace testing
}  // namespace scored

#endif  // SCORED_TESTS_SERVER_SCORED_PROCESS_H_
