#include "server/batcher.h"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace scored {

absl::Status CheckFiniteResult(const ScoreRequest& request, const ScoreResult& result) {
  const int64_t first = std::max<int32_t>(1, request.score_from);
  auto bad = [first](const char* what, size_t i, float v) {
    return absl::InternalError(absl::StrCat(
        "non-finite ", what, " (", std::isnan(v) ? "nan" : (v > 0 ? "inf" : "-inf"), ") at position ",
        first + static_cast<int64_t>(i), " (NaN/Inf in the model's activations)"));
  };
  for (size_t i = 0; i < result.logprob.size(); ++i) {
    if (!std::isfinite(result.logprob[i])) return bad("log-probability", i, result.logprob[i]);
  }
  for (size_t i = 0; i < result.ref_logprob.size(); ++i) {
    if (!std::isfinite(result.ref_logprob[i]))
      return bad("reference log-probability", i, result.ref_logprob[i]);
  }
  for (size_t i = 0; i < result.kld.size(); ++i) {
    if (!std::isfinite(result.kld[i])) return bad("KL divergence", i, result.kld[i]);
  }
  for (size_t i = 0; i < result.entropy.size(); ++i) {
    if (!std::isfinite(result.entropy[i])) return bad("entropy", i, result.entropy[i]);
  }
  if (request.num_candidates > 0) {
    for (size_t i = 0; i < result.candidate_logprob.size(); ++i) {
      const float v = result.candidate_logprob[i];
      if (!std::isfinite(v)) return bad("candidate log-probability", i / request.num_candidates, v);
    }
  }
  for (size_t i = 0; i < result.min_logprob.size(); ++i) {
    if (!std::isfinite(result.min_logprob[i])) return bad("min log-probability", i, result.min_logprob[i]);
  }
  for (size_t i = 0; i < result.top_k.size(); ++i) {
    for (const TopKEntry& e : result.top_k[i]) {
      if (!std::isfinite(e.logprob)) return bad("top-k log-probability", i, e.logprob);
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Batcher>> Batcher::Create(Engine* engine, BatcherOptions options) {
  if (engine == nullptr) return absl::InvalidArgumentError("Batcher needs an engine");
  if (options.max_batch_tokens < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_batch_tokens must be >= 2, got ", options.max_batch_tokens));
  }
  if (options.max_queue < 1) {
    return absl::InvalidArgumentError(absl::StrCat("max_queue must be >= 1, got ", options.max_queue));
  }
  if (options.batch_timeout < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("batch_timeout must not be negative");
  }
  return std::unique_ptr<Batcher>(new Batcher(engine, std::move(options)));
}

Batcher::Batcher(Engine* engine, BatcherOptions options) : engine_(engine), options_(std::move(options)) {
  worker_ = std::thread([this] { WorkerLoop(); });
}

Batcher::~Batcher() { Shutdown(); }

absl::StatusOr<uint64_t> Batcher::Submit(ScoreRequest request, absl::Time deadline, DoneCallback done) {
  const int64_t n = static_cast<int64_t>(request.tokens.size());
  if (n > options_.max_batch_tokens) {
    return absl::OutOfRangeError(
        absl::StrCat("sequence has ", n, " tokens; max_batch_tokens is ", options_.max_batch_tokens));
  }
  if (deadline <= absl::Now()) {
    return absl::DeadlineExceededError("the deadline passed before the request was queued");
  }
  uint64_t ticket = 0;
  {
    absl::MutexLock lock(&mu_);
    if (!fatal_.ok()) {
      return absl::UnavailableError(absl::StrCat("the engine failed and cannot serve: ", fatal_.message()));
    }
    if (stopping_) return absl::UnavailableError("the server is shutting down");
    if (static_cast<int64_t>(queue_.size()) >= options_.max_queue) {
      return absl::ResourceExhaustedError(absl::StrCat("the request queue is full (max_queue ",
                                                       options_.max_queue, " requests); retry later"));
    }
    ticket = next_ticket_++;
    queued_tokens_ += n;
    queue_.push_back(Item{ticket, std::move(request), deadline, absl::Now(), std::move(done)});
    ReportQueueDepth(static_cast<int64_t>(queue_.size()));
  }
  return ticket;
}

bool Batcher::Cancel(uint64_t ticket) {
  DoneCallback done;
  {
    absl::MutexLock lock(&mu_);
    auto it = queue_.begin();
    while (it != queue_.end() && it->ticket != ticket) ++it;
    if (it == queue_.end()) return false;
    queued_tokens_ -= static_cast<int64_t>(it->request.tokens.size());
    done = std::move(it->done);
    queue_.erase(it);
    ReportQueueDepth(static_cast<int64_t>(queue_.size()));
  }
  done(absl::CancelledError("the request was cancelled while queued"));
  return true;
}

void Batcher::Shutdown() {
  absl::MutexLock shutdown_lock(&shutdown_mu_);
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (worker_.joinable()) worker_.join();
}

int64_t Batcher::queue_depth() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(queue_.size());
}

int64_t Batcher::outstanding() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(queue_.size()) + running_;
}

int64_t Batcher::answered_ok() const {
  absl::MutexLock lock(&mu_);
  return answered_ok_;
}

Batcher::Account Batcher::account() const {
  absl::MutexLock lock(&mu_);
  return Account{static_cast<int64_t>(queue_.size()) + running_, answered_ok_};
}

absl::Status Batcher::fatal_status() const {
  absl::MutexLock lock(&mu_);
  return fatal_;
}

void Batcher::ReportQueueDepth(int64_t depth) {
  if (options_.on_queue_depth) options_.on_queue_depth(depth);
  if (options_.on_in_flight) options_.on_in_flight(depth + running_);
}

void Batcher::WorkerLoop() {
  while (true) {
    std::vector<Item> batch;
    std::vector<Item> expired;
    std::vector<Item> failed;
    absl::Status fatal;
    {
      absl::MutexLock lock(&mu_);
      auto has_work = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !queue_.empty() || stopping_; };
      mu_.Await(absl::Condition(&has_work));
      if (queue_.empty()) return;  // stopping_ and drained
      // Give more requests a chance to join, counted from the oldest one's arrival.
      auto full = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stopping_ || queue_.empty() || queued_tokens_ >= options_.max_batch_tokens;
      };
      mu_.AwaitWithDeadline(absl::Condition(&full), queue_.front().enqueued + options_.batch_timeout);
      if (queue_.empty()) continue;

      if (!fatal_.ok()) {
        fatal = fatal_;
        while (!queue_.empty()) {
          failed.push_back(std::move(queue_.front()));
          queue_.pop_front();
        }
        queued_tokens_ = 0;
      } else {
        const absl::Time now = absl::Now();
        int64_t batch_tokens = 0;
        while (!queue_.empty()) {
          Item& front = queue_.front();
          const int64_t n = static_cast<int64_t>(front.request.tokens.size());
          if (front.deadline <= now) {
            queued_tokens_ -= n;
            expired.push_back(std::move(front));
            queue_.pop_front();
            continue;
          }
          if (batch_tokens + n > options_.max_batch_tokens) break;
          batch_tokens += n;
          queued_tokens_ -= n;
          batch.push_back(std::move(front));
          queue_.pop_front();
        }
      }
      running_ = static_cast<int64_t>(batch.size());
      ReportQueueDepth(static_cast<int64_t>(queue_.size()));
    }
    for (Item& item : expired) {
      item.done(absl::DeadlineExceededError(absl::StrCat("the deadline passed after ",
                                                         absl::FormatDuration(absl::Now() - item.enqueued),
                                                         " in the queue, before the request was scored")));
    }
    for (Item& item : failed) {
      item.done(
          absl::UnavailableError(absl::StrCat("the engine failed and cannot serve: ", fatal.message())));
    }
    // RunBatch leaves outstanding() and reports it (LeaveOutstanding) before the batch's answers go out; a
    // pass with no batch (only expired or failed requests) has running_ 0 and was reported above.
    if (!batch.empty()) RunBatch(std::move(batch));
  }
}

void Batcher::LeaveOutstanding(int num_ok) {
  absl::MutexLock lock(&mu_);
  answered_ok_ += num_ok;
  running_ = 0;
  ReportQueueDepth(static_cast<int64_t>(queue_.size()));
}

void Batcher::RunBatch(std::vector<Item> batch) {
  std::vector<ScoreRequest> requests;
  requests.reserve(batch.size());
  for (Item& item : batch) requests.push_back(std::move(item.request));
  const absl::Time compute_start = absl::Now();
  if (options_.on_queue_wait) {
    for (const Item& item : batch)
      options_.on_queue_wait(absl::ToDoubleSeconds(compute_start - item.enqueued));
  }
  std::vector<absl::StatusOr<ScoreResult>> results = engine_->Score(requests);
  if (options_.on_compute) options_.on_compute(absl::ToDoubleSeconds(absl::Now() - compute_start));

  const absl::Status fatal = engine_->fatal_status();
  if (!fatal.ok()) {
    bool first = false;
    {
      absl::MutexLock lock(&mu_);
      first = fatal_.ok();
      if (first) fatal_ = fatal;
    }
    if (first && options_.on_fatal) options_.on_fatal(fatal);
    const absl::Status unavailable =
        absl::UnavailableError(absl::StrCat("the engine failed and cannot serve: ", fatal.message()));
    LeaveOutstanding(0);
    for (Item& item : batch) item.done(unavailable);
    return;
  }
  if (results.size() != batch.size()) {
    const absl::Status wrong = absl::InternalError(
        absl::StrCat("the engine returned ", results.size(), " results for ", batch.size(), " sequences"));
    LeaveOutstanding(0);
    for (Item& item : batch) item.done(wrong);
    return;
  }
  // Each sequence has its own status: a rejected one fails alone, the others keep their results.
  int64_t batch_tokens = 0, scored = 0;
  int num_ok = 0;
  for (size_t i = 0; i < batch.size(); ++i) {
    if (!results[i].ok()) continue;
    absl::Status finite = CheckFiniteResult(requests[i], *results[i]);
    if (!finite.ok()) {
      results[i] = std::move(finite);
      if (options_.on_nonfinite) options_.on_nonfinite();
      continue;
    }
    batch_tokens += static_cast<int64_t>(requests[i].tokens.size());
    scored += results[i]->num_scored;
    ++num_ok;
  }
  if (num_ok > 0 && options_.on_batch) options_.on_batch(batch_tokens, num_ok, scored);
  LeaveOutstanding(num_ok);
  for (size_t i = 0; i < batch.size(); ++i) batch[i].done(std::move(results[i]));
}

}  // namespace scored
