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
    {
      std::unique_lock<std::mutex> lock(mu_);
      work_cv_.wait(lock, [&] { return stop_ || generation_ != seen_generation; });
      if (stop_) return;
      seen_generation = generation_;
      job = job_;
      n = job_n_;
    }
    int64_t begin, end;
    PartRange(n, num_threads_, worker_index, &begin, &end);
    if (begin < end) (*job)(begin, end);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (--pending_ == 0) done_cv_.notify_one();
    }
  }
}

void ThreadPool::ParallelFor(int64_t n, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  if (num_threads_ == 1 || n == 1) {
    fn(0, n);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_ = &fn;
    job_n_ = n;
    pending_ = num_threads_ - 1;
    ++generation_;
  }
  work_cv_.notify_all();
  int64_t begin, end;
  PartRange(n, num_threads_, 0, &begin, &end);
  if (begin < end) fn(begin, end);
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [&] { return pending_ == 0; });
  job_ = nullptr;
}

void ParallelFor(ThreadPool* pool, int64_t n, const std::function<void(int64_t, int64_t)>& fn) {
  if (pool == nullptr) {
    if (n > 0) fn(0, n);
    return;
  }
  pool->ParallelFor(n, fn);
}

}  // namespace scored::ref
