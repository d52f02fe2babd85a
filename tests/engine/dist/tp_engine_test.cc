// The tensor-parallel CUDA engine (--tp 2) against the one-GPU engine (--tp 1) on every checkpoint format
// we have: every folder of SCORED_FIXTURES_DIR (W4A16 g128 sym/asym/actorder, per-channel int4/int8,
// NVFP4A16, NVFP4 (run W4A16), FP8 W8A16, FP8 W8A8 per-token and block, Qwen2 q/k/v bias, Qwen3 q/k norm)
// plus the dense float32 stories260K (tied embeddings, 8 heads / 4 KV heads). Needs 2 GPUs (label
// multi_gpu); skips cleanly with fewer.
//
// Inputs: the trained stories260K models (stories260K-hf and the stories260k-* fixtures) score the real
// TinyStories token ids of stories260K-hf/reference_logprobs.json; the random-weight fixtures score seeded
// random tokens (any input is as good for them).
//
// Tolerances and why. The one-GPU engine sums o_proj and down_proj over the two halves of their input in
// tp 2's order (engine/cuda/forward/linear.h SumsInHalves) and a shard's column-parallel GEMMs give bitwise
// tp 1's columns, so tp 2 computes bitwise tp 1's hidden states; only the log-softmax differs (its per-token
// statistics combine from two vocabulary halves in double). Measured on 2 x H200, 2026-11-22:
//  - weight-only formats whose halves are 16-byte aligned (every random-weight fixture), both modes: max
//  |delta
//    logprob| <= 1e-5 nats (measured <= 9.5e-7), entropy max |delta| <= 1e-5 (<= 2.4e-7), greedy flags and
//    ranks identical. (Before the halves: bf16 mean |delta| 0.0032-0.0068, the random weights amplifying one
//    activation rounded the other way under a reordered fp32 sum.)
//  - the stories260K models (intermediate 172: half of it is 86 elements, not 16-byte aligned, so down_proj
//    stays one GEMM at tp 1 and its sum order differs): the bounds. fp32: max |delta| <= 1e-4
//    (measured
//    <= 2.2e-5), entropy max <= 1e-4, greedy identical; bf16 (real text): mean |delta| <= 0.005 (measured
//    0.0021-0.0046), PPL within 0.1% (<= 0.03%), entropy mean <= 0.005, greedy >= 99%.
//  - W8A8 (FP8 activations), both modes, statistically (DESIGN.md §6): an activation a hair from an FP8
//    rounding boundary rounds to the other FP8 value after any reordered sum, a 1/16..1/8 relative step
//    (cuda_engine_test measures 0.09-0.13 nats mean |delta| against the CPU reference even in fp32).
//    Measured tp 2 vs tp 1 (random tokens): mean |delta| 0.009-0.013 (fp32) and up to 0.050 (bf16), PPL
//    <= 0.41%: bounds mean |delta| <= 0.1, PPL within 1%, entropy mean |delta| <= 0.05.
//  - rank (1 + #logits strictly above the target's): a logit within the noise of the target's can fall
//    on either side, and the stories260K vocabulary holds ~256 byte-fallback tokens whose logits nearly
//    tie; measured equal on 93-100% of positions in fp32 and 72-98% in bf16. The kernels' rank is checked
//    exactly against the reference in kernels_test; here mean |delta rank| <= 10 (2% of the vocabulary)
//    catches a wrong combination (a shard's count lost or doubled moves ranks by ~100s).
//  - determinism at tp 2: bitwise, run to run and alone vs in a batch (an fp32 all-reduce of two
//    partials is one commutative add).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "engine/cuda/cuda_engine.h"
#include "engine/engine.h"
#include "engine/reference/reference_engine.h"
#include "engine/score_contract.h"
#include "tests/engine/cuda/gpu_fixture.h"

namespace scored {
namespace {

using ::scored::testing::EnvOr;

const std::string kFixturesDir = EnvOr("SCORED_FIXTURES_DIR", SCORED_FIXTURES_DIR);
const std::string kStoriesDir = EnvOr("SCORED_DATA_DIR", SCORED_DATA_DIR) + "/stories260K-hf";

class TpEngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (CudaDeviceCount() < 2) GTEST_SKIP() << "needs 2 usable CUDA devices";
  }
};

EngineOptions Options(const std::string& dir, int tp, ComputeDtype dtype, int64_t max_batch_tokens = 4096) {
  EngineOptions options;
  options.model_dir = dir;
  options.backend = Backend::kCuda;
  options.dtype = dtype;
  options.tp = tp;
  options.max_batch_tokens = max_batch_tokens;
  return options;
}

absl::StatusOr<std::unique_ptr<Engine>> Make(const std::string& dir, int tp, ComputeDtype dtype,
                                             int64_t max_batch_tokens = 4096) {
  return CreateCudaEngine(Options(dir, tp, dtype, max_batch_tokens));
}

// Every model folder the CUDA backend runs: the fixtures (sorted; not Qwen3.5's or Qwen3-Next's, whose Gated
// DeltaNet runs on the CPU backend only so far) and the dense stories260K.
std::vector<std::string> ModelDirs() {
  std::vector<std::string> dirs;
  for (const auto& entry : std::filesystem::directory_iterator(kFixturesDir)) {
    const std::string folder = entry.path().filename().string();
    if (folder.rfind("qwen35-", 0) == 0 || folder.rfind("qwen3-next-", 0) == 0) continue;
    if (entry.is_directory() && std::filesystem::exists(entry.path() / "config.json")) {
      dirs.push_back(entry.path().string());
    }
  }
  std::sort(dirs.begin(), dirs.end());
  dirs.push_back(kStoriesDir);
  return dirs;
}

bool IsStories(const std::string& dir) {
  const std::string name = std::filesystem::path(dir).filename().string();
  return name.rfind("stories260", 0) == 0;
}

// The TinyStories sample's token ids (real text for the trained stories260K models).
std::vector<ScoreRequest> StoriesRequests() {
  std::ifstream in(kStoriesDir + "/reference_logprobs.json");
  const nlohmann::json j = nlohmann::json::parse(in);
  std::vector<ScoreRequest> requests;
  for (const auto& story : j["tinystories_sample"]["stories"]) {
    ScoreRequest r;
    r.tokens = story["token_ids"].get<std::vector<int32_t>>();
    r.want_rank = true;
    r.want_entropy = true;
    requests.push_back(r);
  }
  return requests;
}

// Seeded random sequences over the 512-token vocabulary every model here shares, of mixed lengths.
std::vector<ScoreRequest> Requests(bool rank_and_entropy) {
  std::mt19937 rng(20261122);
  std::uniform_int_distribution<int32_t> id(0, 511);
  std::vector<ScoreRequest> requests;
  for (int n : {64, 37, 128, 5, 200}) {
    ScoreRequest r;
    for (int j = 0; j < n; ++j) r.tokens.push_back(id(rng));
    r.tokens[0] = 1;  // BOS
    r.want_rank = rank_and_entropy;
    r.want_entropy = rank_and_entropy;
    requests.push_back(r);
  }
  requests[2].score_from = 40;
  return requests;
}

// `requests` with every sequence cut to `max_seq_len` tokens (the family fixtures' max_position_embeddings is
// 128; Requests() has a 200-token one).
std::vector<ScoreRequest> CappedAt(std::vector<ScoreRequest> requests, int64_t max_seq_len) {
  for (ScoreRequest& r : requests) {
    if (static_cast<int64_t>(r.tokens.size()) > max_seq_len)
      r.tokens.resize(static_cast<size_t>(max_seq_len));
  }
  return requests;
}

// The CPU backend's (the oracle's) results for `requests` on the model in `dir` (empty on a failure, which
// is reported).
std::vector<ScoreResult> CpuScores(const std::string& dir, const std::vector<ScoreRequest>& requests) {
  EngineOptions options;
  options.model_dir = dir;
  options.backend = Backend::kCpu;
  options.max_batch_tokens = 1 << 20;
  auto engine = CreateReferenceEngine(options);
  EXPECT_TRUE(engine.ok()) << engine.status();
  if (!engine.ok()) return {};
  auto results = ScoreAll(**engine, requests);
  EXPECT_TRUE(results.ok()) << results.status();
  return results.ok() ? *std::move(results) : std::vector<ScoreResult>{};
}

struct Comparison {
  int64_t count = 0;
  double max_abs = 0, sum_abs = 0, sum_a = 0, sum_b = 0;
  double max_entropy = 0, sum_entropy = 0;
  int64_t greedy_same = 0, rank_same = 0, rank_abs = 0;
};

Comparison Compare(const std::vector<ScoreResult>& a, const std::vector<ScoreResult>& b) {
  Comparison c;
  EXPECT_EQ(a.size(), b.size());
  for (size_t s = 0; s < std::min(a.size(), b.size()); ++s) {
    EXPECT_EQ(a[s].num_scored, b[s].num_scored);
    for (size_t j = 0; j < std::min(a[s].logprob.size(), b[s].logprob.size()); ++j) {
      const double d = std::fabs(static_cast<double>(a[s].logprob[j]) - b[s].logprob[j]);
      c.max_abs = std::max(c.max_abs, d);
      c.sum_abs += d;
      c.sum_a += a[s].logprob[j];
      c.sum_b += b[s].logprob[j];
      c.greedy_same += a[s].greedy[j] == b[s].greedy[j] ? 1 : 0;
      if (j < a[s].rank.size() && j < b[s].rank.size()) {
        c.rank_same += a[s].rank[j] == b[s].rank[j] ? 1 : 0;
        c.rank_abs += std::abs(a[s].rank[j] - b[s].rank[j]);
      }
      if (j < a[s].entropy.size() && j < b[s].entropy.size()) {
        const double e = std::fabs(static_cast<double>(a[s].entropy[j]) - b[s].entropy[j]);
        c.max_entropy = std::max(c.max_entropy, e);
        c.sum_entropy += e;
      }
      ++c.count;
    }
  }
  return c;
}

void ExpectBitwiseEqual(const std::vector<ScoreResult>& a, const std::vector<ScoreResult>& b,
                        const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t s = 0; s < a.size(); ++s) {
    EXPECT_EQ(a[s].logprob, b[s].logprob) << what << ", sequence " << s;
    EXPECT_EQ(a[s].greedy, b[s].greedy) << what << ", sequence " << s;
    EXPECT_EQ(a[s].rank, b[s].rank) << what << ", sequence " << s;
    EXPECT_EQ(a[s].entropy, b[s].entropy) << what << ", sequence " << s;
    EXPECT_EQ(a[s].sum_logprob, b[s].sum_logprob) << what << ", sequence " << s;
  }
}

void CompareTp2WithTp1(ComputeDtype dtype) {
  const bool fp32 = dtype == ComputeDtype::kFp32;
  const std::vector<ScoreRequest> random_requests = Requests(/*rank_and_entropy=*/true);
  const std::vector<ScoreRequest> stories_requests = StoriesRequests();
  ASSERT_FALSE(stories_requests.empty());
  for (const std::string& dir : ModelDirs()) {
    SCOPED_TRACE(dir);
    auto one = Make(dir, 1, dtype);
    // Formats the CUDA backend refuses at load (none of the committed fixtures today).
    if (!one.ok() && one.status().code() == absl::StatusCode::kUnimplemented) continue;
    ASSERT_TRUE(one.ok()) << one.status();
    const std::vector<ScoreRequest> requests =
        CappedAt(IsStories(dir) ? stories_requests : random_requests, (*one)->info().max_seq_len);
    auto two = Make(dir, 2, dtype);
    // A tiny fixture whose grouped scales cannot be cut in two (gemma2-w4a16-g32: o_proj's 96 input columns
    // in groups of 32), or whose rotation blocks a shard would cut (stories260k-quip-w4a16-channel: size 64
    // over 32 columns, UNIMPLEMENTED on the CUDA backend), is refused at load naming the tensor: that refusal
    // is the behaviour under test there.
    if (!two.ok() &&
        (two.status().code() == absl::StatusCode::kUnimplemented ||
         std::string(two.status().message()).find("not on a multiple of group_size") != std::string::npos)) {
      std::cout << "tp2 refused " << dir << ": " << two.status() << "\n";
      continue;
    }
    ASSERT_TRUE(two.ok()) << two.status();
    EXPECT_EQ((*two)->info().tp, 2);
    auto a = ScoreAll(*(*one), requests);
    ASSERT_TRUE(a.ok()) << a.status();
    auto b = ScoreAll(*(*two), requests);
    ASSERT_TRUE(b.ok()) << b.status();
    const Comparison c = Compare(*a, *b);
    const double ppl_a = std::exp(-c.sum_a / c.count), ppl_b = std::exp(-c.sum_b / c.count);
    const double ppl_rel = std::fabs(ppl_b / ppl_a - 1);
    const double greedy_rate = static_cast<double>(c.greedy_same) / c.count;
    const double rank_rate = static_cast<double>(c.rank_same) / c.count;
    const double rank_mean_abs = static_cast<double>(c.rank_abs) / c.count;
    // Activation quantization (W8A8, W4AFP8 / W4A8, static scales, an FP8 KV cache): the statistical bounds.
    const std::string& format = (*one)->info().format;
    const bool w8a8 = format.find("w8a8") != std::string::npos || format.find("w4a8") != std::string::npos ||
                      format.find("w4afp8") != std::string::npos ||
                      format.find("+kv-fp8") != std::string::npos;
    std::cout << "tp2 vs tp1 " << (fp32 ? "fp32" : "bf16") << " "
              << std::filesystem::path(dir).filename().string() << ": tokens " << c.count
              << ", max |d logprob| " << c.max_abs << ", mean " << c.sum_abs / c.count << ", ppl " << ppl_a
              << " vs " << ppl_b << " (rel " << ppl_rel << "), entropy max |d| " << c.max_entropy << " mean "
              << c.sum_entropy / c.count << ", greedy same " << greedy_rate << ", rank same " << rank_rate
              << " mean |d rank| " << rank_mean_abs << (w8a8 ? " (w8a8)" : "")
              << (IsStories(dir) ? " (real text)" : " (random tokens)") << "\n";
    // Mixture-of-experts fixtures: tp 2 sums each rank's weighted slice of every expert, tp 1 weights the
    // whole expert output (another order of fp32 adds), and on random weights a near-tie of router scores
    // turns that rounding into another expert: the random-MoE bound of cuda_engine_test (statistical).
    const bool moe = dir.find("-moe-") != std::string::npos;
    EXPECT_LE(rank_mean_abs, 10.0);
    if (moe) {
      EXPECT_LE(c.sum_abs / c.count, 0.1);
      EXPECT_LE(ppl_rel, 0.04);
    } else if (w8a8) {
      // An activation a hair from a rounding boundary takes the other code after any change of accumulation
      // order (DESIGN.md §6), so tp 2 may move from tp 1 as far as the GPU moves from the CPU oracle on the
      // same requests (the same order change, measured in this test), or 0.1 where that is less. Measured on
      // two H200s, 2026-11-26, bf16: the random Gemma 3 fixture (logprobs of -20 to -60 nats) 0.22, the
      // 2:4-pruned stories260k-sparse24-fp8-dynamic (PPL 93) 0.14 (entropy 0.064), the others <= 0.06.
      const Comparison oracle = Compare(*a, CpuScores(dir, requests));
      std::cout << "  (w8a8) tp 1 vs the CPU oracle: mean |d logprob| " << oracle.sum_abs / oracle.count
                << ", entropy mean |d| " << oracle.sum_entropy / oracle.count << "\n";
      EXPECT_LE(c.sum_abs / c.count, std::max(0.1, oracle.sum_abs / oracle.count));
      EXPECT_LE(ppl_rel, 0.01);
      EXPECT_LE(c.sum_entropy / c.count, std::max(0.05, oracle.sum_entropy / oracle.count));
      EXPECT_GE(greedy_rate, 0.95);
    } else if (!IsStories(dir)) {
      EXPECT_LE(c.max_abs, 1e-5);
      EXPECT_LE(c.max_entropy, 1e-5);
      EXPECT_EQ(c.greedy_same, c.count);
      EXPECT_EQ(c.rank_same, c.count);
    } else if (fp32) {
      EXPECT_LE(c.max_abs, 1e-4);
      EXPECT_LE(c.max_entropy, 1e-4);
      EXPECT_EQ(c.greedy_same, c.count);
    } else {
      EXPECT_LE(c.sum_abs / c.count, 0.005);
      EXPECT_LE(ppl_rel, 0.001);
      EXPECT_LE(c.sum_entropy / c.count, 0.005);
      EXPECT_GE(greedy_rate, 0.99);
    }
  }
}

TEST_F(TpEngineTest, Fp32Tp2MatchesTp1OnEveryFixture) { CompareTp2WithTp1(ComputeDtype::kFp32); }

TEST_F(TpEngineTest, Bf16Tp2MatchesTp1OnEveryFixture) { CompareTp2WithTp1(ComputeDtype::kBf16); }

// --reference_model at tp 2 (both models sharded, the comparison's partials all-gathered) against tp 1, on
// the trained W4A16 stories260K fixture against its dense original over real text: the stories260K bounds
// above (fp32: max |delta| <= 1e-4 for kld and ref_logprob, flags identical; bf16: mean |delta| <= 0.005,
// same_top >= 99%); a model against itself is exactly 0 at tp 2 too.
TEST_F(TpEngineTest, BaselineComparisonAtTp2MatchesTp1) {
  const std::vector<ScoreRequest> requests = [] {
    std::vector<ScoreRequest> r = StoriesRequests();
    for (ScoreRequest& request : r) request.want_reference = true;
    return r;
  }();
  const std::string q = kFixturesDir + "/stories260k-w4a16-channel";
  for (const ComputeDtype dtype : {ComputeDtype::kFp32, ComputeDtype::kBf16}) {
    const bool fp32 = dtype == ComputeDtype::kFp32;
    EngineOptions one_options = Options(q, 1, dtype), two_options = Options(q, 2, dtype);
    one_options.reference_model_dir = two_options.reference_model_dir = kStoriesDir;
    auto one = CreateCudaEngine(one_options);
    ASSERT_TRUE(one.ok()) << one.status();
    auto two = CreateCudaEngine(two_options);
    ASSERT_TRUE(two.ok()) << two.status();
    auto a = ScoreAll(**one, requests);
    ASSERT_TRUE(a.ok()) << a.status();
    auto b = ScoreAll(**two, requests);
    ASSERT_TRUE(b.ok()) << b.status();
    double max_kld = 0.0, sum_kld = 0.0, max_ref = 0.0, sum_ref = 0.0;
    int64_t count = 0, same = 0;
    for (size_t i = 0; i < a->size(); ++i) {
      const ScoreResult &x = (*a)[i], &y = (*b)[i];
      ASSERT_EQ(x.kld.size(), y.kld.size());
      for (size_t j = 0; j < x.kld.size(); ++j) {
        const double dk = std::fabs(static_cast<double>(x.kld[j]) - y.kld[j]);
        const double dr = std::fabs(static_cast<double>(x.ref_logprob[j]) - y.ref_logprob[j]);
        max_kld = std::max(max_kld, dk);
        sum_kld += dk;
        max_ref = std::max(max_ref, dr);
        sum_ref += dr;
        same += x.same_top[j] == y.same_top[j] && x.ref_greedy[j] == y.ref_greedy[j] ? 1 : 0;
        ++count;
      }
    }
    std::cout << "reference comparison tp2 vs tp1 " << (fp32 ? "fp32" : "bf16") << ": tokens " << count
              << ", kld max |d| " << max_kld << " mean " << sum_kld / count << ", ref_logprob max |d| "
              << max_ref << " mean " << sum_ref / count << ", flags same "
              << static_cast<double>(same) / count << "\n";
    if (fp32) {
      EXPECT_LE(max_kld, 1e-4);
      EXPECT_LE(max_ref, 1e-4);
      EXPECT_EQ(same, count);
    } else {
      EXPECT_LE(sum_kld / count, 0.005);
      EXPECT_LE(sum_ref / count, 0.005);
      EXPECT_GE(static_cast<double>(same) / count, 0.99);
    }
  }
  EngineOptions self = Options(kStoriesDir, 2, ComputeDtype::kBf16);
  self.reference_model_dir = kStoriesDir;
  auto engine = CreateCudaEngine(self);
  ASSERT_TRUE(engine.ok()) << engine.status();
  auto got = ScoreAll(**engine, requests);
  ASSERT_TRUE(got.ok()) << got.status();
  for (const ScoreResult& r : *got) {
    for (int32_t j = 0; j < r.num_scored; ++j) EXPECT_EQ(r.kld[j], 0.0f) << j;
  }
}

TEST_F(TpEngineTest, Tp2IsBitwiseBatchInvariantAndRepeatable) {
  for (const ComputeDtype dtype : {ComputeDtype::kBf16, ComputeDtype::kFp32}) {
    for (const std::string& dir : {kFixturesDir + "/llama-w4a16-g128", kStoriesDir}) {
      SCOPED_TRACE(dir);
      auto engine = Make(dir, 2, dtype);
      ASSERT_TRUE(engine.ok()) << engine.status();
      const std::vector<ScoreRequest> requests = Requests(/*rank_and_entropy=*/true);
      auto batched = ScoreAll(*(*engine), requests);
      ASSERT_TRUE(batched.ok()) << batched.status();
      auto again = ScoreAll(*(*engine), requests);
      ASSERT_TRUE(again.ok()) << again.status();
      ExpectBitwiseEqual(*batched, *again, "run to run");
      std::vector<ScoreResult> alone;
      for (const ScoreRequest& r : requests) {
        auto one = ScoreAll(*(*engine), {r});
        ASSERT_TRUE(one.ok()) << one.status();
        alone.push_back((*one)[0]);
      }
      ExpectBitwiseEqual(*batched, alone, "alone vs batched");
    }
  }
}

// Row-chunk pipelining (EngineOptions::tp_row_chunks: every op of a layer runs chunk by chunk, each chunk's
// sum over ranks overlapping the next chunks): every row's result is bitwise the same as unchunked (GEMM
// algorithms are pinned per weight shape, norms are per row, attention per sequence, a row's sum over two
// ranks is one fp32 add). Chunks hold whole sequences: the 434-token batch (sequences of 64, 37, 128, 5 and
// 200 tokens) runs as 2 chunks when 3 are asked (229 and 205 rows) and as 3 when 8 are (64, 165, 205); the
// W8A8 fixture (a row-parallel amax all-reduce) stays one chunk.
TEST_F(TpEngineTest, Tp2RowChunkedIsBitwiseEqualToUnchunked) {
  for (const ComputeDtype dtype : {ComputeDtype::kBf16, ComputeDtype::kFp32}) {
    for (const std::string& dir : {kFixturesDir + "/llama-w4a16-g128", kFixturesDir + "/qwen3-w4a16-g128",
                                   kFixturesDir + "/llama-fp8-dynamic", kStoriesDir}) {
      SCOPED_TRACE(dir);
      const std::vector<ScoreRequest> requests = Requests(/*rank_and_entropy=*/true);
      std::vector<std::vector<ScoreResult>> results;
      for (const int chunks : {1, 3, 8}) {
        SCOPED_TRACE(chunks);
        EngineOptions options = Options(dir, 2, dtype);
        options.tp_row_chunks = chunks;
        auto engine = CreateCudaEngine(options);
        ASSERT_TRUE(engine.ok()) << engine.status();
        auto scored = ScoreAll(*(*engine), requests);
        ASSERT_TRUE(scored.ok()) << scored.status();
        results.push_back(*std::move(scored));
      }
      ExpectBitwiseEqual(results[0], results[1], "3 row chunks vs unchunked");
      ExpectBitwiseEqual(results[0], results[2], "8 row chunks vs unchunked");
    }
  }
}

// tp 2 in one process sums the row-parallel partials with copy-engine peer copies (engine/cuda/peer_link.h)
// and adds the peer's rows in the next norm; EngineOptions::tp_exchange kNccl runs NCCL all-reduces instead
// (what the multi-process mode runs). Both give bitwise the same results: a two-rank sum is one fp32 add
// either way. Unchunked and in 3 row chunks; weight-only, W8A8 (the FP8 norm path adds the peer's rows
// separately), Qwen2 and the dense stories260K.
TEST_F(TpEngineTest, Tp2PeerCopiesAreBitwiseTheNcclAllReduce) {
  for (const ComputeDtype dtype : {ComputeDtype::kBf16, ComputeDtype::kFp32}) {
    for (const std::string& dir : {kFixturesDir + "/llama-w4a16-g128", kFixturesDir + "/qwen2-w4a16-g128",
                                   kFixturesDir + "/llama-fp8-dynamic", kStoriesDir}) {
      for (const int chunks : {1, 3}) {
        SCOPED_TRACE(dir + (dtype == ComputeDtype::kBf16 ? ", bf16" : ", fp32") + ", row chunks " +
                     std::to_string(chunks));
        const std::vector<ScoreRequest> requests = Requests(/*rank_and_entropy=*/true);
        std::vector<std::vector<ScoreResult>> results;
        for (const TpExchange exchange : {TpExchange::kNccl, TpExchange::kCopy}) {
          EngineOptions options = Options(dir, 2, dtype);
          options.tp_row_chunks = chunks;
          options.tp_exchange = exchange;
          auto engine = CreateCudaEngine(options);
          ASSERT_TRUE(engine.ok()) << engine.status();
          auto scored = ScoreAll(*(*engine), requests);
          ASSERT_TRUE(scored.ok()) << scored.status();
          results.push_back(*std::move(scored));
        }
        ExpectBitwiseEqual(results[0], results[1], "peer copies vs NCCL all-reduce");
      }
    }
  }
}

TEST_F(TpEngineTest, BadRowChunksSettingFailsAtLoad) {
  for (const int chunks : {-1, 9}) {
    EngineOptions options = Options(kStoriesDir, 2, ComputeDtype::kBf16);
    options.tp_row_chunks = chunks;
    auto engine = CreateCudaEngine(options);
    ASSERT_FALSE(engine.ok());
    EXPECT_EQ(engine.status().code(), absl::StatusCode::kInvalidArgument) << engine.status();
    EXPECT_NE(engine.status().message().find("--tp_row_chunks"), std::string::npos) << engine.status();
  }
}

TEST_F(TpEngineTest, NonShardableCheckpointFailsAtLoadNamingTheRule) {
  // tp 4 cuts o_proj's 256 input columns into 64, which is not a multiple of the 128-column groups. The
  // shard check runs before any device is used, so this needs no 4 GPUs.
  auto engine = Make(kFixturesDir + "/llama-w4a16-g128", 4, ComputeDtype::kBf16);
  ASSERT_FALSE(engine.ok());
  EXPECT_EQ(engine.status().code(), absl::StatusCode::kInvalidArgument) << engine.status();
  EXPECT_NE(engine.status().message().find("group_size 128"), std::string::npos) << engine.status();
}

// Top-k across ranks (fp32): the k log-probs in order agree with tp 1 within 1e-4 (the fp32 bound above;
// a sorted list is as close as its entries even where two near-tied ids swap places), the ids agree on
// >= 99% of entries (near ties may swap), and the first id is the argmax (the greedy flag).
TEST_F(TpEngineTest, TopKAtTp2MatchesTp1) {
  for (const std::string& dir : {kStoriesDir, kFixturesDir + "/qwen2-w4a16-g128"}) {
    SCOPED_TRACE(dir);
    auto one = Make(dir, 1, ComputeDtype::kFp32);
    ASSERT_TRUE(one.ok()) << one.status();
    auto two = Make(dir, 2, ComputeDtype::kFp32);
    ASSERT_TRUE(two.ok()) << two.status();
    std::vector<ScoreRequest> requests = IsStories(dir) ? StoriesRequests() : Requests(false);
    for (size_t i = 0; i < requests.size(); ++i) requests[i].top_k = i % 2 == 0 ? 64 : 5;
    auto a = ScoreAll(*(*one), requests);
    ASSERT_TRUE(a.ok()) << a.status();
    auto b = ScoreAll(*(*two), requests);
    ASSERT_TRUE(b.ok()) << b.status();
    int64_t entries = 0, same_ids = 0;
    double max_abs = 0;
    for (size_t s = 0; s < requests.size(); ++s) {
      ASSERT_EQ((*a)[s].top_k.size(), (*b)[s].top_k.size());
      for (size_t j = 0; j < (*b)[s].top_k.size(); ++j) {
        const std::vector<TopKEntry>& x = (*a)[s].top_k[j];
        const std::vector<TopKEntry>& y = (*b)[s].top_k[j];
        ASSERT_EQ(x.size(), static_cast<size_t>(requests[s].top_k));
        ASSERT_EQ(y.size(), x.size());
        const int32_t target = requests[s].tokens[std::max<int32_t>(1, requests[s].score_from) + j];
        EXPECT_EQ(y[0].id == target, (*b)[s].greedy[j] == 1) << "sequence " << s << " position " << j;
        for (size_t e = 0; e < x.size(); ++e) {
          same_ids += x[e].id == y[e].id ? 1 : 0;
          max_abs = std::max(max_abs, std::fabs(static_cast<double>(x[e].logprob) - y[e].logprob));
          if (e > 0) {
            EXPECT_GE(y[e - 1].logprob, y[e].logprob);
          }
          ++entries;
        }
      }
    }
    const double id_rate = static_cast<double>(same_ids) / entries;
    std::cout << "top-k tp2 vs tp1 fp32 " << std::filesystem::path(dir).filename().string() << ": entries "
              << entries << ", ids same " << id_rate << ", max |d logprob| " << max_abs << "\n";
    EXPECT_LE(max_abs, 1e-4);
    EXPECT_GE(id_rate, 0.99);
  }
}

// A stored reference's requests at tp 2 (vocab-parallel): top_k 512 (the whole vocabulary of stories260K:
// R's save run), and Q's gather at given ids plus the min logprob (its run against the file) combined across
// the two vocabulary halves, within the fp32 bound of 1e-4 of tp 1; a candidate id that is also a top-k id
// gets bitwise its top-k logprob at tp 2 too (one combined lse).
TEST_F(TpEngineTest, CandidatesAndWideTopKAtTp2MatchTp1) {
  auto one = Make(kStoriesDir, 1, ComputeDtype::kFp32);
  ASSERT_TRUE(one.ok()) << one.status();
  auto two = Make(kStoriesDir, 2, ComputeDtype::kFp32);
  ASSERT_TRUE(two.ok()) << two.status();
  std::vector<ScoreRequest> requests = StoriesRequests();
  requests.resize(3);
  std::mt19937 rng(35);
  for (ScoreRequest& r : requests) {
    r.top_k = 512;
    r.num_candidates = 300;
    r.want_min_logprob = true;
    for (size_t j = 1; j < r.tokens.size(); ++j) {
      for (int c = 0; c < r.num_candidates; ++c) r.candidate_ids.push_back(static_cast<int32_t>(rng() % 512));
    }
  }
  auto a = ScoreAll(*(*one), requests);
  ASSERT_TRUE(a.ok()) << a.status();
  auto b = ScoreAll(*(*two), requests);
  ASSERT_TRUE(b.ok()) << b.status();
  double max_cand = 0.0, max_min = 0.0;
  for (size_t s = 0; s < requests.size(); ++s) {
    const ScoreResult &x = (*a)[s], &y = (*b)[s];
    ASSERT_EQ(y.candidate_logprob.size(), x.candidate_logprob.size());
    ASSERT_EQ(y.min_logprob.size(), x.min_logprob.size());
    for (size_t e = 0; e < x.candidate_logprob.size(); ++e) {
      max_cand =
          std::max(max_cand, std::fabs(static_cast<double>(x.candidate_logprob[e]) - y.candidate_logprob[e]));
    }
    for (size_t j = 0; j < x.min_logprob.size(); ++j) {
      max_min = std::max(max_min, std::fabs(static_cast<double>(x.min_logprob[j]) - y.min_logprob[j]));
      ASSERT_EQ(y.top_k[j].size(), 512u);
      // y's own top-k entry of candidate 0's id.
      const int32_t id = requests[s].candidate_ids[j * 300];
      for (const TopKEntry& e : y.top_k[j]) {
        if (e.id == id) {
          EXPECT_EQ(e.logprob, y.candidate_logprob[j * 300]) << s << " " << j;
        }
      }
      EXPECT_EQ(y.top_k[j].back().logprob, y.min_logprob[j]) << s << " " << j;
    }
  }
  std::cout << "candidates tp2 vs tp1 fp32: max |d candidate logprob| " << max_cand
            << ", max |d min logprob| " << max_min << "\n";
  EXPECT_LE(max_cand, 1e-4);
  EXPECT_LE(max_min, 1e-4);
}

// A communicator that fails (here: rank 1's aborted, as a dead link would leave it) turns the engine
// UNAVAILABLE within the watchdog's period, and no Score() hangs: neither one in flight when the fault
// happens nor a later one.
TEST_F(TpEngineTest, CommunicatorFaultMakesEngineUnavailableWithoutHanging) {
  auto engine = Make(kFixturesDir + "/llama-w4a16-g128", 2, ComputeDtype::kFp32, 8192);
  ASSERT_TRUE(engine.ok()) << engine.status();
  Engine* e = engine->get();
  std::vector<ScoreRequest> big;
  for (int i = 0; i < 16; ++i) {
    ScoreRequest r;
    for (int j = 0; j < 500; ++j) r.tokens.push_back((i * 31 + j * 7) % 512);
    big.push_back(r);
  }
  ASSERT_TRUE(ScoreAll(*e, big).ok());
  // Fault in the middle of a run of batches.
  std::future<absl::Status> in_flight = std::async(std::launch::async, [&] {
    for (int k = 0; k < 100; ++k) {
      auto result = ScoreAll(*e, big);
      if (!result.ok()) return result.status();
    }
    return absl::OkStatus();
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(InjectCommunicatorFaultForTesting(e, 1).ok());
  ASSERT_EQ(in_flight.wait_for(std::chrono::seconds(30)), std::future_status::ready)
      << "Score() hung after a communicator fault";
  const absl::Status run = in_flight.get();
  EXPECT_EQ(run.code(), absl::StatusCode::kUnavailable) << run;
  while (e->fatal_status().ok() && std::chrono::steady_clock::now() - start < std::chrono::seconds(5)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::cout << "fatal after " << seconds << " s: " << e->fatal_status() << "\n";
  EXPECT_EQ(e->fatal_status().code(), absl::StatusCode::kUnavailable);
  auto later = ScoreAll(*e, Requests(false));
  EXPECT_EQ(later.status().code(), absl::StatusCode::kUnavailable) << later.status();
}

}  // namespace
}  // namespace scored
