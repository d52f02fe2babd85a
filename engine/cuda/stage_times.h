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

// A forward's view of its StageTimes (null: profiling off, nothing is recorded) on its stream. A mark's
// error is kept (the first one) rather than returned where the mark is taken, so that a Stage guard can mark
// in its destructor; the forward returns status() once its last stage has ended.
class StageClock {
 public:
  StageClock(StageTimes* times, cudaStream_t stream) : times_(times), stream_(stream) {}
  // Ends stage `name` (a string literal), as StageTimes::Mark; nothing after an error.
  void Mark(const char* name) {
    if (times_ != nullptr && status_.ok()) status_ = times_->Mark(name, stream_);
  }
  // The first mark's error, else OK.
  const absl::Status& status() const { return status_; }

 private:
  StageTimes* const times_;
  const cudaStream_t stream_;
  absl::Status status_;
};

// A stage of the forward as a scope: `{ Stage s(clock, "qkv GEMM"); ...ops... }` marks the stage's end
// where the scope closes (also when an op in it returns an error: the profile of a failed forward is
// dropped).
class Stage {
 public:
  Stage(StageClock& clock, const char* name) : clock_(clock), name_(name) {}
  ~Stage() { clock_.Mark(name_); }
  Stage(const Stage&) = delete;
  Stage& operator=(const Stage&) = delete;

 private:
  StageClock& clock_;
  const char* const name_;
};

}  // namespace scored::cuda

#endif  // SCORED_ENGINE_CUDA_STAGE_TIMES_H_
