#include "engine/reference/thread_pool.h"

#include <algorithm>

namespace scored::ref {
namespace {

// Range `part` of `parts` equal-as-possible contiguous ranges of [0, n).
void PartRange(int64_t n, int parts, int part, int64_t* begin, int64_t* end) {
  const int64_t base = n / parts;
  const int64_t extra = n % parts;
  *begin = part * base + std::min<int64_t>(part, extra);
  *end = *begin + base + (part < extra ? 1 : 0);
}

}  // namespace

ThreadPool::ThreadPool(int num_threads) : num_threads_(std::max(1, num_threads)) {
  workers_.reserve(num_threads_ - 1);
  for (int i = 1; i < num_threads_; ++i) workers_.emplace_back([this, i] { WorkerLoop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void ThreadPool::WorkerLoop(int worker_index) {
  int64_t seen_generation = 0;
  while (true) {
    const std::function<void(int64_t, int64_t)>* job;
    int64_t n;
    int parts;
    {
      std::unique_lock<std::mutex> lock(mu_);
      work_cv_.wait(lock, [&] { return stop_ || generation_ != seen_generation; });
      if (stop_) return;
      seen_generation = generation_;
      job = job_;
      n = job_n_;
      parts = job_parts_;
    }
    if (worker_index >= parts) continue;  // not part of this job; the caller does not wait for it
    int64_t begin, end;
    PartRange(n, parts, worker_index, &begin, &end);
    (*job)(begin, end);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (--pending_ == 0) done_cv_.notify_one();
    }
  }
}

void ThreadPool::ParallelFor(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int64_t grain) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  const int parts = static_cast<int>(std::min<int64_t>(num_threads_, (n + grain - 1) / grain));
  if (parts == 1) {
    fn(0, n);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_ = &fn;
    job_n_ = n;
    job_parts_ = parts;
    pending_ = parts - 1;
    ++generation_;
  }
  work_cv_.notify_all();
  int64_t begin, end;
  PartRange(n, parts, 0, &begin, &end);
  fn(begin, end);
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [&] { return pending_ == 0; });
  job_ = nullptr;
}

void ParallelFor(ThreadPool* pool, int64_t n, const std::function<void(int64_t, int64_t)>& fn,
                 int64_t grain) {
  if (pool == nullptr) {
    if (n > 0) fn(0, n);
    return;
  }
  pool->ParallelFor(n, fn, grain);
}

int64_t GrainFor(int64_t work_per_index) {
  constexpr int64_t kMinWork = 1 << 16;
  return std::max<int64_t>(1, kMinWork / std::max<int64_t>(1, work_per_index));
}

}  // namespace scored::ref
