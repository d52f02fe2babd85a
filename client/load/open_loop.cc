#include "client/load/open_loop.h"

#include <algorithm>
#include <atomic>
#include <memory>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/grpcpp.h"

namespace scored {
namespace load {
namespace {

// One scheduler thread (Run's) starts request i at start + i / rate through the callback API; each call's
// callback records it with the latency from its scheduled start, under a mutex.
// Shared-owned: each call's callback holds a reference, so that a callback still returning from the final
// Unlock never outlives the object Run's thread was waiting on.
class OpenLoop : public std::enable_shared_from_this<OpenLoop> {
 public:
  // One stub per server; each request goes to the server with the fewest outstanding (round-robin on ties).
  OpenLoop(SharedRun* shared, std::vector<scored::v1::Scorer::Stub*> stubs, absl::Time start,
           ClientStats* stats)
      : shared_(shared),
        stubs_(std::move(stubs)),
        start_(start),
        stats_(stats),
        generator_(shared->Generator(0)),
        outstanding_per_server_(stubs_.size(), 0) {
    tally_.per_server.assign(stubs_.size(), 0);
  }

  OpenLoopTally Run() {
    const LoadOptions& options = shared_->options();
    absl::Time first_sent = absl::InfinitePast(), last_sent = absl::InfinitePast();
    int64_t started = 0;
    std::vector<int32_t> ids;
    for (int64_t i = 0;; ++i) {
      // i / rate in double: no rounding of a per-request interval accumulates over a long run.
      const absl::Time scheduled = start_ + absl::Seconds(static_cast<double>(i) / options.rate);
      // Wait for the slot in short slices so that `stop` and an UNAVAILABLE end the wait early.
      for (absl::Time now = absl::Now(); now < scheduled && !Stopping(); now = absl::Now()) {
        absl::SleepFor(std::min(scheduled - now, absl::Milliseconds(50)));
      }
      if (Stopping() || scheduled >= shared_->send_until()) break;
      if (options.num_requests > 0 && !shared_->TakeTicket()) break;
      generator_.Next(&ids);
      auto* call = new Call;
      call->scheduled = scheduled;
      call->tokens = static_cast<int64_t>(ids.size());
      call->request =
          BuildRequest(RequestKind::kNormal, static_cast<uint64_t>(i), ids, shared_->vocab_size());
      shared_->Prepare(&call->context, options.deadline > absl::ZeroDuration() ? scheduled + options.deadline
                                                                               : absl::InfiniteFuture());
      call->server = TakeServer();
      const absl::Time sent = absl::Now();
      stubs_[call->server]->async()->Score(
          &call->context, &call->request, &call->response,
          [self = shared_from_this(), call](grpc::Status status) { self->Finish(call, status); });
      if (started++ == 0) first_sent = sent;
      last_sent = sent;
      tally_.lag_max_ms = std::max(tally_.lag_max_ms, absl::ToDoubleMilliseconds(sent - scheduled));
    }
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](int64_t* outstanding) { return *outstanding == 0; }, &outstanding_));
    if (started >= 2 && last_sent > first_sent) {
      tally_.rate_achieved = static_cast<double>(started - 1) / absl::ToDoubleSeconds(last_sent - first_sent);
    }
    return tally_;
  }

 private:
  struct Call {
    absl::Time scheduled;
    size_t server = 0;  // index into stubs_
    int64_t tokens = 0;
    grpc::ClientContext context;
    scored::v1::ScoreRequest request;
    scored::v1::ScoreResponse response;
  };

  bool Stopping() const {
    const std::atomic<bool>* stop = shared_->options().stop;
    return unavailable_.load() || (stop != nullptr && stop->load());
  }

  // Counts one more request outstanding and picks its server: the fewest outstanding; ties go round-robin
  // (scanned from the one after the last choice).
  size_t TakeServer() {
    absl::MutexLock lock(&mu_);
    tally_.max_outstanding = std::max(tally_.max_outstanding, ++outstanding_);
    const size_t n = outstanding_per_server_.size();
    size_t server = next_server_ % n;
    for (size_t k = 1; k < n; ++k) {
      const size_t i = (next_server_ + k) % n;
      if (outstanding_per_server_[i] < outstanding_per_server_[server]) server = i;
    }
    next_server_ = server + 1;
    ++outstanding_per_server_[server];
    ++tally_.per_server[server];
    return server;
  }

  void Finish(Call* call, const grpc::Status& status) {
    RequestRecord record;
    record.start = call->scheduled;
    record.end = absl::Now();
    record.tokens = call->tokens;
    record.kind = RequestKind::kNormal;
    record.code = FromGrpcCode(status.error_code());
    std::string message = status.error_message();
    if (status.ok()) {
      const absl::Status shape = CheckResponse(call->response, call->tokens);
      record.code = shape.code();
      message = std::string(shape.message());
    }
    const size_t server = call->server;
    delete call;
    const LoadOptions& options = shared_->options();
    if (record.code == absl::StatusCode::kUnavailable && options.stop_on_unavailable) {
      unavailable_.store(true);
    }
    absl::MutexLock lock(&mu_);
    stats_->Add(record, message, options.record_requests);
    if (unavailable_.load()) stats_->stopped_unavailable = true;
    --outstanding_per_server_[server];
    --outstanding_;
  }

  SharedRun* const shared_;
  const std::vector<scored::v1::Scorer::Stub*> stubs_;
  const absl::Time start_;
  ClientStats* const stats_;
  RequestGenerator generator_;
  std::atomic<bool> unavailable_{false};
  OpenLoopTally tally_;  // max_outstanding and per_server under mu_; the rest by Run's thread
  absl::Mutex mu_;
  int64_t outstanding_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<int64_t> outstanding_per_server_ ABSL_GUARDED_BY(mu_);
  size_t next_server_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace

OpenLoopTally RunOpenLoop(SharedRun* shared, std::vector<scored::v1::Scorer::Stub*> stubs, absl::Time start,
                          ClientStats* stats) {
  return std::make_shared<OpenLoop>(shared, std::move(stubs), start, stats)->Run();
}

}  // namespace load
}  // namespace scored
