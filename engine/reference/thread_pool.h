// A small fixed pool of std::threads for the CPU reference backend's data-parallel loops.
//
// ParallelFor(n, fn, grain) splits [0, n) into at most num_threads() contiguous ranges of at least `grain`
// indices (fewer ranges when n is small: waking a thread costs microseconds, much more on a loaded
// machine) and calls fn(begin, end) once per range, the calling thread taking the first; it returns when
// all ranges are done.
// Thread-safety: one ParallelFor at a time per pool (the reference engine's Score() is not reentrant);
// fn must not call ParallelFor on the same pool.
#ifndef SCORED_ENGINE_REFERENCE_THREAD_POOL_H_
#define SCORED_ENGINE_REFERENCE_THREAD_POOL_H_

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace scored::ref {

class ThreadPool {
 public:
  // num_threads >= 1 counts the calling thread: ThreadPool(1) starts no thread. Values < 1 act as 1.
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return num_threads_; }

  void ParallelFor(int64_t n, const std::function<void(int64_t begin, int64_t end)>& fn, int64_t grain = 1);

 private:
  void WorkerLoop(int worker_index);

  const int num_threads_;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable work_cv_;
  std::condition_variable done_cv_;
  // Guarded by mu_: the current job, its generation (bumped per job), workers still running it.
  const std::function<void(int64_t, int64_t)>* job_ = nullptr;
  int64_t job_n_ = 0;
  int job_parts_ = 0;
  int64_t generation_ = 0;
  int pending_ = 0;
  bool stop_ = false;
};

// Runs fn over [0, n) on `pool`, or inline when pool is nullptr.
void ParallelFor(ThreadPool* pool, int64_t n, const std::function<void(int64_t begin, int64_t end)>& fn,
                 int64_t grain = 1);

// A grain for loops whose index costs about `work_per_index` multiply-adds: ranges of at least ~64k of
// them. A wake-up costs ~5-20 us, 64k double multiply-adds ~10 us on one core.
int64_t GrainFor(int64_t work_per_index);

}  // namespace scored::ref

#endif  // SCORED_ENGINE_REFERENCE_THREAD_POOL_H_
