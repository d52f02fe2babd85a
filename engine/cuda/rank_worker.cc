#include "engine/cuda/rank_worker.h"

#include <utility>

namespace scored::cuda {

RankWorker::RankWorker() : thread_([this] { Loop(); }) {}

RankWorker::~RankWorker() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  thread_.join();
}

void RankWorker::Post(std::function<absl::Status()> job) {
  absl::MutexLock lock(&mu_);
  if (pending_) {
    misuse_ = true;
    return;
  }
  job_ = std::move(job);
  pending_ = true;
  running_ = true;
}

absl::Status RankWorker::Wait() {
  absl::MutexLock lock(&mu_);
  if (misuse_) {
    misuse_ = false;
    return absl::InternalError("RankWorker: a job was posted while another was pending");
  }
  mu_.Await(absl::Condition(this, &RankWorker::Idle));
  return result_;
}

void RankWorker::Loop() {
  while (true) {
    std::function<absl::Status()> job;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(this, &RankWorker::HasWorkOrStop));
      if (!running_) return;  // stopping with nothing to run
      job = std::move(job_);
      running_ = false;
    }
    absl::Status status = job();
    absl::MutexLock lock(&mu_);
    result_ = std::move(status);
    pending_ = false;
  }
}

}  // namespace scored::cuda
