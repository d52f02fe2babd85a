// NCCL communicators for tensor parallelism inside one process: one rank per local GPU, each driven by its
// own host thread and stream (DESIGN.md §7, engine/dist/README.md).
//
// Failure model: every communicator is NON-BLOCKING (ncclConfig_t.blocking = 0), so no NCCL call can hang
// the calling thread: init, collectives and finalize return at once (ncclInProgress) and this class polls
// them with a deadline. A collective whose peers never arrive leaves a kernel spinning on the GPU:
// Synchronize() waits for the stream with a timeout and, when it passes, calls ncclCommAbort, which makes
// the kernel exit. Any NCCL error (a call's result, ncclCommGetAsyncError, a timeout, an abort) becomes
// the communicator's STICKY fatal status: every later call returns it, and the communicator is aborted.
// NcclWatchdog polls a set of communicators from its own thread and reports the first fatal status once
// (the server then sets health NOT_SERVING and exits non-zero) after aborting all of them, so the peers of
// a failed rank unblock too.
//
// This header includes no NCCL or CUDA header (engine.h and its users stay CUDA-free): streams are
// CUstream_st* (= cudaStream_t), the communicator is an opaque ncclComm*.
//
// Thread-safety: one thread per communicator issues its collectives and Synchronize(); CheckAsyncError(),
// Abort() and status() may be called from any thread at any time (the watchdog does).
// Uses only NCCL APIs present in NCCL 2.28.3.
#ifndef SCORED_ENGINE_DIST_NCCL_COMMUNICATOR_H_
#define SCORED_ENGINE_DIST_NCCL_COMMUNICATOR_H_

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

struct ncclComm;     // nccl.h: typedef struct ncclComm* ncclComm_t
struct CUstream_st;  // cuda_runtime_api.h: typedef struct CUstream_st* cudaStream_t

namespace scored::dist {

enum class ReduceDType { kF32, kBF16, kI32 };  // kI32: e.g. the vocab-parallel rank counts
enum class ReduceOp { kSum, kMax };

// ncclUniqueId's bytes (NCCL_UNIQUE_ID_BYTES = 128), for creating ranks from several threads.
struct NcclUniqueId {
  std::array<char, 128> bytes{};
};

struct NcclOptions {
  absl::Duration init_timeout = absl::Seconds(120);    // communicator creation
  absl::Duration op_timeout = absl::Seconds(60);       // Synchronize() default
  absl::Duration destroy_timeout = absl::Seconds(30);  // finalize before destroy (then abort)
  absl::Duration poll_interval = absl::Microseconds(50);
};

class NcclCommunicator {
 public:
  // Ranks 0..n-1 on local devices `devices[0..n-1]` (distinct CUDA ordinals), created together from the
  // calling thread (ncclGetUniqueId + ncclCommInitRankConfig for every rank in one NCCL group).
  // INVALID_ARGUMENT for an empty or repeated device list; DEADLINE_EXCEEDED when init does not finish in
  // options.init_timeout (all ranks aborted); INTERNAL naming the NCCL/CUDA error otherwise.
  static absl::StatusOr<std::vector<std::unique_ptr<NcclCommunicator>>> CreateLocal(
      const std::vector<int>& devices, const NcclOptions& options = NcclOptions());

  // One rank, created by its own thread (every rank's thread calls this with the same id at about the same
  // time; the id comes from NewUniqueId() on one of them).
  static absl::StatusOr<NcclUniqueId> NewUniqueId();
  static absl::StatusOr<std::unique_ptr<NcclCommunicator>> CreateRank(
      const NcclUniqueId& id, int num_ranks, int rank, int device,
      const NcclOptions& options = NcclOptions());

  // Finalizes (flushing issued work, bounded by destroy_timeout) and destroys; aborts instead when the
  // communicator is in error or finalize times out. Never blocks longer than destroy_timeout.
  ~NcclCommunicator();
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const { return rank_; }
  int num_ranks() const { return num_ranks_; }
  int device() const { return device_; }

  // In-place allowed (send == recv). Enqueues a sum all-reduce of `count` elements on `stream` (a stream
  // of device()); returns once it is enqueued, not when it completes: call Synchronize() (or order later
  // work on the stream) to wait. send, recv: device arrays [count] of `dtype`.
  absl::Status AllReduceSum(const void* send, void* recv, int64_t count, ReduceDType dtype,
                            CUstream_st* stream) {
    return AllReduce(send, recv, count, dtype, ReduceOp::kSum, stream);
  }
  // kMax: e.g. the per-token activation amax of row-parallel W8A8 layers
  // (ShardedLinear::act_amax_all_reduce).
  absl::Status AllReduce(const void* send, void* recv, int64_t count, ReduceDType dtype, ReduceOp op,
                         CUstream_st* stream);

  // Gathers `bytes_per_rank` bytes from every rank into recv [num_ranks, bytes_per_rank] (rank order),
  // enqueued on `stream`. In place when send == recv + rank() * bytes_per_rank.
  absl::Status AllGatherBytes(const void* send, void* recv, int64_t bytes_per_rank, CUstream_st* stream);

  // Waits until `stream` has drained, polling the stream and the communicator's async error. On timeout
  // the communicator is aborted (the stuck kernel exits) and DEADLINE_EXCEEDED becomes its sticky status.
  absl::Status Synchronize(CUstream_st* stream, absl::Duration timeout);
  absl::Status Synchronize(CUstream_st* stream) { return Synchronize(stream, options_.op_timeout); }

  // Polls ncclCommGetAsyncError once; an error becomes the sticky status (and aborts). Returns status().
  absl::Status CheckAsyncError();

  // Aborts the communicator (idempotent): pending NCCL kernels exit, later calls fail with `reason`
  // (kept if a fatal status is already set).
  void Abort(const absl::Status& reason);

  // OK, or the sticky fatal status.
  absl::Status status() const;

  // The raw communicator (nullptr once aborted or destroyed), for code that issues other NCCL calls;
  // it must follow this class's non-blocking protocol.
  ncclComm* raw() const;

 private:
  friend absl::Status DestroyCommunicators(std::vector<std::unique_ptr<NcclCommunicator>>* comms);
  NcclCommunicator(ncclComm* comm, int rank, int num_ranks, int device, const NcclOptions& options);
  // Records `error` as the sticky status (first one wins) and aborts. Returns the sticky status.
  absl::Status Fail(const absl::Status& error);
  // Polls until the last call's ncclInProgress resolves or `deadline` passes.
  absl::Status WaitNotInProgress(absl::Time deadline, const char* what);
  // The result (an ncclResult_t) of enqueueing `what`: OK, a wait for ncclInProgress, or Fail().
  absl::Status AfterEnqueue(int result, const std::string& what);

  mutable absl::Mutex mu_;
  ncclComm* comm_ ABSL_GUARDED_BY(mu_);
  const int rank_;
  const int num_ranks_;
  const int device_;
  const NcclOptions options_;
  absl::Status fatal_ ABSL_GUARDED_BY(mu_);
  bool aborted_ ABSL_GUARDED_BY(mu_) = false;
};

// Finalizes every communicator first and then destroys them, so ranks whose finalize waits on the others
// do not run into destroy_timeout one after another (what destroying them one by one in a single thread
// would do). Leaves `comms` empty. Returns the first error (the communicators are freed regardless).
absl::Status DestroyCommunicators(std::vector<std::unique_ptr<NcclCommunicator>>* comms);

// Polls CheckAsyncError() of every communicator every `interval` from its own thread. On the first fatal
// status it aborts all the communicators and calls on_fatal(status) once (from the watchdog thread), then
// stops polling. The communicators must outlive the watchdog.
class NcclWatchdog {
 public:
  NcclWatchdog(std::vector<NcclCommunicator*> comms, absl::Duration interval,
               std::function<void(const absl::Status&)> on_fatal);
  ~NcclWatchdog();  // stops and joins the thread
  NcclWatchdog(const NcclWatchdog&) = delete;
  NcclWatchdog& operator=(const NcclWatchdog&) = delete;

  // The fatal status reported, or OK.
  absl::Status fatal() const;

 private:
  void Run();

  const std::vector<NcclCommunicator*> comms_;
  const absl::Duration interval_;
  const std::function<void(const absl::Status&)> on_fatal_;
  mutable absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status fatal_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace scored::dist

#endif  // SCORED_ENGINE_DIST_NCCL_COMMUNICATOR_H_
