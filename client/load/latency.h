// Latency summaries for scored-load: nearest-rank percentiles over every recorded sample (no
// histogram buckets, so p99 and max are exact).
#ifndef SCORED_CLIENT_LOAD_LATENCY_H_
#define SCORED_CLIENT_LOAD_LATENCY_H_

#include <cstdint>
#include <vector>

namespace scored {
namespace load {

// Nearest-rank percentile of ascending `sorted` samples: the smallest sample x such that at least
// p% of the samples are <= x, i.e. sorted[ceil(p/100 * n) - 1] (clamped to [0, n-1]).
// p in [0, 100]; p = 0 gives the minimum, p = 100 the maximum. Returns 0 for no samples.
double NearestRankPercentile(const std::vector<double>& sorted, double p);

struct LatencySummary {
  int64_t count = 0;
  // Milliseconds; all 0 when count == 0.
  double mean_ms = 0.0;
  double min_ms = 0.0;
  double p50_ms = 0.0;
  double p90_ms = 0.0;
  double p99_ms = 0.0;
  double max_ms = 0.0;
};

// Summarizes latencies given in milliseconds (any order; the vector is sorted in place).
LatencySummary SummarizeLatencies(std::vector<double>* latencies_ms);

}  // namespace load
}  // namespace scored

#endif  // SCORED_CLIENT_LOAD_LATENCY_H_
