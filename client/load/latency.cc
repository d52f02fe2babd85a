#include "client/load/latency.h"

#include <algorithm>
#include <cmath>

namespace scored {
namespace load {

double NearestRankPercentile(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0.0;
  const int64_t n = static_cast<int64_t>(sorted.size());
  // p/100 * n is computed as p * n / 100 so that e.g. p = 90, n = 10 gives exactly 9, not 9.000000000000002
  // (0.9 has no exact binary form), which would round up to rank 10.
  const int64_t rank = static_cast<int64_t>(std::ceil(p * static_cast<double>(n) / 100.0));
  const int64_t index = std::clamp<int64_t>(rank - 1, 0, n - 1);
  return sorted[static_cast<size_t>(index)];
}

LatencySummary SummarizeLatencies(std::vector<double>* latencies_ms) {
  LatencySummary s;
  std::vector<double>& v = *latencies_ms;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  s.count = static_cast<int64_t>(v.size());
  double sum = 0.0;
  for (double x : v) sum += x;
  s.mean_ms = sum / static_cast<double>(s.count);
  s.min_ms = v.front();
  s.p50_ms = NearestRankPercentile(v, 50.0);
  s.p90_ms = NearestRankPercentile(v, 90.0);
  s.p99_ms = NearestRankPercentile(v, 99.0);
  s.max_ms = v.back();
  return s;
}

}  // namespace load
}  // namespace scored
