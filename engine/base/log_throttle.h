// At most `lines_per_second` log lines of one kind a second, with a count of those left out: for events a
// peer can cause at will (a refused connection), so that a flood of them cannot flood the log.
//
//   LogThrottle refusals(4);
//   if (const int64_t skipped = refusals.Admit(); skipped >= 0) {
//     SCORED_LOG(WARNING) << "refused ..." << (skipped > 0 ? " (+" + std::to_string(skipped) + " more)" :
//     "");
//   }
//
// Thread-safe.
#ifndef SCORED_ENGINE_BASE_LOG_THROTTLE_H_
#define SCORED_ENGINE_BASE_LOG_THROTTLE_H_

#include <chrono>
#include <cstdint>
#include <mutex>

namespace scored {

class LogThrottle {
 public:
  using Clock = std::chrono::steady_clock;
  explicit LogThrottle(int lines_per_second)
      : lines_per_second_(lines_per_second < 1 ? 1 : lines_per_second) {}

  // -1: leave this event's line out (it is counted); else the line may be written, and the value is how many
  // events were left out since the last line written.
  int64_t Admit() { return Admit(Clock::now()); }
  int64_t Admit(Clock::time_point now) {
    std::lock_guard<std::mutex> lock(mu_);
    if (now - window_start_ >= std::chrono::seconds(1)) {
      window_start_ = now;
      lines_in_window_ = 0;
    }
    if (lines_in_window_ >= lines_per_second_) {
      ++skipped_;
      return -1;
    }
    ++lines_in_window_;
    const int64_t skipped = skipped_;
    skipped_ = 0;
    return skipped;
  }

 private:
  const int lines_per_second_;
  std::mutex mu_;
  Clock::time_point window_start_{};
  int lines_in_window_ = 0;
  int64_t skipped_ = 0;
};

}  // namespace scored

#endif  // SCORED_ENGINE_BASE_LOG_THROTTLE_H_
