// The bidi ScoreStream call on the callback API: one StreamReactor per stream (its contract is the
// ScorerService's, server/scorer_service.h: the window, the memory budget's share and parking, every
// request read answered).
//
// The machine: all state changes happen under mu_ in one step that also decides the next gRPC operations
// (Actions); the operations run after the lock is released. `busy_` counts operations decided but not yet
// started, and Finish is only decided when nothing is busy, pending, being written or (unless the stream is
// ending) being read, so `this` stays alive while a thread holds an operation to run; a thread left with
// nothing to run must not touch it again (Perform).
//
// Messages travel as bytes: each read is parsed here (one that does not parse is answered with an error
// response, not taken as the end of the stream) and each response is serialized when it is queued.
//
// Lifetime: created by ScorerService::ScoreStream with the call's connection slot, registered with the
// service until gRPC's OnDone (which unregisters and deletes it). Thread-safety: gRPC's threads, the
// batcher's worker and the tokenize pool call it; every member below mu_ is guarded by it.
#ifndef SCORED_SERVER_SCORE_STREAM_H_
#define SCORED_SERVER_SCORE_STREAM_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <set>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "engine/engine.h"
#include "grpcpp/grpcpp.h"
#include "scored/v1/scorer.pb.h"
#include "server/memory_budget.h"
#include "server/scorer_service.h"

namespace scored {

class StreamReactor final : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  StreamReactor(ScorerService* service, grpc::CallbackServerContext* context, ConnectionLimiter::Slot slot);
  ~StreamReactor() override;

  // The gRPC operations one step decided, to run once mu_ is released.
  struct Actions {
    const grpc::ByteBuffer* write = nullptr;
    bool read = false;
    bool finish = false;
    grpc::Status status;
  };

  // Called once, right after construction (by ScorerService::ScoreStream); `draining`: the server is
  // already shutting down.
  void Begin(bool draining);

  // Server shutdown. Returns the actions the caller must Perform() (after releasing its own locks).
  Actions MarkDraining();

  // Runs `a` on `self`. With nothing to do it returns without touching `self`: once a thread has released
  // mu_ holding no write, read or finish, another thread may finish the stream and delete the reactor, so
  // even a member call on it would be a use after free.
  static void Perform(StreamReactor* self, const Actions& a);

  void OnReadDone(bool ok) override;
  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

 private:
  // A serialized ScoreResponse and its charge to the memory budget, released once it is written.
  struct Buffered {
    grpc::ByteBuffer bytes;
    MemoryBudget::Charge charge;
  };
  // A validated request not yet queued: one that waits for the budget (parked_) or is being queued.
  struct Parked {
    ScoreRequest request;
    uint64_t request_id;
    bool echo;  // the request gave text: echo its token ids
    absl::Time start;
  };
  // A queued request: its ticket (written by QueueLocked under mu_ before OnResult can take mu_) and its
  // reservation, which OnResult turns into the response's charge.
  struct InFlight {
    uint64_t ticket = 0;
    MemoryBudget::Charge charge;
  };

  void Run(const Actions& a);
  // Charges `p` to the memory budget (its ids and the bound of its response; streams may fill the budget up
  // to its last 1/kStreamHeadroomDivisor, one stream to 1/kStreamShareDivisor of that unless it holds
  // nothing) and queues it. When the budget or the stream's share is spent and this stream has
  // responses of its own in flight or unwritten, `p` is parked instead: the stream stops reading and
  // DecideLocked retries it after each of its own events (a result, a write), which free memory. With none
  // (nothing of its own would ever free memory for it), the budget's RESOURCE_EXHAUSTED is returned, to be
  // answered as an `error` response. Any other error of Batcher::Submit is returned too.
  // Requests park in order: one arriving while others are parked (a text whose tokenization finished, a read
  // completing) joins the end of the line; ResolveParkedLocked passes at_front for the head of the line.
  absl::Status QueueLocked(Parked p, bool at_front = false) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The parked request, if any: answered (cancelled or shutting down) or queued again (see QueueLocked).
  void ResolveParkedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // scored_streams_paused counts this stream while it has parked requests.
  void UpdatePausedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // On a pool thread: tokenizes a text request (stopping past max_seq_len), then submits its ids or
  // answers its error. OnReadDone counted it in pending_, which keeps the reactor alive until here.
  void TokenizeThenSubmit(v1::ScoreRequest* request, uint64_t request_id, absl::Time start);
  void OnResult(const ScoreRequest& request, const std::shared_ptr<InFlight>& in_flight, uint64_t request_id,
                bool echo, absl::Time start, absl::StatusOr<ScoreResult> result);
  void EnqueueErrorLocked(uint64_t request_id, const absl::Status& status, absl::Time start)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Actions DecideLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  ScorerService* const service_;
  const ScoreGate& gate_;
  const int stream_window_;
  grpc::CallbackServerContext* const context_;
  grpc::ByteBuffer read_buf_;           // owned by the read in flight
  const ConnectionLimiter::Slot slot_;  // this call's connection slot, released when gRPC deletes the reactor
  std::atomic<bool> tokenize_cancelled_{false};  // set by OnCancel, polled by running tokenizations

  absl::Mutex mu_;
  // Serialized ScoreResponses; the front is being written if writing_.
  std::deque<Buffered> responses_ ABSL_GUARDED_BY(mu_);
  // Requests that wait for the budget, in order (no read is started while any does; see QueueLocked): the one
  // read while it was spent, and texts whose tokenization finished meanwhile.
  std::deque<Parked> parked_ ABSL_GUARDED_BY(mu_);
  bool paused_ ABSL_GUARDED_BY(mu_) = false;  // counted in scored_streams_paused
  std::set<uint64_t> tickets_ ABSL_GUARDED_BY(mu_);
  int pending_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t pending_bytes_ ABSL_GUARDED_BY(mu_) = 0;  // the reservations of the pending_ requests
  int busy_ ABSL_GUARDED_BY(mu_) = 0;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool read_in_flight_ ABSL_GUARDED_BY(mu_) = false;
  bool reads_done_ ABSL_GUARDED_BY(mu_) = false;
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  bool write_failed_ ABSL_GUARDED_BY(mu_) = false;
  bool finish_called_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace scored

#endif  // SCORED_SERVER_SCORE_STREAM_H_
