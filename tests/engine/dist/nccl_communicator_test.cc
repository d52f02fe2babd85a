// Two-GPU tests of the NCCL communicator: exact sum all-reduce (fp32 and bf16 with small integers, whose
// sums are exact in either type, so the results are compared for equality), creation from one thread and
// from one thread per rank, and the timeout -> abort -> sticky status -> watchdog path.
#include "engine/dist/nccl_communicator.h"

#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace scored::dist {
namespace {

int UsableGpus() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    static_cast<void>(cudaGetLastError());
    return 0;
  }
  return count;
}

class MultiGpuTest : public ::testing::Test {
 protected:
  void SetUp() override { RequireGpus(2); }
  void RequireGpus(int n) {
    if (UsableGpus() < n) GTEST_SKIP() << "needs " << n << " usable CUDA devices";
  }
};

// bf16 bits of a float that bf16 holds exactly.
uint16_t ExactBf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  return static_cast<uint16_t>(bits >> 16);
}

float InputValue(int rank, int64_t i) { return static_cast<float>((rank + 1) * 10 + i % 7); }

// Rank `rank` of `comm`: fills a buffer with InputValue, all-reduces in place, checks the exact sum over
// `num_ranks` ranks. Runs on its own thread.
void RunAllReduce(NcclCommunicator* comm, ReduceDType dtype, int64_t count) {
  ASSERT_EQ(cudaSetDevice(comm->device()), cudaSuccess);
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  const int64_t esize = dtype == ReduceDType::kF32 ? 4 : 2;
  std::vector<uint8_t> host(static_cast<size_t>(count * esize));  // [count] of dtype
  for (int64_t i = 0; i < count; ++i) {
    const float v = InputValue(comm->rank(), i);
    if (dtype == ReduceDType::kF32) {
      std::memcpy(&host[static_cast<size_t>(i * 4)], &v, 4);
    } else {
      const uint16_t b = ExactBf16(v);
      std::memcpy(&host[static_cast<size_t>(i * 2)], &b, 2);
    }
  }
  void* device = nullptr;  // [count] of dtype
  ASSERT_EQ(cudaMalloc(&device, host.size()), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(device, host.data(), host.size(), cudaMemcpyHostToDevice, stream), cudaSuccess);
  const absl::Status st = comm->AllReduceSum(device, device, count, dtype, stream);
  ASSERT_TRUE(st.ok()) << st;
  ASSERT_EQ(cudaMemcpyAsync(host.data(), device, host.size(), cudaMemcpyDeviceToHost, stream), cudaSuccess);
  const absl::Status sync = comm->Synchronize(stream, absl::Seconds(60));
  ASSERT_TRUE(sync.ok()) << sync;
  for (int64_t i = 0; i < count; ++i) {
    float want = 0.0f;
    for (int r = 0; r < comm->num_ranks(); ++r) want += InputValue(r, i);
    if (dtype == ReduceDType::kF32) {
      float got;
      std::memcpy(&got, &host[static_cast<size_t>(i * 4)], 4);
      ASSERT_EQ(got, want) << "element " << i;
    } else {
      uint16_t got;
      std::memcpy(&got, &host[static_cast<size_t>(i * 2)], 2);
      ASSERT_EQ(got, ExactBf16(want)) << "element " << i;
    }
  }
  EXPECT_EQ(cudaFree(device), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(stream), cudaSuccess);
}

TEST(NcclCommunicatorArgsTest, RejectsBadDeviceLists) {
  EXPECT_EQ(NcclCommunicator::CreateLocal({}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(NcclCommunicator::CreateLocal({0, 0}).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(MultiGpuTest, AllReduceSumFp32AndBf16) {
  auto comms = NcclCommunicator::CreateLocal({0, 1});
  ASSERT_TRUE(comms.ok()) << comms.status();
  for (ReduceDType dtype : {ReduceDType::kF32, ReduceDType::kBF16}) {
    for (int64_t count : {int64_t{1}, int64_t{4099}, int64_t{1} << 22}) {
      std::vector<std::thread> threads;
      for (auto& c : *comms) threads.emplace_back(RunAllReduce, c.get(), dtype, count);
      for (std::thread& t : threads) t.join();
    }
  }
  for (auto& c : *comms) EXPECT_TRUE(c->status().ok()) << c->status();
  const absl::Status st = DestroyCommunicators(&*comms);
  EXPECT_TRUE(st.ok()) << st;
}

TEST_F(MultiGpuTest, OneThreadPerRankCreation) {
  auto id = NcclCommunicator::NewUniqueId();
  ASSERT_TRUE(id.ok()) << id.status();
  std::vector<std::unique_ptr<NcclCommunicator>> comms(2);
  std::vector<absl::Status> status(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      auto c = NcclCommunicator::CreateRank(*id, 2, r, r);
      status[static_cast<size_t>(r)] = c.status();
      if (c.ok()) comms[static_cast<size_t>(r)] = std::move(*c);
    });
  }
  for (std::thread& t : threads) t.join();
  for (const absl::Status& s : status) ASSERT_TRUE(s.ok()) << s;
  threads.clear();
  for (auto& c : comms) threads.emplace_back(RunAllReduce, c.get(), ReduceDType::kF32, int64_t{65536});
  for (std::thread& t : threads) t.join();
  EXPECT_TRUE(DestroyCommunicators(&comms).ok());
}

// Rank 1 never joins the all-reduce: rank 0's kernel waits forever until the timeout aborts it; the
// status is then sticky, the stream drains, and the watchdog reports the failure once and aborts rank 1.
// Both ranks first run one all-reduce together: NCCL (>= 2.22, NCCL_RUNTIME_CONNECT) connects the ranks
// lazily inside the first collective, and on a non-blocking communicator that first call stays
// ncclInProgress until the peer joins it (so a lone first all-reduce fails at enqueue after op_timeout
// instead of leaving a kernel waiting, which is what this test is about).
TEST_F(MultiGpuTest, TimeoutAbortsAndIsSticky) {
  NcclOptions options;
  options.destroy_timeout = absl::Seconds(5);
  options.op_timeout = absl::Seconds(20);
  auto comms = NcclCommunicator::CreateLocal({0, 1}, options);
  ASSERT_TRUE(comms.ok()) << comms.status();
  NcclCommunicator* rank0 = (*comms)[0].get();
  NcclCommunicator* rank1 = (*comms)[1].get();
  {
    std::vector<std::thread> threads;
    for (auto& c : *comms) threads.emplace_back(RunAllReduce, c.get(), ReduceDType::kF32, int64_t{1024});
    for (std::thread& t : threads) t.join();
  }
  ASSERT_TRUE(rank0->status().ok()) << rank0->status();
  ASSERT_TRUE(rank1->status().ok()) << rank1->status();
  absl::Notification reported;
  int reports = 0;
  absl::Status reported_status;
  auto watchdog = std::make_unique<NcclWatchdog>(std::vector<NcclCommunicator*>{rank0, rank1},
                                                 absl::Milliseconds(10), [&](const absl::Status& st) {
                                                   ++reports;
                                                   reported_status = st;
                                                   reported.Notify();
                                                 });
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  void* buffer = nullptr;  // [1024] fp32
  ASSERT_EQ(cudaMalloc(&buffer, 1024 * sizeof(float)), cudaSuccess);
  const absl::Status enqueued = rank0->AllReduceSum(buffer, buffer, 1024, ReduceDType::kF32, stream);
  ASSERT_TRUE(enqueued.ok()) << enqueued;
  const absl::Time start = absl::Now();
  const absl::Status st = rank0->Synchronize(stream, absl::Seconds(2));
  EXPECT_EQ(st.code(), absl::StatusCode::kDeadlineExceeded) << st;
  EXPECT_LT(absl::Now() - start, absl::Seconds(30)) << "the abort must not hang";
  EXPECT_EQ(rank0->status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(rank0->AllReduceSum(buffer, buffer, 1024, ReduceDType::kF32, stream).code(),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(rank0->raw(), nullptr);
  EXPECT_TRUE(reported.WaitForNotificationWithTimeout(absl::Seconds(10)));
  watchdog.reset();
  EXPECT_EQ(reports, 1);
  EXPECT_EQ(reported_status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_FALSE(rank1->status().ok()) << "the watchdog aborts the peers";
  // The aborted kernel exits, so the stream drains.
  const absl::Time drain = absl::Now();
  while (cudaStreamQuery(stream) == cudaErrorNotReady && absl::Now() - drain < absl::Seconds(20)) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  EXPECT_NE(cudaStreamQuery(stream), cudaErrorNotReady);
  static_cast<void>(cudaFree(buffer));
  static_cast<void>(cudaStreamDestroy(stream));
  comms->clear();
}

}  // namespace
}  // namespace scored::dist
