// The threads that tokenize request text (Tokenize, `text` input of Score and ScoreStream), apart from
// gRPC's threads and the batcher's: a long text then occupies one of these few threads instead of a thread
// that token-id requests need, and a bounded queue in front of them refuses texts beyond it.
//
//   TokenizePool pool(TokenizePool::Options{/*threads=*/2, /*max_queue=*/64});
//   absl::Status queued = pool.Submit([...] { /* tokenize; EncodeLimits::stop polls pool.stopping() */ });
//   ...
//   pool.BeginShutdown(absl::Now() + grace);   // refuse new jobs; stopping() is true from then on
//   pool.Shutdown();                           // runs what is still queued, joins the threads
//
// A job that Submit accepted always runs exactly once (during shutdown too, when it finds stopping() true
// and answers at once): a job finishes a gRPC call, which would otherwise never end.
//
// Thread-safety: every method is thread-safe; Shutdown must not be called from a pool thread.
#ifndef SCORED_SERVER_TOKENIZE_POOL_H_
#define SCORED_SERVER_TOKENIZE_POOL_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace scored {

class TokenizePool {
 public:
  struct Options {
    int threads = 2;     // >= 1 (--tokenize_threads)
    int max_queue = 64;  // >= 1: jobs waiting for a thread (--tokenize_queue), not counting running ones
  };

  explicit TokenizePool(Options options);
  ~TokenizePool();  // Shutdown()
  TokenizePool(const TokenizePool&) = delete;
  TokenizePool& operator=(const TokenizePool&) = delete;

  // Queues `job` for a pool thread. RESOURCE_EXHAUSTED (naming --tokenize_queue) when max_queue jobs are
  // already waiting; UNAVAILABLE once BeginShutdown was called.
  absl::Status Submit(std::function<void()> job);

  // Refuses new jobs; from `stop_at` on stopping() is true, which running and queued jobs poll to stop.
  void BeginShutdown(absl::Time stop_at);
  // Whether jobs should stop now (the shutdown's stop time has passed).
  bool stopping() const { return absl::GetCurrentTimeNanos() >= stop_at_ns_.load(std::memory_order_relaxed); }

  // BeginShutdown(now) unless called before; runs the queued jobs; joins the threads. Idempotent.
  void Shutdown();

 private:
  void Work();
  bool HasWorkLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !queue_.empty() || exit_; }

  const Options options_;
  std::atomic<int64_t> stop_at_ns_{INT64_MAX};
  mutable absl::Mutex mu_;
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  bool refusing_ ABSL_GUARDED_BY(mu_) = false;  // BeginShutdown was called
  bool exit_ ABSL_GUARDED_BY(mu_) = false;      // threads exit once the queue is empty
  std::vector<std::thread> threads_;
  std::once_flag joined_;
};

}  // namespace scored

#endif  // SCORED_SERVER_TOKENIZE_POOL_H_
