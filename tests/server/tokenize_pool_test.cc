// TokenizePool on its own: jobs run on the pool's threads; beyond --tokenize_queue waiting jobs Submit is
// RESOURCE_EXHAUSTED; after BeginShutdown it is UNAVAILABLE and stopping() turns true at the stop time;
// Shutdown runs every accepted job before joining.
#include "server/tokenize_pool.h"

#include <atomic>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace scored {
namespace {

using ::testing::HasSubstr;

TEST(TokenizePoolTest, RunsJobsOnItsOwnThreads) {
  TokenizePool pool(TokenizePool::Options{2, 4});
  const std::thread::id caller = std::this_thread::get_id();
  std::atomic<bool> elsewhere{false};
  absl::Notification done;
  ASSERT_TRUE(pool.Submit([&] {
                    elsewhere.store(std::this_thread::get_id() != caller);
                    done.Notify();
                  })
                  .ok());
  done.WaitForNotification();
  EXPECT_TRUE(elsewhere.load());
  EXPECT_FALSE(pool.stopping());
}

TEST(TokenizePoolTest, QueueBoundIsResourceExhausted) {
  TokenizePool pool(TokenizePool::Options{1, 2});
  absl::Notification running;
  absl::Notification release;
  ASSERT_TRUE(pool.Submit([&] {
                    running.Notify();
                    release.WaitForNotification();
                  })
                  .ok());
  running.WaitForNotification();  // the only thread is busy: later jobs wait in the queue
  std::atomic<int> ran{0};
  EXPECT_TRUE(pool.Submit([&] { ran.fetch_add(1); }).ok());
  EXPECT_TRUE(pool.Submit([&] { ran.fetch_add(1); }).ok());
  const absl::Status full = pool.Submit([&] { ran.fetch_add(100); });
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted) << full;
  EXPECT_THAT(full.message(), HasSubstr("--tokenize_queue"));
  release.Notify();
  pool.Shutdown();  // runs what was accepted, then joins
  EXPECT_EQ(ran.load(), 2);
}

TEST(TokenizePoolTest, ShutdownRefusesNewJobsAndStillRunsQueuedOnes) {
  TokenizePool pool(TokenizePool::Options{1, 4});
  absl::Notification running;
  absl::Notification release;
  ASSERT_TRUE(pool.Submit([&] {
                    running.Notify();
                    release.WaitForNotification();
                  })
                  .ok());
  running.WaitForNotification();
  std::atomic<bool> queued_saw_stopping{false};
  ASSERT_TRUE(pool.Submit([&] { queued_saw_stopping.store(pool.stopping()); }).ok());

  // A stop time in the future: new jobs are refused at once, stopping() turns true only then.
  pool.BeginShutdown(absl::Now() + absl::Hours(1));
  EXPECT_FALSE(pool.stopping());
  const absl::Status refused = pool.Submit([] {});
  EXPECT_EQ(refused.code(), absl::StatusCode::kUnavailable) << refused;

  release.Notify();
  pool.Shutdown();  // runs the queued job; the first BeginShutdown's stop time (an hour away) holds
  EXPECT_FALSE(queued_saw_stopping.load());
}

TEST(TokenizePoolTest, StoppingFromTheStopTime) {
  TokenizePool pool(TokenizePool::Options{1, 1});
  pool.BeginShutdown(absl::Now() - absl::Seconds(1));
  EXPECT_TRUE(pool.stopping());
  pool.Shutdown();
  pool.Shutdown();  // idempotent
}

}  // namespace
}  // namespace scored
