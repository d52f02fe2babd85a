// Progress line of scored-ppl on stderr: windows done/total, tokens/s, ETA and running PPL, redrawn in
// place ("\r") at most every `min_interval` (10 Hz by default) and once more by Finish().
// Rates count this run only: tokens/s is the tokens passed to Update() over the time since StartScoring(),
// and the ETA divides the windows left by this run's window rate (windows resumed from a journal excluded).
//
// Thread-safety: not thread-safe; one thread calls Update()/Finish().
#ifndef SCORED_CLIENT_PPL_PROGRESS_H_
#define SCORED_CLIENT_PPL_PROGRESS_H_

#include <cstdint>
#include <cstdio>
#include <string>

#include "absl/time/time.h"

namespace scored {
namespace ppl {

class Progress {
 public:
  // Disabled progress writes nothing. `out` is not owned (stderr in the binary).
  Progress(bool enabled, int64_t total_windows, std::FILE* out,
           absl::Duration min_interval = absl::Milliseconds(100));

  // Starts the clock of the rates; `windows_resumed` windows (taken from a journal) count as done but not
  // towards the rates. Without it the clock starts at construction and nothing is resumed.
  void StartScoring(int64_t windows_resumed);
  // Records the state after one more window (tokens_done: this run's tokens); redraws if the throttle
  // allows.
  void Update(int64_t windows_done, int64_t tokens_done, double running_ppl);
  // Draws the final state and ends the line.
  void Finish();

  // The line drawn for a state (no "\r"), e.g.
  // "[#####     ]  50/100 windows  12.3k tok/s  ETA 0:00:07  ppl 12.3456".
  // Seconds left at this run's pace: (total - done) / ((done - resumed) / elapsed); NaN while this run
  // has finished no window.
  static double EtaSeconds(int64_t windows_done, int64_t windows_resumed, int64_t total_windows,
                           double elapsed_seconds);
  static std::string FormatLine(int64_t windows_done, int64_t total_windows, double tokens_per_second,
                                double eta_seconds, double running_ppl);

 private:
  void Draw();

  bool enabled_;
  int64_t total_windows_;
  std::FILE* out_;
  absl::Duration min_interval_;
  absl::Time start_;
  absl::Time last_draw_ = absl::InfinitePast();
  int64_t windows_done_ = 0;
  int64_t windows_resumed_ = 0;
  int64_t tokens_done_ = 0;
  double running_ppl_ = 0.0;
};

}  // namespace ppl
}  // namespace scored

#endif  // SCORED_CLIENT_PPL_PROGRESS_H_
