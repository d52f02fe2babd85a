// The dynamic batcher: a bounded FIFO of validated score requests and one worker thread that packs
// them into Engine::Score() calls.
//
// Packing: the worker waits until a request is queued, then waits at most `batch_timeout` (counted
// from the oldest queued request's arrival) for more tokens to arrive, stopping early once the queued
// tokens reach `max_batch_tokens`. It then takes requests in arrival order while their summed length
// stays <= max_batch_tokens (a request longer than that never enters: Submit rejects it) and makes
// one Engine::Score() call. Requests whose deadline has passed, or that were cancelled, are dropped
// before the call. The engine promises bitwise-identical results for a sequence whatever else is in
// the batch, so batching never changes a result.
//
// Engine::Score() answers each sequence on its own, so a request the engine rejects fails alone and the
// rest of its batch is served from the same call. A result holding a NaN or an infinity (a log-probability,
// an entropy, a top-k or reference log-probability, a KL divergence: NaN/Inf in a model's activations, e.g.
// from a corrupted weight the loader does not scan) is never passed on: that request fails alone with
// INTERNAL naming the first such position (CheckFiniteResult) and `on_nonfinite` is called. If the engine's
// fatal_status() turns non-OK, the batch and everything queued fail with UNAVAILABLE, later Submit() calls
// are refused with UNAVAILABLE, and `on_fatal` is called once (from the worker thread).
//
// Completion: for every accepted request `done` is called exactly once, from the worker thread or
// from inside Cancel() / Shutdown(), with the result or one of
//   DEADLINE_EXCEEDED  its deadline passed before its batch started
//   CANCELLED          Cancel() removed it from the queue
//   UNAVAILABLE        the engine failed fatally
//   INTERNAL           its result was not finite (CheckFiniteResult)
//   (any engine error) the engine rejected it
// `done` must not call back into the Batcher (it may run under no batcher lock, but Cancel() and
// Shutdown() invoke it synchronously).
//
// Thread-safety: all methods are thread-safe.
#ifndef SCORED_SERVER_BATCHER_H_
#define SCORED_SERVER_BATCHER_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "engine/engine.h"

namespace scored {

struct BatcherOptions {
  int64_t max_batch_tokens = 16384;  // most tokens per Engine::Score() call; also the longest request
  int64_t max_queue = 256;           // most requests waiting (not yet in an engine call)
  absl::Duration batch_timeout = absl::Microseconds(2000);  // longest wait to fill a batch

  // Observers (optional). on_batch: from the worker thread after each engine call that scored at least one
  // sequence, with the summed tokens, number of sequences and scored positions of those it scored.
  // on_queue_depth: after every change of the queue, under the batcher's lock (so reports arrive in order; it
  // must be cheap and must not call back into the Batcher).
  std::function<void(int64_t batch_tokens, int num_sequences, int64_t num_scored)> on_batch;
  std::function<void(int64_t queue_depth)> on_queue_depth;
  std::function<void(const absl::Status& fatal)> on_fatal;
  // From the worker thread, once per request whose result was not finite (before its `done`).
  std::function<void()> on_nonfinite;
  // on_in_flight: requests queued or in the engine's batch (outstanding()), after every change, under the
  // batcher's lock like on_queue_depth. on_queue_wait: from the worker thread, once per request that goes
  // into an engine call, its seconds from Submit to that call. on_compute: from the worker thread, each
  // Engine::Score() call's wall time in seconds.
  std::function<void(int64_t in_flight)> on_in_flight;
  std::function<void(double seconds)> on_queue_wait;
  std::function<void(double seconds)> on_compute;
};

// OK when every log-probability, entropy, top-k log-probability, reference log-probability and KL divergence
// of `result` is finite (a log-softmax of finite logits always is); else INTERNAL "non-finite log-probability
// (nan) at position 17 (NaN/Inf in the model's activations)", naming the first bad value's sequence position
// (result index i is position max(1, request.score_from) + i).
absl::Status CheckFiniteResult(const ScoreRequest& request, const ScoreResult& result);

class Batcher {
 public:
  using DoneCallback = std::function<void(absl::StatusOr<ScoreResult>)>;

  // `engine` must outlive the Batcher. Starts the worker thread.
  static absl::StatusOr<std::unique_ptr<Batcher>> Create(Engine* engine, BatcherOptions options);
  ~Batcher();  // Shutdown()

  Batcher(const Batcher&) = delete;
  Batcher& operator=(const Batcher&) = delete;

  // Queues one request (already validated against the model's limits). Returns a ticket for
  // Cancel(). Errors (then `done` is never called): RESOURCE_EXHAUSTED when max_queue requests are
  // waiting; OUT_OF_RANGE if it has more than max_batch_tokens tokens; UNAVAILABLE after Shutdown()
  // began or after a fatal engine error; DEADLINE_EXCEEDED if `deadline` has already passed.
  absl::StatusOr<uint64_t> Submit(ScoreRequest request, absl::Time deadline, DoneCallback done);

  // Drops a request that is still queued and calls its `done` with CANCELLED (synchronously, before
  // returning true). Returns false if it already runs in the engine or has completed; it then
  // completes normally.
  bool Cancel(uint64_t ticket);

  // Refuses new requests (UNAVAILABLE), lets the worker finish everything queued, joins it.
  // Idempotent.
  void Shutdown();

  int64_t queue_depth() const;

  // Requests queued or in the engine's current batch: what a drain still owes its callers. A batch leaves
  // it in the same step as its results enter answered_ok(), so the two read together (Account) never count a
  // request in both.
  int64_t outstanding() const;
  // Requests answered with a result (OK) since the Batcher started: a drain's progress.
  int64_t answered_ok() const;
  // outstanding() and answered_ok() at one instant.
  struct Account {
    int64_t outstanding = 0;
    int64_t answered_ok = 0;
  };
  Account account() const;

  // OK until the engine failed fatally; then that failure, forever.
  absl::Status fatal_status() const;

 private:
  struct Item {
    uint64_t ticket;
    ScoreRequest request;
    absl::Time deadline;
    absl::Time enqueued;
    DoneCallback done;
  };

  Batcher(Engine* engine, BatcherOptions options);
  void WorkerLoop();
  // Runs one batch; fails all of it with UNAVAILABLE if the engine turns fatal.
  void RunBatch(std::vector<Item> batch);
  // The batch's requests leave outstanding() and the in-flight report in one locked step, before any of their
  // `done` runs: a client that holds its answer sees neither count still owing it (Account, the metrics).
  void LeaveOutstanding(int num_ok) ABSL_LOCKS_EXCLUDED(mu_);
  void ReportQueueDepth(int64_t depth) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  Engine* const engine_;
  const BatcherOptions options_;

  mutable absl::Mutex mu_;
  std::deque<Item> queue_ ABSL_GUARDED_BY(mu_);
  int64_t queued_tokens_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t running_ ABSL_GUARDED_BY(mu_) = 0;      // requests of the batch in the engine now
  int64_t answered_ok_ ABSL_GUARDED_BY(mu_) = 0;  // results handed to `done`
  uint64_t next_ticket_ ABSL_GUARDED_BY(mu_) = 1;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status fatal_ ABSL_GUARDED_BY(mu_);

  absl::Mutex shutdown_mu_;  // serializes Shutdown() callers around the join
  std::thread worker_;
};

}  // namespace scored

#endif  // SCORED_SERVER_BATCHER_H_
