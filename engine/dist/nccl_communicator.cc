// Non-blocking NCCL communicators with deadlines, abort and a sticky fatal status (see the header).
//
// NCCL's non-blocking protocol (ncclConfig_t.blocking = 0): a call may return ncclInProgress; the caller
// then polls ncclCommGetAsyncError(comm) until it is no longer ncclInProgress before the next call on that
// communicator. ncclCommAbort and ncclCommDestroy are blocking; ncclCommFinalize is not.
#include "engine/dist/nccl_communicator.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace scored::dist {
namespace {

static_assert(sizeof(ncclUniqueId) == sizeof(NcclUniqueId::bytes), "ncclUniqueId size");

absl::Status NcclError(const std::string& what, ncclResult_t r, ncclComm_t comm) {
  std::string detail;
  if (comm != nullptr) {
    const char* last = ncclGetLastError(comm);
    if (last != nullptr && last[0] != '\0') detail = absl::StrCat(" (", last, ")");
  }
  return absl::InternalError(absl::StrCat(what, " failed: ", ncclGetErrorString(r), detail));
}

absl::Status CudaError(const std::string& what, cudaError_t e) {
  return absl::InternalError(
      absl::StrCat(what, " failed: ", cudaGetErrorName(e), ": ", cudaGetErrorString(e)));
}

bool Ok(ncclResult_t r) { return r == ncclSuccess || r == ncclInProgress; }

ncclConfig_t NonBlockingConfig() {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  return config;
}

// Polls ncclCommGetAsyncError of every comm until none is in progress. DEADLINE_EXCEEDED at `deadline`.
absl::Status PollUntilDone(const std::vector<ncclComm_t>& comms, absl::Time deadline, absl::Duration interval,
                           const std::string& what) {
  for (ncclComm_t comm : comms) {
    while (true) {
      ncclResult_t state = ncclSuccess;
      const ncclResult_t r = ncclCommGetAsyncError(comm, &state);
      if (r != ncclSuccess) return NcclError(what + ": ncclCommGetAsyncError", r, comm);
      if (state == ncclSuccess) break;
      if (state != ncclInProgress) return NcclError(what, state, comm);
      if (absl::Now() >= deadline) {
        return absl::DeadlineExceededError(absl::StrCat(what, " did not finish in time"));
      }
      absl::SleepFor(interval);
    }
  }
  return absl::OkStatus();
}

// The calling thread's current device is restored on scope exit.
class DeviceRestorer {
 public:
  DeviceRestorer() { ok_ = cudaGetDevice(&device_) == cudaSuccess; }
  ~DeviceRestorer() {
    if (ok_) static_cast<void>(cudaSetDevice(device_));
  }
  DeviceRestorer(const DeviceRestorer&) = delete;
  DeviceRestorer& operator=(const DeviceRestorer&) = delete;

 private:
  int device_ = 0;
  bool ok_ = false;
};

}  // namespace

NcclCommunicator::NcclCommunicator(ncclComm* comm, int rank, int num_ranks, int device,
                                   const NcclOptions& options)
    : comm_(comm), rank_(rank), num_ranks_(num_ranks), device_(device), options_(options) {}

absl::StatusOr<std::vector<std::unique_ptr<NcclCommunicator>>> NcclCommunicator::CreateLocal(
    const std::vector<int>& devices, const NcclOptions& options) {
  const int n = static_cast<int>(devices.size());
  if (n == 0) return absl::InvalidArgumentError("no devices for the NCCL communicator");
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < i; ++j) {
      if (devices[static_cast<size_t>(i)] == devices[static_cast<size_t>(j)]) {
        return absl::InvalidArgumentError(absl::StrCat("device ", devices[static_cast<size_t>(i)],
                                                       " listed twice for the NCCL communicator"));
      }
    }
  }
  DeviceRestorer restore;
  ncclUniqueId id;
  const ncclResult_t idr = ncclGetUniqueId(&id);
  if (idr != ncclSuccess) return NcclError("ncclGetUniqueId", idr, nullptr);
  ncclConfig_t config = NonBlockingConfig();
  std::vector<ncclComm_t> comms(static_cast<size_t>(n), nullptr);
  absl::Status st;
  ncclResult_t r = ncclGroupStart();
  if (r != ncclSuccess) return NcclError("ncclGroupStart", r, nullptr);
  for (int i = 0; i < n && st.ok(); ++i) {
    const cudaError_t e = cudaSetDevice(devices[static_cast<size_t>(i)]);
    if (e != cudaSuccess) {
      st = CudaError(absl::StrCat("cudaSetDevice(", devices[static_cast<size_t>(i)], ")"), e);
      break;
    }
    r = ncclCommInitRankConfig(&comms[static_cast<size_t>(i)], n, id, i, &config);
    if (!Ok(r)) st = NcclError(absl::StrCat("ncclCommInitRankConfig(rank ", i, " of ", n, ")"), r, nullptr);
  }
  r = ncclGroupEnd();
  if (st.ok() && !Ok(r)) st = NcclError("ncclGroupEnd (communicator init)", r, nullptr);
  std::vector<ncclComm_t> created;
  for (ncclComm_t c : comms) {
    if (c != nullptr) created.push_back(c);
  }
  if (st.ok()) {
    st = PollUntilDone(created, absl::Now() + options.init_timeout, options.poll_interval,
                       absl::StrCat("NCCL init of ", n, " ranks"));
  }
  if (!st.ok()) {
    for (ncclComm_t c : created) static_cast<void>(ncclCommAbort(c));
    return st;
  }
  std::vector<std::unique_ptr<NcclCommunicator>> out;
  for (int i = 0; i < n; ++i) {
    out.push_back(std::unique_ptr<NcclCommunicator>(
        new NcclCommunicator(comms[static_cast<size_t>(i)], i, n, devices[static_cast<size_t>(i)], options)));
  }
  return out;
}

absl::StatusOr<NcclUniqueId> NcclCommunicator::NewUniqueId() {
  ncclUniqueId id;
  const ncclResult_t r = ncclGetUniqueId(&id);
  if (r != ncclSuccess) return NcclError("ncclGetUniqueId", r, nullptr);
  NcclUniqueId out;
  std::memcpy(out.bytes.data(), id.internal, sizeof(id.internal));
  return out;
}

absl::StatusOr<std::unique_ptr<NcclCommunicator>> NcclCommunicator::CreateRank(const NcclUniqueId& uid,
                                                                               int num_ranks, int rank,
                                                                               int device,
                                                                               const NcclOptions& options) {
  if (num_ranks < 1 || rank < 0 || rank >= num_ranks) {
    return absl::InvalidArgumentError(absl::StrCat("NCCL rank ", rank, " outside [0, ", num_ranks, ")"));
  }
  const cudaError_t e = cudaSetDevice(device);
  if (e != cudaSuccess) return CudaError(absl::StrCat("cudaSetDevice(", device, ")"), e);
  ncclUniqueId id;
  std::memcpy(id.internal, uid.bytes.data(), sizeof(id.internal));
  ncclConfig_t config = NonBlockingConfig();
  ncclComm_t comm = nullptr;
  const ncclResult_t r = ncclCommInitRankConfig(&comm, num_ranks, id, rank, &config);
  absl::Status st;
  if (!Ok(r))
    st = NcclError(absl::StrCat("ncclCommInitRankConfig(rank ", rank, " of ", num_ranks, ")"), r, comm);
  if (st.ok()) {
    st = PollUntilDone({comm}, absl::Now() + options.init_timeout, options.poll_interval,
                       absl::StrCat("NCCL init of rank ", rank, " of ", num_ranks));
  }
  if (!st.ok()) {
    if (comm != nullptr) static_cast<void>(ncclCommAbort(comm));
    return st;
  }
  return std::unique_ptr<NcclCommunicator>(new NcclCommunicator(comm, rank, num_ranks, device, options));
}

NcclCommunicator::~NcclCommunicator() {
  absl::MutexLock lock(&mu_);
  if (comm_ == nullptr) return;
  static_cast<void>(cudaSetDevice(device_));
  if (fatal_.ok()) {
    const ncclResult_t r = ncclCommFinalize(comm_);
    if (Ok(r) && PollUntilDone({comm_}, absl::Now() + options_.destroy_timeout, options_.poll_interval,
                               "ncclCommFinalize")
                     .ok()) {
      static_cast<void>(ncclCommDestroy(comm_));
      comm_ = nullptr;
      return;
    }
  }
  static_cast<void>(ncclCommAbort(comm_));
  comm_ = nullptr;
}

ncclComm* NcclCommunicator::raw() const {
  absl::MutexLock lock(&mu_);
  return comm_;
}

absl::Status NcclCommunicator::status() const {
  absl::MutexLock lock(&mu_);
  return fatal_;
}

void NcclCommunicator::Abort(const absl::Status& reason) {
  absl::MutexLock lock(&mu_);
  if (fatal_.ok()) {
    fatal_ = reason.ok() ? absl::AbortedError(absl::StrCat("NCCL rank ", rank_, " aborted")) : reason;
  }
  if (aborted_) return;
  aborted_ = true;
  if (comm_ != nullptr) {
    static_cast<void>(cudaSetDevice(device_));
    static_cast<void>(ncclCommAbort(comm_));
    comm_ = nullptr;
  }
}

absl::Status NcclCommunicator::Fail(const absl::Status& error) {
  Abort(error);
  return status();
}

absl::Status NcclCommunicator::WaitNotInProgress(absl::Time deadline, const char* what) {
  while (true) {
    ncclResult_t state = ncclSuccess;
    {
      absl::MutexLock lock(&mu_);
      if (!fatal_.ok()) return fatal_;
      const ncclResult_t r = ncclCommGetAsyncError(comm_, &state);
      if (r != ncclSuccess) state = r;
    }
    if (state == ncclSuccess) return absl::OkStatus();
    if (state != ncclInProgress) {
      ncclComm* comm = raw();
      return Fail(NcclError(absl::StrCat(what, " on rank ", rank_), state, comm));
    }
    if (absl::Now() >= deadline) {
      return Fail(
          absl::DeadlineExceededError(absl::StrCat(what, " on rank ", rank_, " did not finish in time")));
    }
    absl::SleepFor(options_.poll_interval);
  }
}

absl::Status NcclCommunicator::AllReduce(const void* send, void* recv, int64_t count, ReduceDType dtype,
                                         ReduceOp op, CUstream_st* stream) {
  if (count < 0) return absl::InvalidArgumentError(absl::StrCat("all-reduce of ", count, " elements"));
  const ncclDataType_t type = dtype == ReduceDType::kF32    ? ncclFloat32
                              : dtype == ReduceDType::kBF16 ? ncclBfloat16
                                                            : ncclInt32;
  const ncclRedOp_t nccl_op = op == ReduceOp::kSum ? ncclSum : ncclMax;
  ncclResult_t r;
  {
    absl::MutexLock lock(&mu_);
    if (!fatal_.ok()) return fatal_;
    r = ncclAllReduce(send, recv, static_cast<size_t>(count), type, nccl_op, comm_, stream);
  }
  return AfterEnqueue(r, absl::StrCat("ncclAllReduce(", count, " elements)"));
}

absl::Status NcclCommunicator::AllGatherBytes(const void* send, void* recv, int64_t bytes_per_rank,
                                              CUstream_st* stream) {
  if (bytes_per_rank < 0)
    return absl::InvalidArgumentError(absl::StrCat("all-gather of ", bytes_per_rank, " bytes"));
  ncclResult_t r;
  {
    absl::MutexLock lock(&mu_);
    if (!fatal_.ok()) return fatal_;
    r = ncclAllGather(send, recv, static_cast<size_t>(bytes_per_rank), ncclUint8, comm_, stream);
  }
  return AfterEnqueue(r, absl::StrCat("ncclAllGather(", bytes_per_rank, " bytes)"));
}

absl::Status NcclCommunicator::AfterEnqueue(int result, const std::string& what) {
  const ncclResult_t r = static_cast<ncclResult_t>(result);
  if (r == ncclSuccess) return absl::OkStatus();
  if (r == ncclInProgress) return WaitNotInProgress(absl::Now() + options_.op_timeout, what.c_str());
  ncclComm* comm = raw();
  return Fail(NcclError(absl::StrCat(what, " on rank ", rank_), r, comm));
}

absl::Status NcclCommunicator::Synchronize(CUstream_st* stream, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    const cudaError_t e = cudaStreamQuery(stream);
    if (e == cudaSuccess) return CheckAsyncError();
    if (e != cudaErrorNotReady) {
      return Fail(CudaError(absl::StrCat("cudaStreamQuery on NCCL rank ", rank_), e));
    }
    const absl::Status st = CheckAsyncError();
    if (!st.ok()) return st;
    if (absl::Now() >= deadline) {
      return Fail(absl::DeadlineExceededError(absl::StrCat("NCCL rank ", rank_, ": stream did not drain in ",
                                                           absl::FormatDuration(timeout), "; aborted")));
    }
    absl::SleepFor(options_.poll_interval);
  }
}

absl::Status NcclCommunicator::CheckAsyncError() {
  ncclResult_t state = ncclSuccess;
  {
    absl::MutexLock lock(&mu_);
    if (!fatal_.ok()) return fatal_;
    const ncclResult_t r = ncclCommGetAsyncError(comm_, &state);
    if (r != ncclSuccess) state = r;
  }
  if (state == ncclSuccess || state == ncclInProgress) return absl::OkStatus();
  ncclComm* comm = raw();
  return Fail(NcclError(absl::StrCat("NCCL rank ", rank_, " async error"), state, comm));
}

absl::Status DestroyCommunicators(std::vector<std::unique_ptr<NcclCommunicator>>* comms) {
  absl::Status first;
  std::vector<NcclCommunicator*> finalizing;
  absl::Duration timeout = absl::ZeroDuration();
  for (const std::unique_ptr<NcclCommunicator>& c : *comms) {
    absl::MutexLock lock(&c->mu_);
    if (c->comm_ == nullptr || !c->fatal_.ok()) continue;
    static_cast<void>(cudaSetDevice(c->device_));
    const ncclResult_t r = ncclCommFinalize(c->comm_);
    if (!Ok(r)) {
      if (first.ok()) first = NcclError(absl::StrCat("ncclCommFinalize(rank ", c->rank_, ")"), r, c->comm_);
      continue;
    }
    finalizing.push_back(c.get());
    timeout = std::max(timeout, c->options_.destroy_timeout);
  }
  const absl::Time deadline = absl::Now() + timeout;
  for (NcclCommunicator* c : finalizing) {
    absl::MutexLock lock(&c->mu_);
    const absl::Status st = PollUntilDone({c->comm_}, deadline, c->options_.poll_interval,
                                          absl::StrCat("ncclCommFinalize(rank ", c->rank_, ")"));
    if (!st.ok()) {
      if (first.ok()) first = st;
      continue;
    }
    static_cast<void>(cudaSetDevice(c->device_));
    const ncclResult_t r = ncclCommDestroy(c->comm_);
    if (r != ncclSuccess && first.ok()) first = NcclError("ncclCommDestroy", r, nullptr);
    c->comm_ = nullptr;
  }
  comms->clear();  // the rest (in error, or finalize failed) are aborted by their destructors
  return first;
}

NcclWatchdog::NcclWatchdog(std::vector<NcclCommunicator*> comms, absl::Duration interval,
                           std::function<void(const absl::Status&)> on_fatal)
    : comms_(std::move(comms)), interval_(interval), on_fatal_(std::move(on_fatal)) {
  thread_ = std::thread([this] { Run(); });
}

NcclWatchdog::~NcclWatchdog() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  thread_.join();
}

absl::Status NcclWatchdog::fatal() const {
  absl::MutexLock lock(&mu_);
  return fatal_;
}

void NcclWatchdog::Run() {
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (mu_.AwaitWithTimeout(absl::Condition(&stop_), interval_)) return;
    }
    for (NcclCommunicator* c : comms_) {
      const absl::Status st = c->CheckAsyncError();
      if (st.ok()) continue;
      for (NcclCommunicator* other : comms_) other->Abort(st);
      {
        absl::MutexLock lock(&mu_);
        fatal_ = st;
      }
      if (on_fatal_) on_fatal_(st);
      return;
    }
  }
}

}  // namespace scored::dist
