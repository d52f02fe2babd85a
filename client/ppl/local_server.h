// scored-ppl --model DIR: the run's own `scored`, as llama-perplexity users expect one command to do
// (`llama-perplexity -m MODEL -f FILE`). It starts the scored binary on 127.0.0.1 (port 0, no metrics
// endpoint, --port_file in a private temporary folder, its output in a log there), waits until the port
// file appears (scored writes it once health is SERVING: the model is loaded) or the process exits, and on
// destruction stops it with SIGTERM (its drain), then SIGKILL after `stop_timeout`. The child gets SIGTERM
// when scored-ppl dies (PR_SET_PDEATHSIG), so an interrupted run leaves no daemon behind.
//
// The binary: `binary` when given; else `scored` beside this executable (an install's bin/), else the build
// tree's server/scored (beside client/ppl/), else the first `scored` on PATH.
// Thread-safety: Start before other threads exist (it forks); the object is not shared.
#ifndef SCORED_CLIENT_PPL_LOCAL_SERVER_H_
#define SCORED_CLIENT_PPL_LOCAL_SERVER_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace scored {
namespace ppl {

class LocalServer {
 public:
  struct Options {
    std::string model;                    // --model of scored (a folder or a cached hub id)
    std::vector<std::string> extra_args;  // more scored flags, e.g. {"--backend=cpu", "--tp=2"}
    std::string binary;                   // "" = found as above
    absl::Duration startup_timeout = absl::Minutes(30);  // a large checkpoint from a cold disk
    absl::Duration stop_timeout = absl::Seconds(60);
  };

  // FAILED_PRECONDITION naming the model, the exit status and the tail of scored's log when scored exits
  // before it serves; DEADLINE_EXCEEDED after startup_timeout; NOT_FOUND when no scored binary is found.
  static absl::StatusOr<std::unique_ptr<LocalServer>> Start(const Options& options);
  ~LocalServer();
  LocalServer(const LocalServer&) = delete;
  LocalServer& operator=(const LocalServer&) = delete;

  const std::string& address() const { return address_; }  // "127.0.0.1:PORT"
  const std::string& log_path() const { return log_path_; }

 private:
  LocalServer() = default;
  pid_t pid_ = -1;
  std::string dir_, log_path_, address_;
  absl::Duration stop_timeout_;
};

// The scored binary Start would run for `binary` (see above).
absl::StatusOr<std::string> FindScoredBinary(const std::string& binary);

}  // namespace ppl
}  // namespace scored

#endif  // SCORED_CLIENT_PPL_LOCAL_SERVER_H_
