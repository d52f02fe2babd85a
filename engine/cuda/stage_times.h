// Where a forward's GPU time goes, stage by stage (profiling: scored_bench --stages 1). With
// Activations::stage_times set, the forward records a CUDA event on its stream at the start (Begin) and after
// each stage (Mark, named by the stage just ended); Collect, once the stream has run them, adds each stage's
// time (from the previous event to its own) to its name's total. Unset (the engine's case), nothing is
// recorded. One stream (tp 1): under tensor parallelism the stages of the forward's stream only, the sums
// over ranks where it waits for them. Thread-safety: none (one forward at a time).
#ifndef SCORED_ENGINE_CUDA_STAGE_TIMES_H_
#define SCORED_ENGINE_CUDA_STAGE_TIMES_H_

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace scored::cuda {

class StageTimes {
 public:
  struct Total {
    std::string name;
    double ms = 0;
    int64_t calls = 0;
  };

  StageTimes() = default;
  ~StageTimes();
  StageTimes(const StageTimes&) = delete;
  StageTimes& operator=(const StageTimes&) = delete;

  // The forward's first event (drops marks not yet collected).
  absl::Status Begin(cudaStream_t stream);
  // Ends stage `name` (a string literal: kept by pointer until Collect).
  absl::Status Mark(const char* name, cudaStream_t stream);
  // Waits for the last event, adds the stages since Begin to their totals.
  absl::Status Collect();
  // Totals in the order the stages first ended.
  const std::vector<Total>& totals() const { return totals_; }
  void Clear() { totals_.clear(); }

 private:
  absl::Status Record(cudaStream_t stream);

  std::vector<cudaEvent_t> events_;  // a pool, grown as marks need
  size_t used_ = 0;
  std::vector<const char*> names_;  // names_[i] ends at events_[i + 1]
  std::vector<Total> totals_;
};

}  // namespace scored::cuda

#endif  // SCORED_ENGINE_CUDA_STAGE_TIMES_H_
