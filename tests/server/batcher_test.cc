// Batcher logic with the REAL CPU reference engine on stories260K-hf: golden log-probs, batched ==
// alone (bitwise), packing limits, queue full, deadlines, cancellation, shutdown drain, and
// isolation of a request the engine rejects.
#include "server/batcher.h"

#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "engine/base/logging.h"
#include "engine/engine.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace scored {
namespace {

using ::testing::HasSubstr;

const std::string kModelDir = std::string(SCORED_DATA_DIR) + "/stories260K-hf";

struct Story {
  std::vector<int32_t> ids;
  std::vector<double> logprobs;  // float64 reference for positions 1..n-1
};

std::vector<Story> LoadStories() {
  std::ifstream in(kModelDir + "/reference_logprobs.json");
  std::stringstream ss;
  ss << in.rdbuf();
  const nlohmann::json j = nlohmann::json::parse(ss.str());
  std::vector<Story> stories;
  for (const auto& s : j["tinystories_sample"]["stories"]) {
    stories.push_back(
        {s["token_ids"].get<std::vector<int32_t>>(), s["token_logprobs"].get<std::vector<double>>()});
  }
  return stories;
}

// Collects one completion.
struct Outcome {
  absl::Notification done;
  absl::StatusOr<ScoreResult> result = absl::UnknownError("not completed");
  Batcher::DoneCallback Callback() {
    return [this](absl::StatusOr<ScoreResult> r) {
      result = std::move(r);
      done.Notify();
    };
  }
};

struct BatchLog {
  absl::Mutex mu;
  std::vector<int64_t> tokens;
  std::vector<int> sequences;
};

class BatcherTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    SetMinLogLevel(LogLevel::kWarning);
    EngineOptions options;
    options.model_dir = kModelDir;
    options.backend = Backend::kCpu;
    options.max_batch_tokens = 4096;
    auto engine = CreateEngine(options);
    ASSERT_TRUE(engine.ok()) << engine.status();
    engine_ = engine->release();
    stories_ = new std::vector<Story>(LoadStories());
  }
  static void TearDownTestSuite() {
    delete engine_;
    delete stories_;
  }

  std::unique_ptr<Batcher> MakeBatcher(BatcherOptions options, BatchLog* log = nullptr) {
    if (log != nullptr) {
      options.on_batch = [log](int64_t tokens, int sequences, int64_t) {
        absl::MutexLock lock(&log->mu);
        log->tokens.push_back(tokens);
        log->sequences.push_back(sequences);
      };
    }
    auto b = Batcher::Create(engine_, std::move(options));
    EXPECT_TRUE(b.ok()) << b.status();
    return b.ok() ? std::move(*b) : nullptr;
  }

  static ScoreRequest Request(const std::vector<int32_t>& ids) {
    ScoreRequest r;
    r.tokens = ids;
    return r;
  }

  static Engine* engine_;
  static std::vector<Story>* stories_;
};

Engine* BatcherTest::engine_ = nullptr;
std::vector<Story>* BatcherTest::stories_ = nullptr;

// Tolerance 1e-4 per token: the engine computes in fp32 (fp64 reductions) on the float32 weights; the
// golden is float64 arithmetic, and fp32 rounding through 5 layers stays well below 1e-4 nats.
TEST_F(BatcherTest, GoldenLogprobsOfStory0) {
  auto batcher = MakeBatcher(BatcherOptions{});
  const Story& story = (*stories_)[0];
  Outcome out;
  ASSERT_TRUE(batcher->Submit(Request(story.ids), absl::InfiniteFuture(), out.Callback()).ok());
  out.done.WaitForNotification();
  ASSERT_TRUE(out.result.ok()) << out.result.status();
  ASSERT_EQ(out.result->num_scored, static_cast<int32_t>(story.ids.size()) - 1);
  ASSERT_EQ(out.result->logprob.size(), story.logprobs.size());
  for (size_t i = 0; i < story.logprobs.size(); ++i) {
    EXPECT_NEAR(out.result->logprob[i], story.logprobs[i], 1e-4) << "position " << i + 1;
  }
}

TEST_F(BatcherTest, BatchedResultsEqualAloneBitwise) {
  // Alone: one request per engine call (max_batch_tokens forces it).
  std::vector<ScoreResult> alone;
  {
    auto batcher = MakeBatcher(BatcherOptions{});
    for (const Story& s : *stories_) {
      Outcome out;
      ASSERT_TRUE(batcher->Submit(Request(s.ids), absl::InfiniteFuture(), out.Callback()).ok());
      out.done.WaitForNotification();
      ASSERT_TRUE(out.result.ok()) << out.result.status();
      alone.push_back(*out.result);
    }
  }
  // Batched: a long fill window so all five join one engine call.
  BatchLog log;
  BatcherOptions options;
  options.batch_timeout = absl::Seconds(2);
  auto batcher = MakeBatcher(options, &log);
  std::vector<std::unique_ptr<Outcome>> outs;
  for (const Story& s : *stories_) {
    outs.push_back(std::make_unique<Outcome>());
    ScoreRequest r = Request(s.ids);
    r.want_rank = true;
    r.want_entropy = true;
    r.top_k = 3;
    ASSERT_TRUE(batcher->Submit(std::move(r), absl::InfiniteFuture(), outs.back()->Callback()).ok());
  }
  for (size_t i = 0; i < outs.size(); ++i) {
    outs[i]->done.WaitForNotification();
    ASSERT_TRUE(outs[i]->result.ok()) << outs[i]->result.status();
    const ScoreResult& b = *outs[i]->result;
    ASSERT_EQ(b.logprob.size(), alone[i].logprob.size());
    for (size_t j = 0; j < b.logprob.size(); ++j) {
      ASSERT_EQ(b.logprob[j], alone[i].logprob[j]) << "story " << i << " position " << j + 1;
    }
    EXPECT_EQ(b.greedy, alone[i].greedy);
    EXPECT_EQ(b.sum_logprob, alone[i].sum_logprob);
    EXPECT_EQ(b.rank.size(), b.logprob.size());
    EXPECT_EQ(b.entropy.size(), b.logprob.size());
    EXPECT_EQ(b.top_k.size(), b.logprob.size());
  }
  absl::MutexLock lock(&log.mu);
  ASSERT_EQ(log.sequences.size(), 1u) << "all five stories should share one engine call";
  EXPECT_EQ(log.sequences[0], 5);
}

TEST_F(BatcherTest, PacksUpToMaxBatchTokensInArrivalOrder) {
  BatchLog log;
  BatcherOptions options;
  options.max_batch_tokens = 100;
  options.batch_timeout = absl::Seconds(1);
  auto batcher = MakeBatcher(options, &log);
  const std::vector<int32_t>& ids = (*stories_)[0].ids;
  std::vector<std::unique_ptr<Outcome>> outs;
  for (int len : {60, 30, 50, 10}) {
    outs.push_back(std::make_unique<Outcome>());
    std::vector<int32_t> prefix(ids.begin(), ids.begin() + len);
    ASSERT_TRUE(batcher->Submit(Request(prefix), absl::InfiniteFuture(), outs.back()->Callback()).ok());
  }
  for (auto& o : outs) {
    o->done.WaitForNotification();
    EXPECT_TRUE(o->result.ok()) << o->result.status();
  }
  absl::MutexLock lock(&log.mu);
  // FIFO: [60, 30] = 90, then [50, 10] = 60.
  EXPECT_THAT(log.tokens, ::testing::ElementsAre(90, 60));
  for (int64_t t : log.tokens) EXPECT_LE(t, 100);
}

TEST_F(BatcherTest, RejectsRequestLongerThanMaxBatchTokens) {
  BatcherOptions options;
  options.max_batch_tokens = 50;
  auto batcher = MakeBatcher(options);
  Outcome out;
  auto t = batcher->Submit(Request((*stories_)[0].ids), absl::InfiniteFuture(), out.Callback());
  ASSERT_EQ(t.status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_THAT(std::string(t.status().message()), HasSubstr("max_batch_tokens is 50"));
}

TEST_F(BatcherTest, QueueFullIsResourceExhausted) {
  BatcherOptions options;
  options.max_queue = 2;
  options.batch_timeout = absl::Seconds(3);  // the worker holds the queue while it waits to fill
  auto batcher = MakeBatcher(options);
  const std::vector<int32_t> ids((*stories_)[0].ids.begin(), (*stories_)[0].ids.begin() + 20);
  Outcome a, b, c;
  ASSERT_TRUE(batcher->Submit(Request(ids), absl::InfiniteFuture(), a.Callback()).ok());
  ASSERT_TRUE(batcher->Submit(Request(ids), absl::InfiniteFuture(), b.Callback()).ok());
  EXPECT_EQ(batcher->queue_depth(), 2);
  auto t = batcher->Submit(Request(ids), absl::InfiniteFuture(), c.Callback());
  ASSERT_EQ(t.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(t.status().message()), HasSubstr("max_queue 2"));
  // Shutdown ends the fill wait and finishes the queued work.
  batcher->Shutdown();
  ASSERT_TRUE(a.done.HasBeenNotified());
  ASSERT_TRUE(b.done.HasBeenNotified());
  EXPECT_TRUE(a.result.ok()) << a.result.status();
  EXPECT_TRUE(b.result.ok()) << b.result.status();
  EXPECT_FALSE(c.done.HasBeenNotified());
}

TEST_F(BatcherTest, DeadlinePassedInQueueIsDeadlineExceeded) {
  BatchLog log;
  BatcherOptions options;
  options.batch_timeout = absl::Milliseconds(300);
  auto batcher = MakeBatcher(options, &log);
  const std::vector<int32_t> ids((*stories_)[0].ids.begin(), (*stories_)[0].ids.begin() + 20);
  Outcome late, fine;
  ASSERT_TRUE(batcher->Submit(Request(ids), absl::Now() + absl::Milliseconds(50), late.Callback()).ok());
  ASSERT_TRUE(batcher->Submit(Request(ids), absl::InfiniteFuture(), fine.Callback()).ok());
  late.done.WaitForNotification();
  fine.done.WaitForNotification();
  EXPECT_EQ(late.result.status().code(), absl::StatusCode::kDeadlineExceeded) << late.result.status();
  EXPECT_TRUE(fine.result.ok()) << fine.result.status();
  absl::MutexLock lock(&log.mu);
  EXPECT_THAT(log.tokens, ::testing::ElementsAre(20)) << "the expired request must not reach the engine";

  Outcome past;
  auto t = batcher->Submit(Request(ids), absl::Now() - absl::Seconds(1), past.Callback());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kDeadlineExceeded);
}

TEST_F(BatcherTest, CancelDropsQueuedWork) {
  BatchLog log;
  BatcherOptions options;
  options.batch_timeout = absl::Milliseconds(500);
  auto batcher = MakeBatcher(options, &log);
  const std::vector<int32_t> ids((*stories_)[0].ids.begin(), (*stories_)[0].ids.begin() + 20);
  Outcome cancelled, kept;
  auto t1 = batcher->Submit(Request(ids), absl::InfiniteFuture(), cancelled.Callback());
  auto t2 = batcher->Submit(Request(ids), absl::InfiniteFuture(), kept.Callback());
  ASSERT_TRUE(t1.ok() && t2.ok());
  ASSERT_TRUE(batcher->Cancel(*t1));
  ASSERT_TRUE(cancelled.done.HasBeenNotified()) << "Cancel completes synchronously";
  EXPECT_EQ(cancelled.result.status().code(), absl::StatusCode::kCancelled);
  EXPECT_FALSE(batcher->Cancel(*t1));
  kept.done.WaitForNotification();
  EXPECT_TRUE(kept.result.ok());
  EXPECT_FALSE(batcher->Cancel(*t2)) << "a completed request cannot be cancelled";
  absl::MutexLock lock(&log.mu);
  EXPECT_THAT(log.tokens, ::testing::ElementsAre(20));
}

TEST_F(BatcherTest, ShutdownRefusesNewWork) {
  auto batcher = MakeBatcher(BatcherOptions{});
  batcher->Shutdown();
  batcher->Shutdown();  // idempotent
  Outcome out;
  auto t = batcher->Submit(Request((*stories_)[0].ids), absl::InfiniteFuture(), out.Callback());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kUnavailable);
}

TEST_F(BatcherTest, EngineRejectionFailsOnlyTheOffendingRequest) {
  BatchLog log;
  BatcherOptions options;
  options.batch_timeout = absl::Seconds(1);
  auto batcher = MakeBatcher(options, &log);
  std::vector<int32_t> bad((*stories_)[1].ids.begin(), (*stories_)[1].ids.begin() + 30);
  bad[7] = 100000;  // out of the vocabulary: the engine's own check rejects it
  Outcome good1, wrong, good2;
  ASSERT_TRUE(batcher->Submit(Request((*stories_)[0].ids), absl::InfiniteFuture(), good1.Callback()).ok());
  ASSERT_TRUE(batcher->Submit(Request(bad), absl::InfiniteFuture(), wrong.Callback()).ok());
  ASSERT_TRUE(batcher->Submit(Request((*stories_)[2].ids), absl::InfiniteFuture(), good2.Callback()).ok());
  for (Outcome* o : {&good1, &wrong, &good2}) o->done.WaitForNotification();
  EXPECT_TRUE(good1.result.ok()) << good1.result.status();
  EXPECT_TRUE(good2.result.ok()) << good2.result.status();
  EXPECT_EQ(wrong.result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(wrong.result.status().message()), HasSubstr("100000"));
  const Story& s0 = (*stories_)[0];
  for (size_t i = 0; i < s0.logprobs.size(); ++i) {
    ASSERT_NEAR(good1.result->logprob[i], s0.logprobs[i], 1e-4);
  }
}

TEST_F(BatcherTest, QueueDepthIsReported) {
  absl::Mutex mu;
  std::vector<int64_t> depths;
  BatcherOptions options;
  options.batch_timeout = absl::Milliseconds(200);
  options.on_queue_depth = [&](int64_t d) {
    absl::MutexLock lock(&mu);
    depths.push_back(d);
  };
  auto batcher = MakeBatcher(options);
  const std::vector<int32_t> ids((*stories_)[0].ids.begin(), (*stories_)[0].ids.begin() + 20);
  Outcome a, b;
  ASSERT_TRUE(batcher->Submit(Request(ids), absl::InfiniteFuture(), a.Callback()).ok());
  ASSERT_TRUE(batcher->Submit(Request(ids), absl::InfiniteFuture(), b.Callback()).ok());
  a.done.WaitForNotification();
  b.done.WaitForNotification();
  batcher->Shutdown();
  absl::MutexLock lock(&mu);
  ASSERT_GE(depths.size(), 3u);
  EXPECT_EQ(depths[0], 1);
  EXPECT_EQ(depths[1], 2);
  EXPECT_EQ(depths.back(), 0);
}

// The in-flight report reaches 0 before a request's `done` runs: a client holding its answer and then
// scraping the metrics must not see itself still owed (the gauge used to drop only after every `done`).
TEST_F(BatcherTest, InFlightIsZeroBeforeDone) {
  absl::Mutex mu;
  std::vector<int64_t> reports;
  BatcherOptions options;
  options.on_in_flight = [&](int64_t n) {
    absl::MutexLock lock(&mu);
    reports.push_back(n);
  };
  auto batcher = MakeBatcher(options);
  const std::vector<int32_t> ids((*stories_)[0].ids.begin(), (*stories_)[0].ids.begin() + 20);
  int64_t seen_at_done = -1;
  absl::Notification done;
  ASSERT_TRUE(batcher
                  ->Submit(Request(ids), absl::InfiniteFuture(),
                           [&](absl::StatusOr<ScoreResult> r) {
                             EXPECT_TRUE(r.ok()) << r.status();
                             absl::MutexLock lock(&mu);
                             seen_at_done = reports.back();
                             done.Notify();
                           })
                  .ok());
  done.WaitForNotification();
  batcher->Shutdown();
  absl::MutexLock lock(&mu);
  EXPECT_EQ(seen_at_done, 0);
  ASSERT_FALSE(reports.empty());
  EXPECT_EQ(reports.front(), 1);
}

TEST_F(BatcherTest, CreateValidatesOptions) {
  BatcherOptions o;
  o.max_queue = 0;
  EXPECT_EQ(Batcher::Create(engine_, o).status().code(), absl::StatusCode::kInvalidArgument);
  o = BatcherOptions{};
  o.max_batch_tokens = 1;
  EXPECT_EQ(Batcher::Create(engine_, o).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Batcher::Create(nullptr, BatcherOptions{}).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace scored
