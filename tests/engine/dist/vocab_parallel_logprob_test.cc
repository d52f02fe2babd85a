// Vocab-parallel scoring tail on 2 GPUs vs the same shards combined on one GPU: the per-shard kernel and
// the combine order are the same, so log-probs and greedy flags must be bitwise equal on every rank.
#include "engine/dist/vocab_parallel_logprob.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#include "engine/dist/nccl_communicator.h"
#include "engine/kernels/logprob.h"
#include "gtest/gtest.h"

namespace scored::dist {
namespace {

constexpr int64_t kTokens = 33;
constexpr int64_t kVocab = 32003;               // odd: the last rank's shard is one row short
constexpr int64_t kPerRank = (kVocab + 1) / 2;  // ShardPlan's padded width, the logits' ld

int UsableGpus() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    static_cast<void>(cudaGetLastError());
    return 0;
  }
  return count;
}

// Deterministic logits in about [-8, 8) with repeated values (ties), [kTokens, kVocab].
std::vector<float> MakeLogits() {
  std::vector<float> x(static_cast<size_t>(kTokens * kVocab));
  uint64_t s = 0x9e3779b97f4a7c15ull;
  for (float& v : x) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    v = static_cast<float>(static_cast<int>((s >> 33) % 4096) - 2048) / 256.0f;
  }
  return x;
}

std::vector<int32_t> MakeTargets() {
  std::vector<int32_t> t(static_cast<size_t>(kTokens));
  for (int64_t i = 0; i < kTokens; ++i)
    t[static_cast<size_t>(i)] = static_cast<int32_t>((i * 7919 + 3) % kVocab);
  t[0] = 0;
  t[1] = static_cast<int32_t>(kPerRank - 1);
  t[2] = static_cast<int32_t>(kPerRank);
  t[3] = static_cast<int32_t>(kVocab - 1);
  return t;
}

template <typename T>
T* Upload(const std::vector<T>& host) {
  void* d = nullptr;
  if (cudaMalloc(&d, host.size() * sizeof(T)) != cudaSuccess) return nullptr;
  if (cudaMemcpy(d, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice) != cudaSuccess)
    return nullptr;
  return static_cast<T*>(d);
}

struct Result {
  std::vector<double> logprob;
  std::vector<uint8_t> greedy;
};

// One GPU (device 0): shards computed one after the other, then combined.
Result OneGpu(const std::vector<float>& logits, const std::vector<int32_t>& targets) {
  Result r;
  EXPECT_EQ(cudaSetDevice(0), cudaSuccess);
  float* d_logits = Upload(logits);
  int32_t* d_targets = Upload(targets);
  void* stats = nullptr;
  void* lp = nullptr;
  void* greedy = nullptr;
  EXPECT_EQ(cudaMalloc(&stats, 2 * kTokens * sizeof(kernels::LogitPartialStats)), cudaSuccess);
  EXPECT_EQ(cudaMalloc(&lp, kTokens * sizeof(double)), cudaSuccess);
  EXPECT_EQ(cudaMalloc(&greedy, kTokens), cudaSuccess);
  auto* s = static_cast<kernels::LogitPartialStats*>(stats);  // [2, kTokens]
  const int64_t begin[2] = {0, kPerRank};
  const int64_t size[2] = {kPerRank, kVocab - kPerRank};
  for (int r2 = 0; r2 < 2; ++r2) {
    EXPECT_TRUE(kernels::ComputeLogitPartialStats(d_logits + begin[r2], kVocab, d_targets, kTokens, size[r2],
                                                  begin[r2], s + r2 * kTokens, nullptr)
                    .ok());
  }
  EXPECT_TRUE(kernels::CombineLogitPartialStats(s, 2, kTokens, d_targets, static_cast<double*>(lp),
                                                static_cast<uint8_t*>(greedy), nullptr)
                  .ok());
  r.logprob.resize(kTokens);
  r.greedy.resize(kTokens);
  EXPECT_EQ(cudaMemcpy(r.logprob.data(), lp, kTokens * sizeof(double), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(r.greedy.data(), greedy, kTokens, cudaMemcpyDeviceToHost), cudaSuccess);
  for (void* p : {static_cast<void*>(d_logits), static_cast<void*>(d_targets), stats, lp, greedy})
    cudaFree(p);
  return r;
}

void RunRank(NcclCommunicator* comm, const std::vector<float>& logits, const std::vector<int32_t>& targets,
             Result* out) {
  ASSERT_EQ(cudaSetDevice(comm->device()), cudaSuccess);
  const int64_t begin = comm->rank() * kPerRank;
  const int64_t size = std::min(kPerRank, kVocab - begin);
  std::vector<float> shard(static_cast<size_t>(kTokens * kPerRank), 0.0f);  // [kTokens, kPerRank], padded
  for (int64_t t = 0; t < kTokens; ++t) {
    std::memcpy(&shard[static_cast<size_t>(t * kPerRank)], &logits[static_cast<size_t>(t * kVocab + begin)],
                static_cast<size_t>(size) * sizeof(float));
  }
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  float* d_logits = Upload(shard);
  int32_t* d_targets = Upload(targets);
  void* ws = nullptr;
  void* lp = nullptr;
  void* greedy = nullptr;
  ASSERT_EQ(cudaMalloc(&ws, static_cast<size_t>(VocabParallelWorkspaceBytes(comm->num_ranks(), kTokens))),
            cudaSuccess);
  ASSERT_EQ(cudaMalloc(&lp, kTokens * sizeof(double)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&greedy, kTokens), cudaSuccess);
  const absl::Status st =
      VocabParallelLogprob(*comm, d_logits, kPerRank, size, begin, d_targets, kTokens,
                           static_cast<kernels::LogitPartialStats*>(ws), static_cast<double*>(lp),
                           static_cast<uint8_t*>(greedy), stream);
  ASSERT_TRUE(st.ok()) << st;
  const absl::Status sync = comm->Synchronize(stream, absl::Seconds(60));
  ASSERT_TRUE(sync.ok()) << sync;
  out->logprob.resize(kTokens);
  out->greedy.resize(kTokens);
  ASSERT_EQ(cudaMemcpy(out->logprob.data(), lp, kTokens * sizeof(double), cudaMemcpyDeviceToHost),
            cudaSuccess);
  ASSERT_EQ(cudaMemcpy(out->greedy.data(), greedy, kTokens, cudaMemcpyDeviceToHost), cudaSuccess);
  for (void* p : {static_cast<void*>(d_logits), static_cast<void*>(d_targets), ws, lp, greedy}) cudaFree(p);
  cudaStreamDestroy(stream);
}

TEST(VocabParallelLogprobTest, TwoGpusMatchOneGpuCombineBitwise) {
  if (UsableGpus() < 2) GTEST_SKIP() << "needs 2 usable CUDA devices";
  const std::vector<float> logits = MakeLogits();
  const std::vector<int32_t> targets = MakeTargets();
  const Result want = OneGpu(logits, targets);
  auto comms = NcclCommunicator::CreateLocal({0, 1});
  ASSERT_TRUE(comms.ok()) << comms.status();
  Result got[2];
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back(RunRank, (*comms)[static_cast<size_t>(r)].get(), std::cref(logits),
                         std::cref(targets), &got[r]);
  }
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(got[r].logprob.size(), want.logprob.size());
    EXPECT_EQ(std::memcmp(got[r].logprob.data(), want.logprob.data(), kTokens * sizeof(double)), 0)
        << "rank " << r;
    EXPECT_EQ(got[r].greedy, want.greedy) << "rank " << r;
  }
  EXPECT_TRUE(DestroyCommunicators(&*comms).ok());
}

}  // namespace
}  // namespace scored::dist
