// The server-wide admission limits (server/memory_budget.h): the memory budget's accounting (charges, the
// limit and the streams' headroom, resize, force, release on destruction and move), the response-size bound
// against real serialized responses, the connection cap, the default budget, and the flags' ranges.
#include "server/memory_budget.h"

#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "scored/v1/scorer.pb.h"
#include "server/options.h"
#include "server/request_validation.h"

namespace scored {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(MemoryBudgetTest, ChargesUpToTheLimitAndReleasesOnDestruction) {
  std::vector<int64_t> seen;
  MemoryBudget budget(1000, [&seen](int64_t used) { seen.push_back(used); });
  {
    absl::StatusOr<MemoryBudget::Charge> a = budget.TryCharge(600);
    ASSERT_TRUE(a.ok()) << a.status();
    EXPECT_EQ(a->bytes(), 600);
    absl::StatusOr<MemoryBudget::Charge> b = budget.TryCharge(400);  // exactly the limit
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_EQ(budget.used(), 1000);

    absl::StatusOr<MemoryBudget::Charge> c = budget.TryCharge(1);
    ASSERT_FALSE(c.ok());
    EXPECT_EQ(c.status().code(), absl::StatusCode::kResourceExhausted);
    EXPECT_THAT(c.status().message(),
                HasSubstr("needs 1 bytes, 1000 of --max_buffered_bytes=1000 are in use"));
    EXPECT_EQ(budget.used(), 1000);  // a refusal charges nothing
  }
  EXPECT_EQ(budget.used(), 0);
  EXPECT_THAT(seen, ElementsAre(600, 1000, 600, 0));  // b then a released, in reverse order
}

TEST(MemoryBudgetTest, HeadroomKeepsTheRestForOtherCallers) {
  MemoryBudget budget(1000);
  const int64_t headroom = budget.limit() / MemoryBudget::kStreamHeadroomDivisor;  // 250
  absl::StatusOr<MemoryBudget::Charge> stream = budget.TryCharge(700, headroom);
  ASSERT_TRUE(stream.ok());
  absl::StatusOr<MemoryBudget::Charge> refused = budget.TryCharge(100, headroom);  // 800 > 750
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.status().message(), HasSubstr("streams may use 750 of them"));
  absl::StatusOr<MemoryBudget::Charge> unary = budget.TryCharge(300);  // 1000 <= 1000
  ASSERT_TRUE(unary.ok()) << unary.status();
  EXPECT_EQ(budget.used(), 1000);
}

TEST(MemoryBudgetTest, ResizeForceAndMove) {
  MemoryBudget budget(1000);
  absl::StatusOr<MemoryBudget::Charge> reserved = budget.TryCharge(500);
  ASSERT_TRUE(reserved.ok());
  reserved->Resize(200);  // the real size turned out smaller
  EXPECT_EQ(budget.used(), 200);

  MemoryBudget::Charge forced = budget.ForceCharge(900);  // owed whatever the limit
  EXPECT_EQ(budget.used(), 1100);
  EXPECT_FALSE(budget.TryCharge(0).ok());  // over the limit: even nothing more is refused

  MemoryBudget::Charge moved = std::move(forced);
  EXPECT_EQ(forced.bytes(), 0);  // NOLINT(bugprone-use-after-move): a moved-from Charge holds nothing
  forced.Release();
  EXPECT_EQ(budget.used(), 1100);
  moved = std::move(*reserved);  // releases the 900, takes over the 200
  EXPECT_EQ(budget.used(), 200);
  EXPECT_EQ(moved.bytes(), 200);
  moved.Release();
  moved.Release();  // idempotent
  EXPECT_EQ(budget.used(), 0);

  MemoryBudget::Charge none;
  none.Resize(50);  // a default Charge belongs to no budget
  EXPECT_EQ(none.bytes(), 0);
  EXPECT_EQ(budget.used(), 0);
}

// The bound must hold for the largest response a request can get: every array, the widest varints.
TEST(MemoryBudgetTest, ResponseEstimateBoundsTheSerializedResponse) {
  for (const int top_k : {0, 1, 64}) {
    for (const int n : {2, 17, 512}) {
      ScoreRequest request;
      request.tokens.assign(static_cast<size_t>(n), std::numeric_limits<int32_t>::max());
      request.score_from = 0;
      request.top_k = top_k;
      request.want_rank = request.want_entropy = request.want_reference = true;
      ScoreResult result;
      result.num_scored = n - 1;
      const size_t m = static_cast<size_t>(n - 1);
      result.logprob.assign(m, -1.5f);
      result.greedy.assign(m, 1);
      result.rank.assign(m, std::numeric_limits<int32_t>::max());
      result.entropy.assign(m, 2.5f);
      result.top_k.assign(m, std::vector<TopKEntry>(static_cast<size_t>(top_k),
                                                    TopKEntry{std::numeric_limits<int32_t>::max(), -3.0f}));
      result.ref_logprob.assign(m, -1.0f);
      result.kld.assign(m, 0.5f);
      result.ref_greedy.assign(m, 1);
      result.same_top.assign(m, 1);
      result.sum_logprob = result.sum_ref_logprob = result.sum_kld = -123.456;
      v1::ScoreResponse response;
      FillScoreResponse(request, result, /*echo_tokens=*/true, std::numeric_limits<uint64_t>::max(),
                        &response);
      const int64_t actual = static_cast<int64_t>(response.ByteSizeLong());
      const int64_t estimate = EstimateScoreResponseBytes(request);
      EXPECT_GE(estimate, actual) << "top_k " << top_k << ", " << n << " tokens";
      // Not so loose that the budget admits far fewer requests than fit: within 2x (+ the fixed part).
      EXPECT_LE(estimate, 2 * actual + 256) << "top_k " << top_k << ", " << n << " tokens";
    }
  }
  // The case: top_k 64 over 512 tokens is about 430 KB serialized, bounded by ~440 KB.
  ScoreRequest big;
  big.tokens.assign(512, 5);
  big.top_k = 64;
  EXPECT_GT(EstimateScoreResponseBytes(big), 400000);
  EXPECT_LT(EstimateScoreResponseBytes(big), 450000);
}

TEST(ConnectionLimiterTest, CapsPeersWithCallsInProgress) {
  std::vector<int64_t> seen;
  ConnectionLimiter limiter(2, [&seen](int64_t n) { seen.push_back(n); });
  absl::StatusOr<ConnectionLimiter::Slot> a1 = limiter.Acquire("ipv4:127.0.0.1:1000");
  absl::StatusOr<ConnectionLimiter::Slot> a2 = limiter.Acquire("ipv4:127.0.0.1:1000");  // same connection
  absl::StatusOr<ConnectionLimiter::Slot> b = limiter.Acquire("ipv4:127.0.0.1:2000");
  ASSERT_TRUE(a1.ok() && a2.ok() && b.ok());
  EXPECT_EQ(limiter.connections(), 2);

  absl::StatusOr<ConnectionLimiter::Slot> c = limiter.Acquire("ipv4:127.0.0.1:3000");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(c.status().message(), HasSubstr("--max_connections=2"));
  absl::StatusOr<ConnectionLimiter::Slot> a3 = limiter.Acquire("ipv4:127.0.0.1:1000");  // still fine
  ASSERT_TRUE(a3.ok());

  a1->Release();
  a3->Release();
  EXPECT_EQ(limiter.connections(), 2);  // a2 still holds the connection
  ConnectionLimiter::Slot moved = std::move(*a2);
  EXPECT_EQ(limiter.connections(), 2);
  moved.Release();
  EXPECT_EQ(limiter.connections(), 1);
  absl::StatusOr<ConnectionLimiter::Slot> c2 = limiter.Acquire("ipv4:127.0.0.1:3000");
  ASSERT_TRUE(c2.ok()) << c2.status();
  EXPECT_EQ(limiter.connections(), 2);
  EXPECT_THAT(seen, ElementsAre(1, 2, 1, 2));
}

TEST(MemoryBudgetTest, DefaultIsAQuarterOfTheMemoryClamped) {
  std::string description;
  const int64_t bytes = DefaultMaxBufferedBytes(&description);
  EXPECT_GE(bytes, int64_t{256} << 20);
  EXPECT_LE(bytes, int64_t{16} << 30);
  EXPECT_THAT(description, HasSubstr("default"));
}

TEST(MemoryBudgetTest, FlagsAreRangeChecked) {
  ServerOptions o;
  o.engine.model_dir = "/nonexistent";
  EXPECT_TRUE(ValidateServerOptions(o).ok()) << ValidateServerOptions(o);
  o.max_buffered_bytes = 1000;
  EXPECT_THAT(ValidateServerOptions(o).message(),
              HasSubstr("--max_buffered_bytes must be in [1048576, 1099511627776] or 0"));
  o.max_buffered_bytes = kMinMaxBufferedBytes;
  EXPECT_TRUE(ValidateServerOptions(o).ok());
  o.max_streams_per_connection = 0;
  EXPECT_THAT(ValidateServerOptions(o).message(),
              HasSubstr("--max_streams_per_connection must be in [1, 65536]"));
  o.max_streams_per_connection = 100;
  o.max_connections = 70000;
  EXPECT_THAT(ValidateServerOptions(o).message(),
              HasSubstr("--max_connections must be in [1, 65536], got 70000"));
}

}  // namespace
}  // namespace scored
