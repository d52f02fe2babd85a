#include "client/ppl/progress.h"

#include <cmath>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"

namespace scored {
namespace ppl {
namespace {

constexpr int kBarWidth = 24;

std::string HumanRate(double per_second) {
  if (per_second >= 1e6) return absl::StrFormat("%.2fM", per_second / 1e6);
  if (per_second >= 1e3) return absl::StrFormat("%.1fk", per_second / 1e3);
  return absl::StrFormat("%.0f", per_second);
}

std::string HumanDuration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "--:--:--";
  const int64_t s = static_cast<int64_t>(std::llround(seconds));
  return absl::StrFormat("%d:%02d:%02d", s / 3600, (s / 60) % 60, s % 60);
}

}  // namespace

Progress::Progress(bool enabled, int64_t total_windows, std::FILE* out, absl::Duration min_interval)
    : enabled_(enabled),
      total_windows_(total_windows),
      out_(out),
      min_interval_(min_interval),
      start_(absl::Now()) {}

std::string Progress::FormatLine(int64_t windows_done, int64_t total_windows, double tokens_per_second,
                                 double eta_seconds, double running_ppl) {
  const double frac =
      total_windows > 0 ? static_cast<double>(windows_done) / static_cast<double>(total_windows) : 1.0;
  const int filled = static_cast<int>(frac * kBarWidth);
  std::string bar(static_cast<size_t>(filled), '#');
  bar.append(static_cast<size_t>(kBarWidth - filled), ' ');
  return absl::StrFormat("[%s] %d/%d windows  %s tok/s  ETA %s  ppl %.4f", bar, windows_done, total_windows,
                         HumanRate(tokens_per_second), HumanDuration(eta_seconds), running_ppl);
}

void Progress::StartScoring(int64_t windows_resumed) {
  start_ = absl::Now();
  windows_resumed_ = windows_resumed;
  windows_done_ = windows_resumed;
}

double Progress::EtaSeconds(int64_t windows_done, int64_t windows_resumed, int64_t total_windows,
                            double elapsed_seconds) {
  const int64_t this_run = windows_done - windows_resumed;
  if (this_run <= 0 || !(elapsed_seconds > 0)) return std::nan("");
  const double window_rate = static_cast<double>(this_run) / elapsed_seconds;
  return static_cast<double>(total_windows - windows_done) / window_rate;
}

void Progress::Update(int64_t windows_done, int64_t tokens_done, double running_ppl) {
  windows_done_ = windows_done;
  tokens_done_ = tokens_done;
  running_ppl_ = running_ppl;
  if (!enabled_) return;
  const absl::Time now = absl::Now();
  if (now - last_draw_ < min_interval_) return;
  last_draw_ = now;
  Draw();
}

void Progress::Finish() {
  if (!enabled_) return;
  Draw();
  std::fputc('\n', out_);
  std::fflush(out_);
}

void Progress::Draw() {
  const double elapsed = absl::ToDoubleSeconds(absl::Now() - start_);
  const double rate = elapsed > 0 ? static_cast<double>(tokens_done_) / elapsed : 0.0;
  const double eta = EtaSeconds(windows_done_, windows_resumed_, total_windows_, elapsed);
  const std::string line = FormatLine(windows_done_, total_windows_, rate, eta, running_ppl_);
  // "\33[K" clears the rest of the line left over from a longer previous draw.
  std::fprintf(out_, "\r%s\33[K", line.c_str());
  std::fflush(out_);
}

}  // namespace ppl
}  // namespace scored
