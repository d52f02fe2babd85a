// A real GPU failure, end to end: the real `scored --backend=cuda` on stories260K with
// --fault_inject=device_trap_after:2 runs two batches, then its CUDA engine launches a kernel that executes
// the trap instruction (engine/kernels/device_trap.h): cudaErrorLaunchFailure, sticky, the CUDA context is
// gone. Nothing is wrapped or mocked past that point: the engine's own sticky-error check must turn that
// batch and every later call UNAVAILABLE, health NOT_SERVING, and the process must exit 1 for its supervisor.
// Skips cleanly where no CUDA device is usable (or the build has no CUDA backend).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "engine/engine.h"
#include "gmock/gmock.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "scored/v1/scorer.grpc.pb.h"
#include "tests/server/scored_process.h"

namespace scored {
namespace {

using ::scored::testing::CheckHealth;
using ::scored::testing::HealthStatus;
using ::scored::testing::ScoredProcess;
using ::scored::testing::ScoredProcessOptions;
using ::testing::HasSubstr;

grpc::Status CallScore(v1::Scorer::Stub* stub, const std::vector<int32_t>& ids, v1::ScoreResponse* response) {
  v1::ScoreRequest request;
  for (int32_t id : ids) request.mutable_tokens()->add_ids(id);
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
  return stub->Score(&context, request, response);
}

TEST(GpuFaultE2eTest, DeviceTrapIsStickyNotServingAndExitsNonZero) {
  if (!CudaBackendAvailable()) GTEST_SKIP() << "no usable CUDA device (or no CUDA backend in this build)";
  ScoredProcessOptions o;
  o.args = {"--model=" + scored::testing::StoriesModelDir(), "--backend=cuda", "--batch_timeout_us=0",
            "--fault_inject=device_trap_after:2", "--shutdown_grace_s=5"};
  auto started = ScoredProcess::Start(o);
  ASSERT_TRUE(started.ok()) << started.status();
  std::unique_ptr<ScoredProcess> proc = std::move(*started);
  auto stub =
      v1::Scorer::NewStub(grpc::CreateChannel(proc->grpc_address(), grpc::InsecureChannelCredentials()));

  // Two batches on a healthy device, with real numbers.
  v1::ScoreResponse first, second;
  ASSERT_TRUE(CallScore(stub.get(), {1, 403, 407, 261}, &first).ok());
  ASSERT_TRUE(CallScore(stub.get(), {1, 403, 407, 261, 378}, &second).ok());
  EXPECT_EQ(first.num_scored(), 3);
  ASSERT_EQ(second.logprob_size(), 4);
  EXPECT_LT(second.logprob(0), 0.0f);
  EXPECT_EQ(first.logprob(0), second.logprob(0)) << "the same prefix scores the same";

  // The third batch meets the trapped device.
  v1::ScoreResponse third;
  const grpc::Status failed = CallScore(stub.get(), {1, 403}, &third);
  EXPECT_EQ(failed.error_code(), grpc::StatusCode::UNAVAILABLE) << failed.error_message();
  EXPECT_THAT(failed.error_message(), HasSubstr("CUDA device failed"));
  v1::ScoreResponse later;
  EXPECT_EQ(CallScore(stub.get(), {1, 403, 407}, &later).error_code(), grpc::StatusCode::UNAVAILABLE);

  auto health = CheckHealth(proc->grpc_address(), "");
  ASSERT_TRUE(health.ok()) << health.status() << " (the listener stays up 2 s after the failure)";
  EXPECT_EQ(*health, HealthStatus::kNotServing);
  auto code = proc->Wait(absl::Seconds(60));
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 1);
  const std::string log = proc->ReadLog();
  EXPECT_THAT(log, HasSubstr("cudaErrorLaunchFailure"));
  EXPECT_THAT(log, HasSubstr("exiting after a fatal engine error"));
}

}  // namespace
}  // namespace scored
