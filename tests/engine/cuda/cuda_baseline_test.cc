// `--reference_model` on the CUDA engine (issue 17): R = the dense stories260K, Q = its quantized fixtures,
// against the CPU oracle (engine/reference: fp32 with double reductions) and the float64 golden of
// scripts/fixtures/kld_golden.py, plus the exact properties and the refusals.
//
// Tolerances:
//   - fp32 mode, per token: |kld - CPU kld| <= 1e-4 and |kld - float64 golden| <= 1e-4 (issue 17);
//   ref_logprob
//     within 1e-4 (the fp32 logprob bound of cuda_engine_test); ref_greedy / same_top equal wherever the
//     golden's top-two logit gap exceeds 1e-4 (a nearer tie may resolve either way between fp32 and float64).
//   - bf16 mode: mean KLD within 2% of fp32 mode's on the trained W4A16 fixture over real text (TinyStories
//   and
//     WikiText-2 windows): the quantization error, not bf16 noise, dominates there (issue 17).
//   - self-comparison (Q = R): kld exactly 0 on every token in both modes; ref_logprob within 1e-6 of the
//     model's own logprob (the same logits reduced by two kernels in different orders).
//   - batch composition: Q's results are bitwise the same with and without want_reference in the batch, and a
//     sequence's comparison bitwise the same alone and in a batch.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "engine/cuda/cuda_engine.h"
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
const std::string kFixturesDir = EnvOr("SCORED_FIXTURES_DIR", SCORED_FIXTURES_DIR);
constexpr double kKldAbs = 1e-4;
constexpr double kRefLogprobAbs = 1e-4;
constexpr double kFlagGap = 1e-4;
constexpr double kBf16MeanKldRel = 0.02;

nlohmann::json ReadJson(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

absl::StatusOr<std::unique_ptr<Engine>> MakeEngine(const std::string& model, const std::string& reference,
                                                   Backend backend, ComputeDtype dtype = ComputeDtype::kFp32,
                                                   int64_t max_batch_tokens = 4096) {
  EngineOptions options;
  options.model_dir = model;
  options.reference_model_dir = reference;
  options.backend = backend;
  options.dtype = dtype;
  options.num_threads = 2;
  options.max_batch_tokens = max_batch_tokens;
  return CreateEngine(options);
}

ScoreRequest Request(const std::vector<int32_t>& tokens, bool want_reference = true) {
  ScoreRequest r;
  r.tokens = tokens;
  r.want_reference = want_reference;
  return r;
}

// Real text for the trained stories260K models: the TinyStories sample of reference_logprobs.json and
// windows of BOS + 255 ids of WikiText-2 test through the stories260K tokenizer.
std::vector<ScoreRequest> RealText(int wikitext_windows) {
  std::vector<ScoreRequest> requests;
  const nlohmann::json j = ReadJson(kStoriesDir + "/reference_logprobs.json");
  for (const auto& story : j["tinystories_sample"]["stories"]) {
    requests.push_back(Request(story["token_ids"].get<std::vector<int32_t>>()));
  }
  std::ifstream in(EnvOr("SCORED_DATA_DIR", SCORED_DATA_DIR) + "/wikitext-2-raw/wiki.test.raw");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  text.resize(std::min<size_t>(text.size(), 64 * 1024));
  auto tokenizer = Tokenizer::Load(kStoriesDir);
  EXPECT_TRUE(tokenizer.ok()) << tokenizer.status();
  if (!tokenizer.ok()) return requests;
  auto ids = (*tokenizer)->Encode(text);
  EXPECT_TRUE(ids.ok()) << ids.status();
  constexpr int kWindow = 256;
  for (int w = 0;
       ids.ok() && w < wikitext_windows && static_cast<size_t>((w + 1) * (kWindow - 1)) <= ids->size(); ++w) {
    std::vector<int32_t> tokens = {(*tokenizer)->bos_id()};
    tokens.insert(tokens.end(), ids->begin() + w * (kWindow - 1), ids->begin() + (w + 1) * (kWindow - 1));
    requests.push_back(Request(tokens));
  }
  return requests;
}

double MeanKld(const std::vector<ScoreResult>& results) {
  double sum = 0.0;
  int64_t count = 0;
  for (const ScoreResult& r : results) {
    sum += r.sum_kld;
    count += r.num_scored;
  }
  return sum / static_cast<double>(std::max<int64_t>(count, 1));
}

class CudaBaselineTest : public GpuTest {};

// fp32 mode against the float64 golden and the CPU oracle, on every weight-only fixture of the golden.
TEST_F(CudaBaselineTest, Fp32MatchesTheCpuOracleAndTheFloat64Golden) {
  const nlohmann::json golden = ReadJson(kFixturesDir + "/kld_golden.json");
  for (const std::string name :
       {"stories260k-w4a16-channel", "stories260k-w8a16-channel", "stories260k-nvfp4a16"}) {
    SCOPED_TRACE(name);
    auto gpu = MakeEngine(kFixturesDir + "/" + name, kStoriesDir, Backend::kCuda);
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    auto cpu = MakeEngine(kFixturesDir + "/" + name, kStoriesDir, Backend::kCpu);
    ASSERT_TRUE(cpu.ok()) << cpu.status();
    ASSERT_NE((*gpu)->info().reference, nullptr);
    EXPECT_EQ((*gpu)->info().reference->backend, "cuda");
    EXPECT_EQ((*gpu)->info().reference->format, (*cpu)->info().reference->format);
    EXPECT_GT((*gpu)->info().reference->resident_bytes, 0);
    double worst_cpu = 0.0, worst_golden = 0.0;
    for (size_t s = 0; s < golden["sequences"].size(); ++s) {
      const std::vector<int32_t> tokens = golden["sequences"][s]["token_ids"].get<std::vector<int32_t>>();
      auto got = ScoreAll(**gpu, {Request(tokens)});
      ASSERT_TRUE(got.ok()) << got.status();
      auto want = ScoreAll(**cpu, {Request(tokens)});
      ASSERT_TRUE(want.ok()) << want.status();
      const ScoreResult& g = (*got)[0];
      const ScoreResult& c = (*want)[0];
      const nlohmann::json& e = golden["models"][name][s];
      ASSERT_EQ(g.kld.size(), e["kld"].size());
      ASSERT_EQ(g.kld.size(), c.kld.size());
      for (size_t j = 0; j < g.kld.size(); ++j) {
        worst_cpu = std::max(worst_cpu, std::abs(static_cast<double>(g.kld[j]) - c.kld[j]));
        worst_golden = std::max(worst_golden, std::abs(g.kld[j] - e["kld"][j].get<double>()));
        EXPECT_NEAR(g.kld[j], c.kld[j], kKldAbs) << "sequence " << s << " position " << j + 1;
        EXPECT_NEAR(g.kld[j], e["kld"][j].get<double>(), kKldAbs)
            << "sequence " << s << " position " << j + 1;
        EXPECT_NEAR(g.ref_logprob[j], e["ref_logprob"][j].get<double>(), kRefLogprobAbs) << s << " " << j;
        EXPECT_GE(g.kld[j], 0.0f);
        if (e["top_gap"][j].get<double>() > kFlagGap) {
          EXPECT_EQ(g.ref_greedy[j] != 0, e["ref_greedy"][j].get<bool>()) << s << " " << j;
          EXPECT_EQ(g.same_top[j] != 0, e["same_top"][j].get<bool>()) << s << " " << j;
        }
      }
      EXPECT_NEAR(g.sum_kld, c.sum_kld, kKldAbs * g.num_scored);
    }
    std::cout << name << " fp32: max |kld - CPU| " << worst_cpu << ", max |kld - float64 golden| "
              << worst_golden << "\n";
  }
}

// KL of a model against itself is exactly 0 on every token, in both modes.
TEST_F(CudaBaselineTest, SelfKldIsExactlyZero) {
  const std::vector<ScoreRequest> requests = RealText(4);
  for (const ComputeDtype dtype : {ComputeDtype::kFp32, ComputeDtype::kBf16}) {
    auto engine = MakeEngine(kStoriesDir, kStoriesDir, Backend::kCuda, dtype);
    ASSERT_TRUE(engine.ok()) << engine.status();
    auto got = ScoreAll(**engine, requests);
    ASSERT_TRUE(got.ok()) << got.status();
    for (const ScoreResult& r : *got) {
      ASSERT_EQ(r.kld.size(), static_cast<size_t>(r.num_scored));
      for (int32_t j = 0; j < r.num_scored; ++j) {
        EXPECT_EQ(r.kld[j], 0.0f) << j;
        EXPECT_EQ(r.same_top[j], 1) << j;
        EXPECT_EQ(r.ref_greedy[j], r.greedy[j]) << j;
        EXPECT_NEAR(r.ref_logprob[j], r.logprob[j], 1e-6) << j;
      }
      EXPECT_EQ(r.sum_kld, 0.0);
    }
  }
}

// A mixture-of-experts reference model (its sparse layers in the reference pass, the activations sized for
// both models): KL of the Qwen2-MoE fixture (shared expert) against itself is exactly 0 in both modes, and
// the W4A16 Qwen3-MoE fixture against its bf16 original matches the CPU oracle's KL in fp32 mode (mean within
// 5%: on random weights a router near-tie that fp32 rounding flips moves single tokens, the mean stays).
TEST_F(CudaBaselineTest, MixtureOfExpertsReferenceModel) {
  std::mt19937 rng(23);
  std::vector<ScoreRequest> requests;
  for (int s = 0; s < 4; ++s) {
    std::vector<int32_t> tokens(48 + 32 * s);
    for (int32_t& t : tokens) t = static_cast<int32_t>(rng() % 256);
    requests.push_back(Request(tokens));
  }
  const std::string self = kFixturesDir + "/qwen2-moe-w4a16-g32";
  for (const ComputeDtype dtype : {ComputeDtype::kFp32, ComputeDtype::kBf16}) {
    auto engine = MakeEngine(self, self, Backend::kCuda, dtype);
    ASSERT_TRUE(engine.ok()) << engine.status();
    auto got = ScoreAll(**engine, requests);
    ASSERT_TRUE(got.ok()) << got.status();
    for (const ScoreResult& r : *got) EXPECT_EQ(r.sum_kld, 0.0);
  }
  const std::string q = kFixturesDir + "/qwen3-moe-w4a16-g32", ref = kFixturesDir + "/qwen3-moe-bf16";
  auto gpu = MakeEngine(q, ref, Backend::kCuda);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  auto cpu = MakeEngine(q, ref, Backend::kCpu);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  auto got = ScoreAll(**gpu, requests);
  ASSERT_TRUE(got.ok()) << got.status();
  auto want = ScoreAll(**cpu, requests);
  ASSERT_TRUE(want.ok()) << want.status();
  const double g = MeanKld(*got), c = MeanKld(*want);
  std::cout << "qwen3-moe-w4a16-g32 vs qwen3-moe-bf16 mean KLD: GPU fp32 " << g << ", CPU " << c << "\n";
  EXPECT_GT(c, 1e-4);  // a real quantization error to compare
  EXPECT_NEAR(g, c, 0.05 * c);
}

// bf16 mode's mean KLD on the trained W4A16 fixture over real text is fp32 mode's to 2%.
TEST_F(CudaBaselineTest, Bf16MeanKldWithinTwoPercentOfFp32) {
  const std::vector<ScoreRequest> requests = RealText(16);
  const std::string q = kFixturesDir + "/stories260k-w4a16-channel";
  double mean[2] = {0.0, 0.0};
  int i = 0;
  for (const ComputeDtype dtype : {ComputeDtype::kFp32, ComputeDtype::kBf16}) {
    auto engine = MakeEngine(q, kStoriesDir, Backend::kCuda, dtype);
    ASSERT_TRUE(engine.ok()) << engine.status();
    auto got = ScoreAll(**engine, requests);
    ASSERT_TRUE(got.ok()) << got.status();
    mean[i++] = MeanKld(*got);
  }
  std::cout << "stories260k-w4a16-channel mean KLD over " << requests.size() << " sequences: fp32 " << mean[0]
            << ", bf16 " << mean[1] << " (rel " << mean[1] / mean[0] - 1 << ")\n";
  EXPECT_GT(mean[0], 1e-3);  // a real quantization error to compare
  EXPECT_NEAR(mean[1], mean[0], kBf16MeanKldRel * mean[0]);
}

// Q's own results do not change when the batch asks for the comparison; a comparison does not depend on the
// batch around it (bitwise), and a request without want_reference gets no reference fields.
TEST_F(CudaBaselineTest, BatchInvariant) {
  for (const ComputeDtype dtype : {ComputeDtype::kFp32, ComputeDtype::kBf16}) {
    auto engine = MakeEngine(kFixturesDir + "/stories260k-w4a16-channel", kStoriesDir, Backend::kCuda, dtype);
    ASSERT_TRUE(engine.ok()) << engine.status();
    const std::vector<ScoreRequest> text = RealText(2);
    ASSERT_GE(text.size(), 3u);
    const ScoreRequest a = text[0], b = text[1];
    const ScoreRequest plain = Request(b.tokens, false);
    auto alone = ScoreAll(**engine, {a});
    auto plain_alone = ScoreAll(**engine, {plain});
    auto batch = ScoreAll(**engine, {plain, a, b, text.back()});
    ASSERT_TRUE(alone.ok() && plain_alone.ok() && batch.ok());
    const ScoreResult& x = (*alone)[0];
    const ScoreResult& y = (*batch)[1];
    EXPECT_TRUE((*batch)[0].kld.empty());
    EXPECT_TRUE((*batch)[0].ref_logprob.empty());
    EXPECT_EQ(std::memcmp(x.kld.data(), y.kld.data(), x.kld.size() * sizeof(float)), 0);
    EXPECT_EQ(std::memcmp(x.ref_logprob.data(), y.ref_logprob.data(), x.ref_logprob.size() * sizeof(float)),
              0);
    EXPECT_EQ(x.same_top, y.same_top);
    EXPECT_EQ(x.ref_greedy, y.ref_greedy);
    EXPECT_EQ(std::memcmp(&x.sum_kld, &y.sum_kld, sizeof(double)), 0);
    // The model's own logprobs: a batch with the comparison vs one without.
    const ScoreResult& p = (*plain_alone)[0];
    const ScoreResult& q = (*batch)[0];
    ASSERT_EQ(p.num_scored, q.num_scored);
    EXPECT_EQ(std::memcmp(p.logprob.data(), q.logprob.data(), p.logprob.size() * sizeof(float)), 0);
    EXPECT_EQ(p.greedy, q.greedy);
  }
}

TEST_F(CudaBaselineTest, DifferentVocabularyIsRefusedNamingBothSizes) {
  const std::filesystem::path dir =
      std::filesystem::path(::testing::TempDir()) / ("cuda_kld_vocab_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  nlohmann::json config = ReadJson(kStoriesDir + "/config.json");
  config["vocab_size"] = 1024;
  std::ofstream(dir / "config.json") << config.dump();
  auto engine = MakeEngine(kStoriesDir, dir.string(), Backend::kCuda);
  ASSERT_FALSE(engine.ok());
  EXPECT_EQ(engine.status().code(), absl::StatusCode::kInvalidArgument) << engine.status();
  EXPECT_TRUE(absl::StrContains(engine.status().message(), "512")) << engine.status();
  EXPECT_TRUE(absl::StrContains(engine.status().message(), "1024")) << engine.status();
  std::filesystem::remove_all(dir);
}

// Both models and their activations must fit before the reference is uploaded; the error names both models'
// weights and what would fit.
TEST_F(CudaBaselineTest, ReferenceThatDoesNotFitIsRefusedNamingBoth) {
  auto engine = MakeEngine(kFixturesDir + "/stories260k-w4a16-channel", kStoriesDir, Backend::kCuda,
                           ComputeDtype::kBf16, int64_t{1} << 36);
  ASSERT_FALSE(engine.ok());
  EXPECT_EQ(engine.status().code(), absl::StatusCode::kResourceExhausted) << engine.status();
  EXPECT_TRUE(absl::StrContains(engine.status().message(), "--reference_model")) << engine.status();
  EXPECT_TRUE(absl::StrContains(engine.status().message(), "reference model's")) << engine.status();
  EXPECT_TRUE(absl::StrContains(engine.status().message(), "max_batch_tokens")) << engine.status();
}

TEST_F(CudaBaselineTest, WantReferenceWithoutReferenceIsInvalidArgument) {
  auto engine = MakeEngine(kStoriesDir, "", Backend::kCuda);
  ASSERT_TRUE(engine.ok()) << engine.status();
  auto got = (*engine)->Score({Request({1, 400, 401, 402})});
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(got[0].status().message(), "--reference_model")) << got[0].status();
}

}  // namespace
}  // namespace scored
