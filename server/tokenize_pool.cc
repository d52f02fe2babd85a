#include "server/tokenize_pool.h"

#include <mutex>
#include <utility>

#include "absl/strings/str_cat.h"

namespace scored {

TokenizePool::TokenizePool(Options options) : options_(options) {
  threads_.reserve(options_.threads);
  for (int i = 0; i < options_.threads; ++i) threads_.emplace_back([this] { Work(); });
}

TokenizePool::~TokenizePool() { Shutdown(); }

absl::Status TokenizePool::Submit(std::function<void()> job) {
  absl::MutexLock lock(&mu_);
  if (refusing_) return absl::UnavailableError("the server is shutting down");
  if (static_cast<int64_t>(queue_.size()) >= options_.max_queue) {
    return absl::ResourceExhaustedError(absl::StrCat(queue_.size(),
                                                     " texts are already waiting to be tokenized "
                                                     "(--tokenize_queue); retry later"));
  }
  queue_.push_back(std::move(job));
  return absl::OkStatus();
}

void TokenizePool::BeginShutdown(absl::Time stop_at) {
  absl::MutexLock lock(&mu_);
  if (refusing_) return;
  refusing_ = true;
  stop_at_ns_.store(absl::ToUnixNanos(stop_at), std::memory_order_relaxed);
}

void TokenizePool::Shutdown() {
  BeginShutdown(absl::Now());
  std::call_once(joined_, [this] {
    {
      absl::MutexLock lock(&mu_);
      exit_ = true;
    }
    for (std::thread& t : threads_) t.join();
  });
}

void TokenizePool::Work() {
  while (true) {
    std::function<void()> job;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(this, &TokenizePool::HasWorkLocked));
      if (queue_.empty()) return;  // exit_, nothing left to run
      job = std::move(queue_.front());
      queue_.pop_front();
    }
    job();
  }
}

}  // namespace scored
