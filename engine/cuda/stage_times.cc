// Per-stage forward timing. Contract: stage_times.h.
#include "engine/cuda/stage_times.h"

#include <cstring>

#include "engine/kernels/cuda_check.h"

namespace scored::cuda {

StageTimes::~StageTimes() {
  for (cudaEvent_t e : events_) cudaEventDestroy(e);
}

absl::Status StageTimes::Record(cudaStream_t stream) {
  if (used_ == events_.size()) {
    cudaEvent_t e = nullptr;
    SCORED_CUDA_CHECK(cudaEventCreate(&e));
    events_.push_back(e);
  }
  SCORED_CUDA_CHECK(cudaEventRecord(events_[used_], stream));
  ++used_;
  return absl::OkStatus();
}

absl::Status StageTimes::Begin(cudaStream_t stream) {
  used_ = 0;
  names_.clear();
  return Record(stream);
}

absl::Status StageTimes::Mark(const char* name, cudaStream_t stream) {
  if (used_ == 0) return absl::FailedPreconditionError("StageTimes::Mark before Begin");
  names_.push_back(name);
  return Record(stream);
}

absl::Status StageTimes::Collect() {
  if (used_ == 0) return absl::OkStatus();
  SCORED_CUDA_CHECK(cudaEventSynchronize(events_[used_ - 1]));
  for (size_t i = 0; i < names_.size(); ++i) {
    float ms = 0;
    SCORED_CUDA_CHECK(cudaEventElapsedTime(&ms, events_[i], events_[i + 1]));
    Total* total = nullptr;
    for (Total& t : totals_) {
      if (std::strcmp(t.name.c_str(), names_[i]) == 0) total = &t;
    }
    if (total == nullptr) {
      totals_.push_back(Total{names_[i], 0, 0});
      total = &totals_.back();
    }
    total->ms += ms;
    ++total->calls;
  }
  used_ = 0;
  names_.clear();
  return absl::OkStatus();
}

}  // namespace scored::cuda
