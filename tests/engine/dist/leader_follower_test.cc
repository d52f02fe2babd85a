// The leader / follower protocol (engine/dist/leader_follower.h) over the real TCP control channel on
// loopback: the bootstrap payload and its fingerprint check, batches delivered intact and in order, the
// leader's clean shutdown, a lost leader handed to the engine's fail callback. CPU only.
#include "engine/dist/leader_follower.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "server/control_service.h"

namespace scored::dist {
namespace {

using ::testing::HasSubstr;

constexpr size_t kIdBytes = 128;

// A loopback port that was free a moment ago (the kernel hands out ephemeral ports round-robin).
int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) return -1;
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

// The server's gRPC control transport: plaintext, no token (loopback only).
std::shared_ptr<ControlTransportFactory> GrpcFactory() {
  absl::StatusOr<std::shared_ptr<GrpcControlTransportFactory>> factory =
      GrpcControlTransportFactory::Create(ControlSecurity());
  EXPECT_TRUE(factory.ok()) << factory.status();
  return factory.ok() ? *factory : nullptr;
}

cuda::PackedBatch Batch(int n, int32_t first_id) {
  ScoreRequest r;
  for (int i = 0; i < n; ++i) r.tokens.push_back(first_id + i);
  const std::vector<const ScoreRequest*> group = {&r};
  return cuda::PackBatch(group);
}

TEST(BootstrapPayloadTest, CarriesTheIdAndChecksTheFingerprint) {
  const std::string id(kIdBytes, '\x07');
  const std::string payload = MakeBootstrapPayload(id, "fp-a");
  absl::StatusOr<std::string> got = CheckBootstrapPayload(payload, kIdBytes, "fp-a", "/models/a");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, id);
  got = CheckBootstrapPayload(payload, kIdBytes, "fp-b", "/models/b");
  EXPECT_EQ(got.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(got.status().message()),
              HasSubstr("the leader serves model fp-a but this process loaded fp-b from /models/b"));
  got = CheckBootstrapPayload(id.substr(0, 10), kIdBytes, "fp-a", "/models/a");
  EXPECT_EQ(got.status().code(), absl::StatusCode::kInternal);
}

TEST(LeaderFollowerTest, BatchesArriveInOrderAndShutdownEndsTheFollower) {
  const std::string rendezvous = absl::StrCat("127.0.0.1:", FreePort());
  const std::string id(kIdBytes, 'i');
  std::shared_ptr<ControlTransportFactory> factory = GrpcFactory();
  ASSERT_NE(factory, nullptr);
  std::vector<cuda::PackedBatch> received;
  absl::Status follower_end = absl::UnknownError("not run");
  std::string follower_id;
  std::thread follower_thread([&] {
    absl::StatusOr<std::unique_ptr<Follower>> follower =
        Follower::Join(*factory, rendezvous, 2, 1, kIdBytes, "fingerprint", "/model");
    if (!follower.ok()) {
      follower_end = follower.status();
      return;
    }
    follower_id = (*follower)->nccl_id();
    follower_end = (*follower)->Run(
        1024, [] { return absl::OkStatus(); },
        [&](const cuda::PackedBatch& batch) {
          received.push_back(batch);
          return absl::OkStatus();
        },
        [](const absl::Status& status) { return status; });
  });
  absl::StatusOr<std::unique_ptr<Leader>> leader = Leader::Start(*factory, rendezvous, 2, id, "fingerprint");
  ASSERT_TRUE(leader.ok()) << leader.status();
  const cuda::PackedBatch a = Batch(5, 100), b = Batch(9, 200);
  ASSERT_TRUE((*leader)->Broadcast(a).ok());
  ASSERT_TRUE((*leader)->Broadcast(b).ok());
  ASSERT_TRUE((*leader)->Shutdown().ok());
  follower_thread.join();
  EXPECT_TRUE(follower_end.ok()) << follower_end;
  EXPECT_EQ(follower_id, id);
  ASSERT_EQ(received.size(), 2u);
  EXPECT_EQ(received[0].tokens, a.tokens);
  EXPECT_EQ(received[1].tokens, b.tokens);
  EXPECT_EQ(received[1].fb.cu_seqlens, b.fb.cu_seqlens);
}

TEST(LeaderFollowerTest, AnotherModelIsRefusedByTheFollower) {
  const std::string rendezvous = absl::StrCat("127.0.0.1:", FreePort());
  std::shared_ptr<ControlTransportFactory> factory = GrpcFactory();
  ASSERT_NE(factory, nullptr);
  absl::Status joined;
  std::thread follower_thread(
      [&] { joined = Follower::Join(*factory, rendezvous, 2, 1, kIdBytes, "mine", "/model").status(); });
  absl::StatusOr<std::unique_ptr<Leader>> leader =
      Leader::Start(*factory, rendezvous, 2, std::string(kIdBytes, 'i'), "theirs");
  ASSERT_TRUE(leader.ok()) << leader.status();
  follower_thread.join();
  EXPECT_EQ(joined.code(), absl::StatusCode::kFailedPrecondition) << joined;
}

TEST(LeaderFollowerTest, ALostLeaderGoesToTheFailCallback) {
  const std::string rendezvous = absl::StrCat("127.0.0.1:", FreePort());
  std::shared_ptr<ControlTransportFactory> factory = GrpcFactory();
  ASSERT_NE(factory, nullptr);
  absl::Status failed_with = absl::OkStatus();
  absl::Status follower_end;
  absl::Notification joined;
  std::thread follower_thread([&] {
    absl::StatusOr<std::unique_ptr<Follower>> follower =
        Follower::Join(*factory, rendezvous, 2, 1, kIdBytes, "fp", "/model");
    joined.Notify();
    if (!follower.ok()) {
      follower_end = follower.status();
      return;
    }
    follower_end = (*follower)->Run(
        1024, [] { return absl::OkStatus(); }, [](const cuda::PackedBatch&) { return absl::OkStatus(); },
        [&](const absl::Status& status) {
          failed_with = status;
          return absl::UnavailableError("engine failed");
        });
  });
  {
    absl::StatusOr<std::unique_ptr<Leader>> leader =
        Leader::Start(*factory, rendezvous, 2, std::string(kIdBytes, 'i'), "fp");
    ASSERT_TRUE(leader.ok()) << leader.status();
    joined.WaitForNotification();
  }  // the leader goes away without a Shutdown()
  follower_thread.join();
  EXPECT_EQ(follower_end.message(), "engine failed");
  EXPECT_EQ(failed_with.code(), absl::StatusCode::kUnavailable) << failed_with;
  EXPECT_THAT(std::string(failed_with.message()), HasSubstr("lost the leader"));
}

TEST(LeaderFollowerTest, AMalformedBatchGoesToTheFailCallback) {
  const std::string rendezvous = absl::StrCat("127.0.0.1:", FreePort());
  std::shared_ptr<ControlTransportFactory> factory = GrpcFactory();
  ASSERT_NE(factory, nullptr);
  absl::Status failed_with = absl::OkStatus();
  std::thread follower_thread([&] {
    absl::StatusOr<std::unique_ptr<Follower>> follower =
        Follower::Join(*factory, rendezvous, 2, 1, kIdBytes, "fp", "/model");
    if (!follower.ok()) return;
    // A max_tokens below the batch's 5 tokens: the follower must refuse it, never run it.
    (*follower)
        ->Run(
            4, [] { return absl::OkStatus(); }, [](const cuda::PackedBatch&) { return absl::OkStatus(); },
            [&](const absl::Status& status) {
              failed_with = status;
              return status;
            })
        .IgnoreError();
  });
  absl::StatusOr<std::unique_ptr<Leader>> leader =
      Leader::Start(*factory, rendezvous, 2, std::string(kIdBytes, 'i'), "fp");
  ASSERT_TRUE(leader.ok()) << leader.status();
  // The follower may refuse the batch and leave before the back-pressure wait returns: then the
  // broadcast reports the lost follower, which is as right as OK.
  const absl::Status sent = (*leader)->Broadcast(Batch(5, 1));
  follower_thread.join();
  EXPECT_TRUE(sent.ok() || absl::IsUnavailable(sent)) << sent;
  EXPECT_EQ(failed_with.code(), absl::StatusCode::kInternal) << failed_with;
  EXPECT_THAT(std::string(failed_with.message()), HasSubstr("num_tokens 5 outside [1, 4]"));
}

}  // namespace
}  // namespace scored::dist
