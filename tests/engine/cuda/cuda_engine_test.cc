// The CUDA engine against the CPU reference engine and the float64 goldens of stories260K-hf, on the GPU.
//
// Tolerances and why:
//  - fp32 mode: max |delta logprob| <= 1e-3 nats vs the float64 golden. fp32 GEMMs (no TF32) and fp32 kernels
//    keep every activation to ~1e-6 relative; 1e-3 leaves room for fp32 accumulation order only.
//  - bf16 mode on stories260K: mean |delta logprob| <= 0.015 nats and PPL within 0.3% of the CPU reference
//    engine. Measured on an H200 (2026-11-22): transformers' own bf16 run of these stories errs by 0.0208
//    nats on average vs float64 (PPL 3.68551 vs 3.69240, 0.19%); rounding the fp32 checkpoint's weights to
//    bf16 alone (reference engine, fp32 math) already costs 0.0057. 0.015 stays below the framework users
//    compare with; the engine measured 0.0125 with bf16 o/down outputs, 0.0121 with fp32 ones (H100,
//    2026-11-25). 0.01 is out of bf16's reach here: bf16 activations alone, with exact float32 weights, cost
//    0.0105 (a numpy emulation of each rounding point, scripts/fixtures/bf16_error_budget.py; q/k as the
//    attention product's bf16 operands are the largest single term, 0.0075).
//  - determinism: bitwise, run to run and alone vs in a batch (pinned GEMM algorithms, row-wise kernels).
#include "engine/cuda/cuda_engine.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/reference/reference_engine.h"
#include "engine/score_contract.h"
#include "engine/tokenizer/tokenizer.h"
#include "tests/engine/cuda/gpu_fixture.h"

namespace scored {
namespace {

using ::scored::testing::GpuTest;

using ::scored::testing::EnvOr;

const std::string kStoriesDir = EnvOr("SCORED_DATA_DIR", SCORED_DATA_DIR) + "/stories260K-hf";

struct Golden {
  std::vector<ScoreRequest> requests;
  std::vector<std::vector<double>> logprobs;
};

Golden LoadStoriesGolden() {
  std::ifstream in(kStoriesDir + "/reference_logprobs.json");
  const nlohmann::json j = nlohmann::json::parse(in);
  Golden g;
  for (const auto& story : j["tinystories_sample"]["stories"]) {
    ScoreRequest r;
    r.tokens = story["token_ids"].get<std::vector<int32_t>>();
    g.requests.push_back(r);
    g.logprobs.push_back(story["token_logprobs"].get<std::vector<double>>());
  }
  return g;
}

std::unique_ptr<Engine> MakeCuda(const std::string& dir, ComputeDtype dtype,
                                 int64_t max_batch_tokens = 4096) {
  EngineOptions options;
  options.model_dir = dir;
  options.backend = Backend::kCuda;
  options.dtype = dtype;
  options.max_batch_tokens = max_batch_tokens;
  auto engine = CreateCudaEngine(options);
  EXPECT_TRUE(engine.ok()) << engine.status();
  return engine.ok() ? std::move(*engine) : nullptr;
}

std::unique_ptr<Engine> MakeReference(const std::string& dir) {
  EngineOptions options;
  options.model_dir = dir;
  options.backend = Backend::kCpu;
  options.max_batch_tokens = 1 << 20;
  auto engine = CreateReferenceEngine(options);
  EXPECT_TRUE(engine.ok()) << engine.status();
  return engine.ok() ? std::move(*engine) : nullptr;
}

struct Agreement {
  double mean_abs = 0.0, max_abs = 0.0, ppl = 0.0, ref_ppl = 0.0;
};

Agreement Compare(const std::vector<ScoreResult>& got, const std::vector<ScoreResult>& want) {
  Agreement a;
  double sum_abs = 0.0, sum_got = 0.0, sum_want = 0.0;
  int64_t count = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].num_scored, want[i].num_scored);
    for (int32_t j = 0; j < std::min(got[i].num_scored, want[i].num_scored); ++j) {
      const double d = std::abs(static_cast<double>(got[i].logprob[j]) - want[i].logprob[j]);
      sum_abs += d;
      a.max_abs = std::max(a.max_abs, d);
      ++count;
    }
    sum_got += got[i].sum_logprob;
    sum_want += want[i].sum_logprob;
  }
  a.mean_abs = sum_abs / std::max<int64_t>(1, count);
  a.ppl = std::exp(-sum_got / std::max<int64_t>(1, count));
  a.ref_ppl = std::exp(-sum_want / std::max<int64_t>(1, count));
  return a;
}

void ExpectBitwiseEqual(const ScoreResult& a, const ScoreResult& b, const std::string& what) {
  ASSERT_EQ(a.num_scored, b.num_scored) << what;
  EXPECT_EQ(std::memcmp(a.logprob.data(), b.logprob.data(), a.logprob.size() * sizeof(float)), 0) << what;
  EXPECT_EQ(a.greedy, b.greedy) << what;
  EXPECT_EQ(std::memcmp(&a.sum_logprob, &b.sum_logprob, sizeof(double)), 0) << what;
}

// num_windows windows of BOS + (window - 1) consecutive ids of WikiText-2 test through the stories260K
// tokenizer.
std::vector<ScoreRequest> WikiTextWindows(int num_windows, int window) {
  std::ifstream in(EnvOr("SCORED_DATA_DIR", SCORED_DATA_DIR) + "/wikitext-2-raw/wiki.test.raw");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  text.resize(std::min<size_t>(text.size(), 64 * 1024));
  auto tokenizer = Tokenizer::Load(kStoriesDir);
  EXPECT_TRUE(tokenizer.ok()) << tokenizer.status();
  if (!tokenizer.ok()) return {};
  auto ids = (*tokenizer)->Encode(text);
  EXPECT_TRUE(ids.ok()) << ids.status();
  std::vector<ScoreRequest> windows;
  for (int w = 0; ids.ok() && w < num_windows && static_cast<size_t>((w + 1) * (window - 1)) <= ids->size();
       ++w) {
    ScoreRequest r;
    r.tokens.push_back((*tokenizer)->bos_id());
    r.tokens.insert(r.tokens.end(), ids->begin() + w * (window - 1), ids->begin() + (w + 1) * (window - 1));
    windows.push_back(std::move(r));
  }
  return windows;
}

class CudaEngineTest : public GpuTest {};

TEST_F(CudaEngineTest, Fp32MatchesFloat64Golden) {
  const Golden golden = LoadStoriesGolden();
  auto engine = MakeCuda(kStoriesDir, ComputeDtype::kFp32);
  ASSERT_NE(engine, nullptr);
  auto results = ScoreAll(*engine, golden.requests);
  ASSERT_TRUE(results.ok()) << results.status();
  double max_abs = 0.0;
  for (size_t i = 0; i < golden.requests.size(); ++i) {
    ASSERT_EQ((*results)[i].num_scored, static_cast<int32_t>(golden.logprobs[i].size()));
    for (size_t j = 0; j < golden.logprobs[i].size(); ++j) {
      max_abs = std::max(max_abs, std::abs((*results)[i].logprob[j] - golden.logprobs[i][j]));
    }
  }
  RecordProperty("fp32_max_abs_delta", std::to_string(max_abs));
  EXPECT_LE(max_abs, 1e-3);
}

TEST_F(CudaEngineTest, Bf16MatchesReferenceEngine) {
  const Golden golden = LoadStoriesGolden();
  auto engine = MakeCuda(kStoriesDir, ComputeDtype::kBf16);
  auto reference = MakeReference(kStoriesDir);
  ASSERT_NE(engine, nullptr);
  ASSERT_NE(reference, nullptr);
  auto got = ScoreAll(*engine, golden.requests);
  auto want = ScoreAll(*reference, golden.requests);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_TRUE(want.ok()) << want.status();
  const Agreement a = Compare(*got, *want);
  std::cout << "stories260K bf16: mean |delta| " << a.mean_abs << " max " << a.max_abs << " PPL " << a.ppl
            << " vs reference " << a.ref_ppl << "\n";
  EXPECT_LE(a.mean_abs, 0.015);
  EXPECT_LE(std::abs(a.ppl / a.ref_ppl - 1.0), 0.003);
}

TEST_F(CudaEngineTest, GreedyFromBosIsArgmax) {
  std::ifstream in(kStoriesDir + "/reference_logprobs.json");
  const nlohmann::json j = nlohmann::json::parse(in);
  ScoreRequest r;
  r.tokens = j["greedy_from_bos"]["token_ids"].get<std::vector<int32_t>>();
  r.want_rank = true;
  auto engine = MakeCuda(kStoriesDir, ComputeDtype::kFp32);
  ASSERT_NE(engine, nullptr);
  auto results = ScoreAll(*engine, {r});
  ASSERT_TRUE(results.ok()) << results.status();
  for (int32_t i = 0; i < (*results)[0].num_scored; ++i) {
    EXPECT_EQ((*results)[0].greedy[i], 1) << "position " << i + 1;
    EXPECT_EQ((*results)[0].rank[i], 1) << "position " << i + 1;
  }
}

TEST_F(CudaEngineTest, BitwiseDeterministicAndBatchInvariant) {
  for (ComputeDtype dtype : {ComputeDtype::kBf16, ComputeDtype::kFp32}) {
    Golden golden = LoadStoriesGolden();
    golden.requests[2].score_from = 100;
    golden.requests[3].top_k = 5;
    golden.requests[3].want_entropy = true;
    auto engine = MakeCuda(kStoriesDir, dtype);
    ASSERT_NE(engine, nullptr);
    auto batched = ScoreAll(*engine, golden.requests);
    auto again = ScoreAll(*engine, golden.requests);
    ASSERT_TRUE(batched.ok()) << batched.status();
    ASSERT_TRUE(again.ok()) << again.status();
    for (size_t i = 0; i < golden.requests.size(); ++i) {
      auto alone = ScoreAll(*engine, {golden.requests[i]});
      ASSERT_TRUE(alone.ok()) << alone.status();
      ExpectBitwiseEqual((*batched)[i], (*again)[i], "run to run, request " + std::to_string(i));
      ExpectBitwiseEqual((*batched)[i], (*alone)[0], "alone vs batched, request " + std::to_string(i));
    }
    EXPECT_EQ((*batched)[2].num_scored, static_cast<int32_t>(golden.requests[2].tokens.size()) - 100);
    ASSERT_EQ((*batched)[3].top_k.size(), static_cast<size_t>((*batched)[3].num_scored));
    EXPECT_EQ((*batched)[3].top_k[0].size(), 5u);
    EXPECT_EQ((*batched)[3].entropy.size(), static_cast<size_t>((*batched)[3].num_scored));
  }
}

// W8A8 in bf16 mode runs real FP8 GEMMs (per-token activation quantization is row-local, the GEMM's
// algorithm is pinned without split-K) and INT8 GEMMs on int8 tensor cores (exact int32 sums, row-local
// epilogue scales): a request's results are bitwise the same alone or batched, run to run.
TEST_F(CudaEngineTest, W8A8GemmsBatchInvariant) {
  for (const char* name : {"llama-fp8-dynamic", "llama-trained-int8-w8a8"}) {
    SCOPED_TRACE(name);
    const std::string dir = std::string(EnvOr("SCORED_FIXTURES_DIR", SCORED_FIXTURES_DIR)) + "/" + name;
    if (!std::filesystem::exists(dir + "/config.json")) GTEST_SKIP() << "no " << dir;
    auto engine = MakeCuda(dir, ComputeDtype::kBf16);
    ASSERT_NE(engine, nullptr);
    std::mt19937 rng(23);
    std::uniform_int_distribution<int32_t> id(0, static_cast<int32_t>(engine->info().vocab_size) - 1);
    std::vector<ScoreRequest> requests(4);
    for (size_t i = 0; i < requests.size(); ++i) {
      requests[i].tokens.resize(17 + 61 * i);
      for (int32_t& t : requests[i].tokens) t = id(rng);
    }
    auto batched = ScoreAll(*engine, requests);
    auto again = ScoreAll(*engine, requests);
    ASSERT_TRUE(batched.ok()) << batched.status();
    ASSERT_TRUE(again.ok()) << again.status();
    for (size_t i = 0; i < requests.size(); ++i) {
      auto alone = ScoreAll(*engine, {requests[i]});
      ASSERT_TRUE(alone.ok()) << alone.status();
      ExpectBitwiseEqual((*batched)[i], (*again)[i], "run to run, request " + std::to_string(i));
      ExpectBitwiseEqual((*batched)[i], (*alone)[0], "alone vs batched, request " + std::to_string(i));
    }
  }
}

TEST_F(CudaEngineTest, SplitsBatchesLargerThanMaxBatchTokens) {
  const Golden golden = LoadStoriesGolden();
  auto small = MakeCuda(kStoriesDir, ComputeDtype::kBf16, 512);
  auto large = MakeCuda(kStoriesDir, ComputeDtype::kBf16, 4096);
  ASSERT_NE(small, nullptr);
  ASSERT_NE(large, nullptr);
  auto a = ScoreAll(*small, golden.requests);
  auto b = ScoreAll(*large, golden.requests);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  // Bitwise within one engine: the split batch equals each request alone. Two engines (two loads) may time
  // a different GEMM algorithm for a shape (gemm.h Tune), so across them the bound is fp32 accumulation
  // order in bf16 activations.
  for (size_t i = 0; i < golden.requests.size(); ++i) {
    auto alone = ScoreAll(*small, {golden.requests[i]});
    ASSERT_TRUE(alone.ok()) << alone.status();
    ExpectBitwiseEqual((*a)[i], (*alone)[0], std::to_string(i));
  }
  const Agreement agreement = Compare(*a, *b);
  EXPECT_LE(agreement.mean_abs, 0.01);
}

TEST_F(CudaEngineTest, RejectsBadRequestsAndReportsMemory) {
  auto engine = MakeCuda(kStoriesDir, ComputeDtype::kBf16, 1024);
  ASSERT_NE(engine, nullptr);
  ScoreRequest bad_id;
  bad_id.tokens = {1, 600};
  EXPECT_EQ(ScoreAll(*engine, {bad_id}).status().code(), absl::StatusCode::kInvalidArgument);
  ScoreRequest too_long;
  too_long.tokens.assign(2000, 5);
  EXPECT_EQ(ScoreAll(*engine, {too_long}).status().code(), absl::StatusCode::kOutOfRange);
  ScoreRequest one;
  one.tokens = {1};
  EXPECT_EQ(ScoreAll(*engine, {one}).status().code(), absl::StatusCode::kInvalidArgument);
  // A bad request fails alone: the others of its batch are scored, bitwise as when scored alone.
  ScoreRequest good;
  good.tokens = {1, 403, 407, 9, 27};
  good.want_rank = true;
  const std::vector<absl::StatusOr<ScoreResult>> mixed = engine->Score({good, bad_id, one, good});
  ASSERT_EQ(mixed.size(), 4u);
  EXPECT_EQ(mixed[1].status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(mixed[1].status().message()), ::testing::HasSubstr("token id 600 at position 1"));
  EXPECT_EQ(mixed[2].status().code(), absl::StatusCode::kInvalidArgument);
  auto alone = ScoreAll(*engine, {good});
  ASSERT_TRUE(alone.ok()) << alone.status();
  for (const size_t i : {size_t{0}, size_t{3}}) {
    ASSERT_TRUE(mixed[i].ok()) << mixed[i].status();
    ExpectBitwiseEqual(*mixed[i], (*alone)[0], "request " + std::to_string(i) + " of a mixed batch vs alone");
  }
  EXPECT_TRUE(engine->fatal_status().ok());
  const auto memory = engine->DeviceMemory();
  ASSERT_EQ(memory.size(), 1u);
  EXPECT_GT(memory[0].first, 0);
  EXPECT_GT(memory[0].second, memory[0].first);
  EXPECT_EQ(engine->info().backend, "cuda");
}

// A stored reference's requests on the GPU (fp32 mode): R's save run asks top_k 512 (the whole vocabulary
// of stories260K) with entropy, Q's run against the file the logprobs of given ids and the min logprob. Each
// within the fp32 bound of 1e-3 of the CPU reference engine; the candidates that are top-k ids bitwise their
// top-k values; the top-k's last entry is the min logprob; a request with candidates batched with one without
// gives both their results alone, bitwise.
TEST_F(CudaEngineTest, CandidateGatherAndWideTopKMatchReference) {
  auto engine = MakeCuda(kStoriesDir, ComputeDtype::kFp32);
  auto reference = MakeReference(kStoriesDir);
  ASSERT_NE(engine, nullptr);
  ASSERT_NE(reference, nullptr);
  std::vector<ScoreRequest> requests = WikiTextWindows(3, 128);
  ASSERT_EQ(requests.size(), 3u);
  std::mt19937 rng(35);
  for (ScoreRequest& r : requests) {
    r.top_k = 512;
    r.want_entropy = true;
    r.want_min_logprob = true;
    r.num_candidates = 1024;  // more than the vocabulary: ids repeat
    for (size_t e = 0; e < 127 * size_t{1024}; ++e)
      r.candidate_ids.push_back(static_cast<int32_t>(rng() % 512));
  }
  auto got = ScoreAll(*engine, requests);
  ASSERT_TRUE(got.ok()) << got.status();
  auto want = ScoreAll(*reference, requests);
  ASSERT_TRUE(want.ok()) << want.status();
  double max_cand = 0.0, max_min = 0.0, max_top = 0.0;
  for (size_t s = 0; s < requests.size(); ++s) {
    const ScoreResult &g = (*got)[s], &w = (*want)[s];
    ASSERT_EQ(g.candidate_logprob.size(), w.candidate_logprob.size());
    for (size_t e = 0; e < g.candidate_logprob.size(); ++e) {
      max_cand =
          std::max(max_cand, std::fabs(static_cast<double>(g.candidate_logprob[e]) - w.candidate_logprob[e]));
    }
    for (int32_t j = 0; j < g.num_scored; ++j) {
      max_min = std::max(max_min, std::fabs(static_cast<double>(g.min_logprob[j]) - w.min_logprob[j]));
      ASSERT_EQ(g.top_k[j].size(), 512u);
      EXPECT_EQ(g.top_k[j].back().logprob, g.min_logprob[j]) << s << " " << j;
      std::vector<float> by_id(512);
      for (const TopKEntry& e : g.top_k[j]) by_id[e.id] = e.logprob;
      for (int32_t c = 0; c < 1024; ++c) {
        const int32_t id = requests[s].candidate_ids[j * 1024 + c];
        ASSERT_EQ(by_id[id], g.candidate_logprob[j * 1024 + c]) << s << " " << j << " " << c;
      }
      for (size_t e = 0; e < 512; ++e) {
        max_top =
            std::max(max_top, std::fabs(static_cast<double>(g.top_k[j][e].logprob) - w.top_k[j][e].logprob));
      }
    }
  }
  std::cout << "[ measured ] candidates fp32 vs CPU: max |d candidate logprob| " << max_cand
            << ", min logprob " << max_min << ", top-512 logprob " << max_top << std::endl;
  EXPECT_LE(max_cand, 1e-3);
  EXPECT_LE(max_min, 1e-3);
  EXPECT_LE(max_top, 1e-3);
  ScoreRequest plain = requests[1];
  plain.top_k = 0;
  plain.num_candidates = 0;
  plain.candidate_ids.clear();
  plain.want_min_logprob = false;
  auto mixed = ScoreAll(*engine, {plain, requests[0]});
  auto alone = ScoreAll(*engine, {plain});
  ASSERT_TRUE(mixed.ok() && alone.ok());
  ExpectBitwiseEqual((*mixed)[0], (*alone)[0], "a plain request batched with a gather");
  EXPECT_EQ((*mixed)[1].candidate_logprob, (*got)[0].candidate_logprob);
  EXPECT_TRUE((*mixed)[0].candidate_logprob.empty());
}

TEST_F(CudaEngineTest, StartupSaysWhatFits) {
  EngineOptions options;
  options.model_dir = kStoriesDir;
  options.backend = Backend::kCuda;
  options.max_batch_tokens = int64_t{1} << 40;
  auto engine = CreateCudaEngine(options);
  ASSERT_EQ(engine.status().code(), absl::StatusCode::kResourceExhausted) << engine.status();
  EXPECT_NE(engine.status().message().find("tokens fit"), std::string::npos) << engine.status();
}

// Every checkpoint under tests/fixtures (quantized formats) against the CPU reference.
//  - fp32 mode is the exact check of the dequantization path: the dequant kernels give the checkpoint's
//  values
//    exactly in fp32, so weight-only formats must agree to max |delta| <= 1e-3 (fp32 accumulation order only;
//    measured <= 4e-5 on an H200, 2026-11-22).
//  - bf16 mode, weight-only formats: these are random-weight models scored on random tokens, whose logits are
//    large (PPL ~7e4 at vocab 512), so bf16 activation rounding moves logprobs by ~0.03-0.04 nats on average
//    (measured 0.027-0.042 for every weight-only format alike, while fp32 mode agrees to 4e-5: activation
//    noise, not dequantization): mean |delta| <= 0.05, PPL within 2% (|ln(PPL ratio)| is the mean signed
//    delta, bounded by the mean |delta|; measured <= 0.6% on the random Llamas, 1.07% on
//    stories260k-w4a16-channel, whose random-token PPL is 6e7, on an H200, 2026-11-22). Where transformers'
//    own bf16 run of the fixture is further off its float32 reference than 0.05 (transformers_bf16.json:
//    the random Gemma 3 fixtures, whose tied embeddings give logprobs of -20 to -60 nats, 0.11-0.13 there),
//    the bound is theirs: no worse than transformers' bf16 (TransformersBf16Error; measured 0.076-0.091 on an
//    H200, 2026-11-26).
//  - W8A8 (FP8 activations), both modes, statistically (DESIGN.md §6): an activation a hair from an FP8
//    rounding boundary rounds differently after any difference in accumulation order, moving that value by a
//    whole FP8 step (1/16..1/8 relative), and on these sensitive random models a few such flips per layer
//    give mean |delta| ~0.1 even in fp32 mode (measured 0.09 / 0.13). PPL within 5% (measured 0.8-1.9%).
//    bf16 mode runs per-token W8A8 as real FP8 GEMMs where cuBLASLt offers them (gemm.h): the activations'
//    codes are the same rule, the accumulation differs, so the same statistical bound applies. Emulated-path
//    numbers on an H200, 2026-11-22: llama-fp8-dynamic bf16 mean |delta| 0.30, PPL -1.9%;
//    llama-trained-fp8-dynamic bf16 0.019 (fp32 0.00054); llama-fp8-block bf16 0.32, PPL +0.8%.
// transformers' own bf16 mean |delta| on fixture `name` (transformers_bf16.json's entries), or on its
// family's W4A16 sibling made from the same base model where the fixture has none (the family fixtures' NVFP4
// W4A4 checkpoints, which transformers runs with FP4 activations: no weight-only yardstick of their own); 0
// when neither is there.
// The fixtures of families the CUDA backend refuses at load (CheckBlocksOnCuda): gpt-oss, Gemma 4.
bool CpuOnlyFixture(const std::string& name) {
  return name.rfind("gpt-oss-", 0) == 0 || name.rfind("gemma4-", 0) == 0;
}

double TransformersBf16Error(const nlohmann::json& yardstick, const std::string& name) {
  const std::string sibling = name.substr(0, name.find('-')) + "-w4a16-g32";
  for (const std::string& key : {name, sibling}) {
    if (yardstick.contains(key)) return yardstick[key]["bf16_mean_abs_delta"].get<double>();
  }
  return 0.0;
}

TEST_F(CudaEngineTest, FixturesMatchReferenceEngine) {
  const std::filesystem::path root(EnvOr("SCORED_FIXTURES_DIR", SCORED_FIXTURES_DIR));
  int checked = 0;
  if (!std::filesystem::exists(root)) GTEST_SKIP() << "no fixtures folder";
  std::ifstream yardstick_file(root / "transformers_bf16.json");
  const nlohmann::json yardstick =
      yardstick_file ? nlohmann::json::parse(yardstick_file)["fixtures"] : nlohmann::json::object();
  for (const auto& entry : std::filesystem::directory_iterator(root)) {
    if (!std::filesystem::exists(entry.path() / "config.json")) continue;
    const std::string dir = entry.path().string();
    SCOPED_TRACE(dir);
    // gpt-oss (attention sinks, its biased experts) and Gemma 4 (its attention): the CUDA backend has no
    // blocks for them yet and refuses the checkpoint at load, naming the CPU backend (cuda_engine.cc
    // CheckBlocksOnCuda).
    if (CpuOnlyFixture(entry.path().filename().string())) {
      EngineOptions options;
      options.model_dir = dir;
      options.backend = Backend::kCuda;
      auto refused = CreateCudaEngine(options);
      ASSERT_FALSE(refused.ok());
      EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnimplemented) << refused.status();
      EXPECT_THAT(std::string(refused.status().message()), ::testing::HasSubstr("--backend=cpu"));
      continue;
    }
    auto reference = MakeReference(dir);
    ASSERT_NE(reference, nullptr);
    const double bf16_bound =
        std::max(0.05, TransformersBf16Error(yardstick, entry.path().filename().string()));
    std::mt19937 rng(17);
    std::uniform_int_distribution<int32_t> id(0, static_cast<int32_t>(reference->info().vocab_size) - 1);
    // 64, 104 and 144 tokens (at most the fixture's max_position_embeddings, 128 for the family fixtures),
    // and 12: longer and shorter than the Phi-3 fixture's longrope original_max_position_embeddings (16), so
    // one batch rotates with both factor tables; longer than the Gemma and Phi-3 fixtures' sliding windows
    // (8, 48).
    const int64_t longest = reference->info().max_seq_len;
    std::vector<ScoreRequest> requests(4);
    for (size_t i = 0; i < requests.size(); ++i) {
      requests[i].tokens.resize(i < 3 ? std::min<int64_t>(64 + 40 * i, longest) : 12);
      for (int32_t& t : requests[i].tokens) t = id(rng);
    }
    auto want = ScoreAll(*reference, requests);
    ASSERT_TRUE(want.ok()) << want.status();
    // Activation quantization (W8A8, W4AFP8 / W4A8, static scales, an FP8 KV cache): the statistical bound
    // below.
    const std::string& format = reference->info().format;
    const bool w8a8 = format.find("w8a8") != std::string::npos || format.find("w4a8") != std::string::npos ||
                      format.find("w4afp8") != std::string::npos ||
                      format.find("+kv-fp8") != std::string::npos;
    // Random-weight mixture-of-experts models in bf16 mode: routing on random weights and tokens is a coin
    // flip near ties, and bf16's rounding of the router's input flips some tokens' experts (a whole expert's
    // difference, up to nats per token): statistical, like W8A8 (measured on an H200, 2026-11-26: mean
    // |delta| 0.021-0.054, max 5.9, PPL within 1.9%). The trained MoE's bf16 run has its real bound
    // (TrainedMoeBf16OnRealText).
    const std::string folder = entry.path().filename().string();
    const bool random_moe =
        folder.find("-moe-") != std::string::npos && folder.find("trained") == std::string::npos;
    // Random-weight Gated DeltaNet models (Qwen3.5) in bf16 mode are chaotic: transformers' own bf16 run sits
    // 0.108 nats mean off its fp32 on the fixture's sequences (4x the attention fixtures'), and ours on these
    // random ids 0.12 (H200, 2026-12-04). Their bf16 bound is transformers' bf16 on the same sequences
    // (FixturesBf16AgainstBf16Floor); the trained Qwen3.5 fixtures hold the bounds below.
    const bool random_delta_net =
        folder.rfind("qwen35-", 0) == 0 && folder.find("trained") == std::string::npos;
    for (ComputeDtype dtype : {ComputeDtype::kFp32, ComputeDtype::kBf16}) {
      auto engine = MakeCuda(dir, dtype);
      ASSERT_NE(engine, nullptr);
      auto got = ScoreAll(*engine, requests);
      ASSERT_TRUE(got.ok()) << got.status();
      const Agreement a = Compare(*got, *want);
      const bool fp32 = dtype == ComputeDtype::kFp32;
      std::cout << "fixture " << entry.path().filename().string() << " (" << engine->info().format << ") "
                << (fp32 ? "fp32" : "bf16") << ": mean |delta| " << a.mean_abs << " max " << a.max_abs
                << " PPL " << a.ppl << " vs reference " << a.ref_ppl << "\n";
      if (w8a8) {
        EXPECT_LE(std::abs(a.ppl / a.ref_ppl - 1.0), 0.05);
      } else if (random_moe && !fp32) {
        EXPECT_LE(a.mean_abs, 0.1);
        EXPECT_LE(std::abs(a.ppl / a.ref_ppl - 1.0), 0.04);
      } else if (fp32) {
        EXPECT_LE(a.max_abs, 1e-3);
      } else if (random_delta_net) {
        EXPECT_LE(std::abs(a.ppl / a.ref_ppl - 1.0), 0.05);  // a sanity bound only (above)
      } else {
        EXPECT_LE(a.mean_abs, bf16_bound);
        EXPECT_LE(std::abs(a.ppl / a.ref_ppl - 1.0), 0.02);
      }
    }
    ++checked;
  }
  if (checked == 0) GTEST_SKIP() << "no checkpoints under " << root;
}

// The trained mixture-of-experts fixtures (routing learned on WikiText, so its decisions are not coin flips)
// in bf16 mode on real text against the CPU oracle: mean |delta logprob| <= 0.01 nats and PPL within 0.3%
// (issue 20's bound; transformers' own bf16 run of MoE checkpoints is no yardstick here, see the fixtures'
// README): Qwen3-MoE's softmax router, and DeepSeek-V3's sigmoid router (GLM-4.5 with and without the group
// limit, MiniMax-M2; issue 35), with multi-head latent attention (DeepSeek-V3 with and without q_lora_rank,
// its W4A16, GLM-4.7-Flash; issue 35), and Qwen3-Next's fused Gated DeltaNet projections (issue 34). Their
// fp32 runs are checked against the oracle to 1e-3 with the other fixtures.
TEST_F(CudaEngineTest, TrainedMoeBf16OnRealText) {
  const std::vector<ScoreRequest> sample = WikiTextWindows(16, 256);
  ASSERT_EQ(sample.size(), 16u);
  for (const char* name :
       {"qwen3-moe-trained-bf16", "glm4-moe-trained-bf16", "glm4-moe-grouped-trained-bf16",
        "minimax-m2-moe-trained-bf16", "deepseek-v3-moe-trained-bf16", "deepseek-v3-moe-nolora-trained-bf16",
        "deepseek-v3-moe-trained-w4a16-g16", "glm4-moe-lite-trained-bf16", "deepseek-v32-moe-trained-bf16",
        "kimi-k25-deepseek-v3-trained-bf16", "qwen3-next-trained-bf16"}) {
    SCOPED_TRACE(name);
    const std::string dir = EnvOr("SCORED_FIXTURES_DIR", SCORED_FIXTURES_DIR) + "/" + name;
    if (!std::filesystem::exists(dir)) {
      std::cout << "no " << dir << "\n";
      continue;
    }
    auto engine = MakeCuda(dir, ComputeDtype::kBf16);
    auto reference = MakeReference(dir);
    ASSERT_NE(engine, nullptr);
    ASSERT_NE(reference, nullptr);
    auto got = ScoreAll(*engine, sample);
    auto want = ScoreAll(*reference, sample);
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_TRUE(want.ok()) << want.status();
    const Agreement a = Compare(*got, *want);
    std::cout << name << " bf16 on WikiText: mean |delta| " << a.mean_abs << " max " << a.max_abs << " PPL "
              << a.ppl << " vs " << a.ref_ppl << "\n";
    EXPECT_LE(a.mean_abs, 0.01);
    EXPECT_LE(std::abs(a.ppl / a.ref_ppl - 1.0), 0.003);
  }
}

// Every grouped-expert kernel choice (EngineOptions::moe_gemm / moe_sm90_schedule, `scored --moe_gemm` /
// `--moe_sm90_schedule`) in one process on the trained mixture-of-experts fixture: each against the CPU
// oracle under the bound above, and ModelInfo::format_notes naming the choice the upload ran with. (Without
// sm_90a every choice runs mma.sync; the notes still name the choice.)
TEST_F(CudaEngineTest, TrainedMoeBf16EveryGroupedKernel) {
  const std::string dir = EnvOr("SCORED_FIXTURES_DIR", SCORED_FIXTURES_DIR) + "/qwen3-moe-trained-bf16";
  if (!std::filesystem::exists(dir)) GTEST_SKIP() << "no " << dir;
  const std::vector<ScoreRequest> sample = WikiTextWindows(16, 256);
  ASSERT_EQ(sample.size(), 16u);
  auto reference = MakeReference(dir);
  ASSERT_NE(reference, nullptr);
  auto want = ScoreAll(*reference, sample);
  ASSERT_TRUE(want.ok()) << want.status();
  struct Choice {
    MoeGemm gemm;
    MoeSm90Schedule schedule;
    const char* note;
  };
  const Choice choices[] = {
      {MoeGemm::kMma, MoeSm90Schedule::kCooperative, "--moe_gemm=mma --moe_sm90_schedule=cooperative"},
      {MoeGemm::kSm90, MoeSm90Schedule::kCooperative, "--moe_gemm=sm90 --moe_sm90_schedule=cooperative"},
      {MoeGemm::kSm90Dequant, MoeSm90Schedule::kCooperative2x1,
       "--moe_gemm=sm90_dequant --moe_sm90_schedule=cooperative2x1"},
      {MoeGemm::kSm90Dequant, MoeSm90Schedule::kPingpong,
       "--moe_gemm=sm90_dequant --moe_sm90_schedule=pingpong"},
  };
  for (const Choice& choice : choices) {
    SCOPED_TRACE(choice.note);
    EngineOptions options;
    options.model_dir = dir;
    options.backend = Backend::kCuda;
    options.dtype = ComputeDtype::kBf16;
    options.max_batch_tokens = 4096;
    options.moe_gemm = choice.gemm;
    options.moe_sm90_schedule = choice.schedule;
    auto engine = CreateCudaEngine(options);
    ASSERT_TRUE(engine.ok()) << engine.status();
    EXPECT_THAT((*engine)->info().format_notes, ::testing::HasSubstr(choice.note));
    auto got = ScoreAll(**engine, sample);
    ASSERT_TRUE(got.ok()) << got.status();
    const Agreement a = Compare(*got, *want);
    EXPECT_LE(a.mean_abs, 0.01);
    EXPECT_LE(std::abs(a.ppl / a.ref_ppl - 1.0), 0.003);
  }
}

// bf16 mode on every weight-only fixture against the bound: mean |delta logprob| <= 0.01 nats and PPL
// within 0.3% of the float32 reference, where bf16 arithmetic allows it.
//  - mean |delta|, on the fixtures' own reference sequences, next to transformers' own bf16 run of the same
//    weights and sequences (tests/fixtures/transformers_bf16.json, made by
//    scripts/fixtures/transformers_bf16.py). Random weights scored on random tokens (PPL 1e3-1e5, logits of
//    tens) put bf16's floor far above 0.01: transformers' bf16 errs by 0.028-0.054 there (H100, 2026-11-25).
//    So: <= max(0.01, transformers' bf16 error); measured 0.019-0.041, 20-35% below transformers' on every
//    fixture.
//  - PPL, against the CPU reference engine on real text: 16 windows of BOS + 255 tokens of WikiText-2 test
//    (every fixture uses the stories260K tokenizer; 4080 scored; 32 windows of BOS + 127, 4064 scored, where
//    max_position_embeddings is 128). The PPL ratio is exp(mean signed delta), whose
//    sampling noise at the references' 189 tokens (~0.3%) is as large as the bound; 4080 tokens bring it to
//    ~0.07%, so the check sees a systematic bias, not the draw. Random tokens are no fair sample for the
//    trained stories260K fixtures: they drive it to PPL 6e7, logits of +-30, where bf16's relative rounding
//    turns into a PPL bias of 0.4-0.75% (H100, 2026-11-25); the random-weight fixtures measured <= 0.15%
//    there.
TEST_F(CudaEngineTest, FixturesBf16AgainstBf16Floor) {
  const std::filesystem::path root(EnvOr("SCORED_FIXTURES_DIR", SCORED_FIXTURES_DIR));
  std::ifstream yardstick_file(root / "transformers_bf16.json");
  if (!yardstick_file) GTEST_SKIP() << "no " << (root / "transformers_bf16.json");
  const nlohmann::json yardstick = nlohmann::json::parse(yardstick_file);
  int checked = 0;
  for (const auto& [name, theirs] : yardstick["fixtures"].items()) {
    const std::string dir = (root / name).string();
    SCOPED_TRACE(dir);
    std::ifstream ref_file(root / name / "reference_logprobs.json");
    ASSERT_TRUE(ref_file.good());
    const nlohmann::json ref = nlohmann::json::parse(ref_file);
    std::vector<ScoreRequest> requests;
    std::vector<std::vector<double>> want;
    for (const auto& s : ref["sequences"]) {
      ScoreRequest r;
      r.tokens = s["token_ids"].get<std::vector<int32_t>>();
      requests.push_back(r);
      want.push_back(s["token_logprobs"].get<std::vector<double>>());
    }
    auto engine = MakeCuda(dir, ComputeDtype::kBf16);
    auto reference = MakeReference(dir);
    ASSERT_NE(engine, nullptr);
    ASSERT_NE(reference, nullptr);
    const int window = static_cast<int>(std::min<int64_t>(256, reference->info().max_seq_len));
    const std::vector<ScoreRequest> sample = WikiTextWindows(16 * 256 / window, window);
    ASSERT_EQ(sample.size(), static_cast<size_t>(16 * 256 / window));
    auto got = ScoreAll(*engine, requests);
    ASSERT_TRUE(got.ok()) << got.status();
    double sum_abs = 0.0;
    int64_t count = 0;
    for (size_t i = 0; i < requests.size(); ++i) {
      ASSERT_EQ((*got)[i].num_scored, static_cast<int32_t>(want[i].size()));
      for (size_t j = 0; j < want[i].size(); ++j) sum_abs += std::abs((*got)[i].logprob[j] - want[i][j]);
      count += static_cast<int64_t>(want[i].size());
    }
    const double mean_abs = sum_abs / count;
    const double their_mean = theirs["bf16_mean_abs_delta"].get<double>();

    auto got_sample = ScoreAll(*engine, sample);
    auto want_sample = ScoreAll(*reference, sample);
    ASSERT_TRUE(got_sample.ok()) << got_sample.status();
    ASSERT_TRUE(want_sample.ok()) << want_sample.status();
    const Agreement a = Compare(*got_sample, *want_sample);
    const double ppl_err = std::abs(a.ppl / a.ref_ppl - 1.0);
    std::cout << "fixture " << name << " bf16: mean |delta| " << mean_abs << " (transformers bf16 "
              << their_mean << "); WikiText PPL off by " << ppl_err << " (mean |delta| there " << a.mean_abs
              << ")\n";
    EXPECT_LE(mean_abs, std::max(0.01, their_mean));
    // Random-weight Gated DeltaNet models: chaotic in bf16 (FixturesMatchReferenceEngine says how much);
    // their WikiText PPL moves 0.6% (measured), the trained qwen35-trained-nvfp4a16's 0.008%.
    const bool random_delta_net = name.rfind("qwen35-", 0) == 0 && name.find("trained") == std::string::npos;
    EXPECT_LE(ppl_err, random_delta_net ? 0.02 : 0.003);
    ++checked;
  }
  EXPECT_GT(checked, 0);
  // Every weight-only fixture has its yardstick: a new one needs scripts/fixtures/transformers_bf16.py
  // re-run.
  for (const auto& entry : std::filesystem::directory_iterator(root)) {
    std::ifstream config_file(entry.path() / "config.json");
    if (!entry.is_directory() || !config_file || CpuOnlyFixture(entry.path().filename().string())) continue;
    // Mixture-of-experts fixtures (whatever their names say: Qwen3-Next's, the DeepSeek-V3 wrappers'): no
    // transformers bf16 yardstick (transformers 5.17 misreads quantized fused experts:
    // tests/fixtures/README.md), so not in the loop above either; FixturesMatchReferenceEngine and
    // TrainedMoeBf16OnRealText bound their bf16 results.
    const nlohmann::json config = nlohmann::json::parse(config_file);
    const nlohmann::json& text = config.contains("text_config") ? config["text_config"] : config;
    bool moe = false;
    for (const char* field : {"num_experts", "n_routed_experts", "num_local_experts"}) {
      moe = moe || text.contains(field) || config.contains(field);
    }
    if (moe) continue;
    // An FP8 KV cache (kv_cache_scheme) quantizes activations too: no bf16 yardstick for it; nor for a
    // transform_config, which transformers 5.17 does not apply at load (its bf16 run would score another
    // model; the fixture's float32 reference re-attaches compressed-tensors' transforms, see its README).
    const nlohmann::json quantization = config.value("quantization_config", nlohmann::json::object());
    bool weight_only = quantization.value("kv_cache_scheme", nlohmann::json()).is_null() &&
                       quantization.value("transform_config", nlohmann::json::object()).empty();
    const nlohmann::json groups = quantization.value("config_groups", nlohmann::json::object());
    for (const auto& [group_name, group] : groups.items()) {
      weight_only = weight_only && group.value("input_activations", nlohmann::json()).is_null();
    }
    // transformers' native FP8 (quant_method fp8) always quantizes activations (activation_scheme dynamic or
    // static).
    weight_only = weight_only && quantization.value("quant_method", "") != "fp8";
    EXPECT_TRUE(!weight_only || yardstick["fixtures"].contains(entry.path().filename().string()))
        << entry.path() << " is weight-only but has no entry in transformers_bf16.json";
  }
}

}  // namespace
}  // namespace scored
