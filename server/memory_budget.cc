#include "server/memory_budget.h"

#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"

namespace scored {

MemoryBudget::MemoryBudget(int64_t limit_bytes, std::function<void(int64_t)> on_change)
    : limit_(limit_bytes), on_change_(std::move(on_change)) {}

MemoryBudget::Charge::Charge(Charge&& other) noexcept
    : budget_(std::exchange(other.budget_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

MemoryBudget::Charge& MemoryBudget::Charge::operator=(Charge&& other) noexcept {
  if (this != &other) {
    Release();
    budget_ = std::exchange(other.budget_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

void MemoryBudget::Charge::Resize(int64_t bytes) {
  if (budget_ == nullptr) return;
  budget_->Add(bytes - bytes_);
  bytes_ = bytes;
}

void MemoryBudget::Charge::Release() {
  if (budget_ != nullptr) budget_->Add(-bytes_);
  budget_ = nullptr;
  bytes_ = 0;
}

absl::StatusOr<MemoryBudget::Charge> MemoryBudget::TryCharge(int64_t bytes, int64_t headroom) {
  absl::MutexLock lock(&mu_);
  if (used_ + bytes > limit_ - headroom) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the server's memory budget is spent: this request needs ", bytes, " bytes, ", used_,
                     " of --max_buffered_bytes=", limit_,
                     " are in use (responses not yet read by their clients, queued requests)",
                     headroom > 0 ? absl::StrCat(" and streams may use ", limit_ - headroom, " of them") : "",
                     "; retry later, or read the responses already sent"));
  }
  used_ += bytes;
  if (on_change_) on_change_(used_);
  return Charge(this, bytes);
}

MemoryBudget::Charge MemoryBudget::ForceCharge(int64_t bytes) {
  Add(bytes);
  return Charge(this, bytes);
}

int64_t MemoryBudget::used() const {
  absl::MutexLock lock(&mu_);
  return used_;
}

void MemoryBudget::Add(int64_t delta) {
  absl::MutexLock lock(&mu_);
  used_ += delta;
  if (on_change_) on_change_(used_);
}

namespace {

// cgroup v2 memory.max (or v1 memory.limit_in_bytes) of this process; 0 when unlimited or unreadable.
int64_t CgroupMemoryLimit() {
  for (const char* path : {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}) {
    std::ifstream in(path);
    std::string text;
    if (!(in >> text)) continue;
    int64_t value = 0;
    // "max" (v2) or a huge number (v1: 2^63 rounded to pages) mean no limit.
    if (absl::SimpleAtoi(text, &value) && value > 0 && value < (int64_t{1} << 50)) return value;
  }
  return 0;
}

std::string GiB(int64_t bytes) {
  return absl::StrFormat("%.1f GiB", static_cast<double>(bytes) / static_cast<double>(int64_t{1} << 30));
}

}  // namespace

int64_t DefaultMaxBufferedBytes(std::string* description) {
  constexpr int64_t kFloor = int64_t{256} << 20;
  constexpr int64_t kCeiling = int64_t{16} << 30;
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGE_SIZE);
  const int64_t physical = pages > 0 && page_size > 0 ? int64_t{pages} * page_size : 0;
  const int64_t cgroup = CgroupMemoryLimit();
  int64_t memory = physical;
  std::string source = "physical memory";
  if (cgroup > 0 && (memory == 0 || cgroup < memory)) {
    memory = cgroup;
    source = "the cgroup's memory limit";
  }
  if (memory == 0) {
    if (description != nullptr) *description = "default: physical memory unknown";
    return int64_t{1} << 30;
  }
  const int64_t value = std::clamp(memory / 4, kFloor, kCeiling);
  if (description != nullptr) {
    *description =
        absl::StrCat("default: 1/4 of ", GiB(memory), " ", source, ", clamped to [256 MiB, 16 GiB]");
  }
  return value;
}

int64_t EstimateScoreResponseBytes(const ScoreRequest& request) {
  const int64_t n = static_cast<int64_t>(request.tokens.size());
  const int64_t positions = std::max<int64_t>(0, n - std::max<int32_t>(1, request.score_from));
  // Scalars (request_id, first_scored, num_scored, three doubles) and the tag + length of eight packed
  // arrays.
  constexpr int64_t kFixed = 128;
  constexpr int64_t kPerId = 5;  // echoed ids, packed varints of non-negative int32
  // logprob 4, greedy 1, rank <= 5, entropy 4, ref_logprob 4, kld 4, ref_greedy 1, same_top 1, and the
  // TopTokens list's tag and length (<= 3 bytes for 64 entries): 27, rounded up.
  constexpr int64_t kPerPosition = 30;
  // TopToken: tag + length (2), id (tag + <= 5 varint bytes), logprob (tag + 4 bytes).
  constexpr int64_t kPerTopKEntry = 13;
  // A candidate id: its packed logprob in the response (4) and the id the queued engine request holds (4);
  // min_logprob: 4 per position.
  constexpr int64_t kPerCandidate = 8;
  const int64_t candidates = static_cast<int64_t>(request.candidate_ids.size());
  return kFixed + n * kPerId + positions * (kPerPosition + int64_t{request.top_k} * kPerTopKEntry) +
         candidates * kPerCandidate + (request.want_min_logprob ? positions * 4 : 0);
}

ConnectionLimiter::ConnectionLimiter(int64_t max_connections, std::function<void(int64_t)> on_change)
    : max_connections_(max_connections), on_change_(std::move(on_change)) {}

ConnectionLimiter::Slot::Slot(Slot&& other) noexcept
    : limiter_(std::exchange(other.limiter_, nullptr)), peer_(std::move(other.peer_)) {}

ConnectionLimiter::Slot& ConnectionLimiter::Slot::operator=(Slot&& other) noexcept {
  if (this != &other) {
    Release();
    limiter_ = std::exchange(other.limiter_, nullptr);
    peer_ = std::move(other.peer_);
  }
  return *this;
}

void ConnectionLimiter::Slot::Release() {
  if (limiter_ != nullptr) limiter_->ReleasePeer(peer_);
  limiter_ = nullptr;
}

absl::StatusOr<ConnectionLimiter::Slot> ConnectionLimiter::Acquire(const std::string& peer) {
  absl::MutexLock lock(&mu_);
  auto it = calls_.find(peer);
  if (it == calls_.end()) {
    if (static_cast<int64_t>(calls_.size()) >= max_connections_) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "too many client connections: ", calls_.size(), " connections have calls in progress (",
          "--max_connections=", max_connections_, "); retry later or reuse a connection"));
    }
    it = calls_.emplace(peer, 0).first;
    if (on_change_) on_change_(static_cast<int64_t>(calls_.size()));
  }
  ++it->second;
  return Slot(this, peer);
}

int64_t ConnectionLimiter::connections() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(calls_.size());
}

void ConnectionLimiter::ReleasePeer(const std::string& peer) {
  absl::MutexLock lock(&mu_);
  auto it = calls_.find(peer);
  if (it == calls_.end()) return;
  if (--it->second == 0) {
    calls_.erase(it);
    if (on_change_) on_change_(static_cast<int64_t>(calls_.size()));
  }
}

}  // namespace scored
