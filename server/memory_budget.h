// The server-wide admission limits of `scored`: one memory budget for everything the server holds on behalf
// of its clients (--max_buffered_bytes), and the cap on client connections with calls in progress
// (--max_connections).
//
// MemoryBudget: what is charged (server/README.md "Memory budget and connection caps"):
//   - a queued or running Score request: its token ids (the copies the service and the batcher keep) plus an
//     upper bound of its serialized response (EstimateScoreResponseBytes), reserved before it is queued;
//   - a response computed but not yet sent (ScoreStream buffers them until the client reads): its serialized
//     size, which replaces the reservation once known, until the write completes or the stream ends;
//   - a unary call's request bytes and parsed message while it runs; a Tokenize's text and its output.
// Charges are reserved before the work starts: TryCharge refuses (RESOURCE_EXHAUSTED naming the flag and
// the numbers) when the budget would be exceeded, so the budget bounds what is held. ForceCharge takes bytes
// that already exist and are owed to a client (an error response, a response slightly larger than its
// reservation); they are small, and their number is bounded by --stream_window per stream.
//
// Units: bytes. Thread-safety: every method is thread-safe; `on_change` runs under the budget's lock, after
// each change, so the reported values arrive in order (it must be cheap and must not call the budget).
#ifndef SCORED_SERVER_MEMORY_BUDGET_H_
#define SCORED_SERVER_MEMORY_BUDGET_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "engine/engine.h"

namespace scored {

class MemoryBudget {
 public:
  // `limit_bytes` > 0. `on_change(used_bytes)` (optional) observes every change.
  explicit MemoryBudget(int64_t limit_bytes, std::function<void(int64_t used_bytes)> on_change = nullptr);

  MemoryBudget(const MemoryBudget&) = delete;
  MemoryBudget& operator=(const MemoryBudget&) = delete;

  // Bytes charged to the budget, released when the Charge is destroyed, released or moved from. A default
  // Charge holds nothing. The budget must outlive every Charge taken from it.
  class Charge {
   public:
    Charge() = default;
    Charge(Charge&& other) noexcept;
    Charge& operator=(Charge&& other) noexcept;
    Charge(const Charge&) = delete;
    Charge& operator=(const Charge&) = delete;
    ~Charge() { Release(); }

    int64_t bytes() const { return bytes_; }
    // Re-charges to `bytes` (>= 0) without a limit check: for sizes that became known once the work was
    // done (a serialized response replacing its reservation). No-op on a default Charge.
    void Resize(int64_t bytes);
    void Release();

   private:
    friend class MemoryBudget;
    Charge(MemoryBudget* budget, int64_t bytes) : budget_(budget), bytes_(bytes) {}
    MemoryBudget* budget_ = nullptr;
    int64_t bytes_ = 0;
  };

  // Charges `bytes` (>= 0) if used() + bytes <= limit() - headroom; else RESOURCE_EXHAUSTED "the server's
  // memory budget is spent: this request needs N bytes, U of --max_buffered_bytes=L are in use ...".
  // `headroom` (0 <= headroom <= limit) keeps part of the budget for other callers (ScoreStream leaves
  // kStreamHeadroomDivisor of it to unary calls).
  absl::StatusOr<Charge> TryCharge(int64_t bytes, int64_t headroom = 0);
  // Charges `bytes` (>= 0) whatever the limit (see the header comment).
  Charge ForceCharge(int64_t bytes);

  int64_t used() const;
  int64_t limit() const { return limit_; }

  // ScoreStreams together may fill the budget only up to limit - limit / kStreamHeadroomDivisor: the rest is
  // kept for unary calls, so that streams whose clients never read cannot lock out a unary client.
  static constexpr int64_t kStreamHeadroomDivisor = 4;
  // One ScoreStream may hold at most 1/kStreamShareDivisor of the streams' part (and always its first
  // request): a few streams that never read cannot take all of it from the others. At the default budget
  // the --stream_window binds first.
  static constexpr int64_t kStreamShareDivisor = 8;

 private:
  void Add(int64_t delta);

  const int64_t limit_;
  const std::function<void(int64_t)> on_change_;
  mutable absl::Mutex mu_;
  int64_t used_ ABSL_GUARDED_BY(mu_) = 0;
};

// Bounds of --max_buffered_bytes and its default (0 = DefaultMaxBufferedBytes()).
constexpr int64_t kMinMaxBufferedBytes = int64_t{1} << 20;  // 1 MiB: one long top-k response
constexpr int64_t kMaxMaxBufferedBytes = int64_t{1} << 40;  // 1 TiB
// A quarter of the memory this process may use (physical memory, or the cgroup's memory.max when lower),
// clamped to [256 MiB, 16 GiB]; 1 GiB when neither can be read. `description` (may be null) receives how the
// value was found, for the start-up log ("1/4 of 62.7 GiB physical memory").
int64_t DefaultMaxBufferedBytes(std::string* description);

// Upper bound of the serialized size of the ScoreResponse to `request` (every optional array it asked for,
// its ids echoed, the widest varints), bytes. 5 bytes per id, 13 per top-k entry, 30 per scored position,
// 8 per candidate id (its logprob, and the id the engine request holds), 4 per min_logprob.
int64_t EstimateScoreResponseBytes(const ScoreRequest& request);
// Bytes per token id of a queued Score request: the copy the service keeps plus the batcher's.
constexpr int64_t kQueuedBytesPerToken = 2 * sizeof(int32_t);

// The cap on client connections (gRPC peers, "ipv4:127.0.0.1:54321") with Scorer calls in progress at once.
// gRPC 1.51 offers no cap on accepted connections (GRPC_ARG_MAX_ALLOWED_INCOMING_CONNECTIONS came in a later
// release), so a connection is counted from its first call in progress to the end of its last one; an idle
// connection holds no request memory and is not counted.
//
// Thread-safety: every method is thread-safe; `on_change` runs under the limiter's lock.
class ConnectionLimiter {
 public:
  // `max_connections` > 0. `on_change(connections)` (optional) observes every change of the count.
  explicit ConnectionLimiter(int64_t max_connections, std::function<void(int64_t)> on_change = nullptr);

  ConnectionLimiter(const ConnectionLimiter&) = delete;
  ConnectionLimiter& operator=(const ConnectionLimiter&) = delete;

  // One call of one connection, released when destroyed, released or moved from. The limiter must outlive
  // it.
  class Slot {
   public:
    Slot() = default;
    Slot(Slot&& other) noexcept;
    Slot& operator=(Slot&& other) noexcept;
    Slot(const Slot&) = delete;
    Slot& operator=(const Slot&) = delete;
    ~Slot() { Release(); }
    void Release();

   private:
    friend class ConnectionLimiter;
    Slot(ConnectionLimiter* limiter, std::string peer) : limiter_(limiter), peer_(std::move(peer)) {}
    ConnectionLimiter* limiter_ = nullptr;
    std::string peer_;
  };

  // A call of `peer` begins. RESOURCE_EXHAUSTED naming --max_connections when `peer` has no call in
  // progress and max_connections other peers do.
  absl::StatusOr<Slot> Acquire(const std::string& peer);

  int64_t connections() const;

 private:
  void ReleasePeer(const std::string& peer);

  const int64_t max_connections_;
  const std::function<void(int64_t)> on_change_;
  mutable absl::Mutex mu_;
  std::map<std::string, int64_t> calls_ ABSL_GUARDED_BY(mu_);  // peer -> calls in progress (> 0)
};

}  // namespace scored

#endif  // SCORED_SERVER_MEMORY_BUDGET_H_
