// A persistent host thread that runs one tensor-parallel rank's jobs (DESIGN.md §7): every CUDA and NCCL
// call of a rank is made from its own thread, so a rank's device state is created, used and destroyed
// there (cudaSetDevice is per thread).
//
// Post() hands the thread one job; Wait() blocks until it has run and returns its status. One job at a
// time: Post() after Post() without a Wait() in between is a programming error (INTERNAL from Wait()).
// Thread-safety: Post/Wait from one controlling thread. The destructor joins the thread (after the
// running job, if any, returns).
#ifndef SCORED_ENGINE_CUDA_RANK_WORKER_H_
#define SCORED_ENGINE_CUDA_RANK_WORKER_H_

#include <functional>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace scored::cuda {

class RankWorker {
 public:
  RankWorker();
  ~RankWorker();
  RankWorker(const RankWorker&) = delete;
  RankWorker& operator=(const RankWorker&) = delete;

  void Post(std::function<absl::Status()> job);
  absl::Status Wait();

 private:
  void Loop();
  bool Idle() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !pending_; }
  bool HasWorkOrStop() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_ || running_; }

  mutable absl::Mutex mu_;
  std::function<absl::Status()> job_ ABSL_GUARDED_BY(mu_);
  bool pending_ ABSL_GUARDED_BY(mu_) = false;  // a job was posted and has not finished
  bool running_ ABSL_GUARDED_BY(mu_) = false;  // job_ is set and not yet taken
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool misuse_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status result_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace scored::cuda

#endif  // SCORED_ENGINE_CUDA_RANK_WORKER_H_
