// Every quantized checkpoint of tests/fixtures (made with llm-compressor; see its README) through the CPU
// reference engine against its reference_logprobs.json (transformers + compressed-tensors, float32
// forward, float64 log-softmax).
//
// Tolerances:
//   weight-only formats: 2e-4 absolute per token log-prob and entropy. Both sides compute in fp32 with
//     exactly the same decoded weights; an independent float64 forward lands 1.1e-5..3e-5 from these
//     references (README), and so does this engine (max 3.1e-5 measured), so 2e-4 leaves margin.
//   W8A8 (dynamic FP8 activations) on the random fixture models: every linear input is rounded to FP8,
//     and an input lying within fp32 noise of a rounding midpoint rounds differently in two correct
//     implementations (different fp32/fp64 accumulation orders). These random models amplify one such
//     flip into 0.3-0.7 nats on every later position: measured here, scaling every linear input of this
//     engine by (1 + 3e-7) (~3 ulp) moves its own W8A8 log-probs by mean 0.06 / max 0.61 nats, and the
//     transformers reference differs from this engine by mean 0.09-0.10 / max 0.52-0.71, i.e. at that
//     noise floor. So the W8A8 check is statistical at that floor (mean <= 0.15, max <= 1.0 nats), plus
//     Fp8DynamicAppliesActivationQuantization below, which shows the activation quantization is there
//     (the effect of removing it is 3x larger).
//   W8A8 on the trained stories260K (stories260k-fp8-dynamic): the target of mean <= 2e-3 / max <= 0.05 is
//     not reachable by an fp32 implementation that is not bit-identical to torch's CPU kernels, because this
//     model is chaotic under FP8 activation rounding too (hidden 64: one flipped element is a large share
//     of a row). Measured on the reference side (transformers + compressed-tensors itself): ONE flipped
//     rounding in layer 0-2 at position 100 of tinystories_0 moves the later log-probs by mean 0.02-0.05 /
//     max 0.34-0.43 nats (in layer 4: < 0.001); scaling every Linear input by (1 + 1e-7 .. 1e-6) moves
//     them by mean 0.013-0.053 / max 0.30-0.47; running the same model in float64 by mean 0.014 / max
//     0.30. This engine: mean 0.0123 / max 0.151, the first log-prob off by > 2e-4 at positions 60, 51,
//     none, 52 of the four sequences (printed), i.e. exact until the first flip. Its fake quantization is
//     bit-identical to compressed-tensors' (Fp8ActivationQuantMatchesCompressedTensorsBitwise), so the
//     rest is fp32 accumulation order upstream of the rounding. Bounds: mean <= 0.03, max <= 0.5 (the
//     reference's own spread), plus Stories260kFp8DynamicAppliesActivationQuantization (weight-only is
//     at mean 0.089).
//   W8A8 on the briefly trained Llama (llama-trained-fp8-dynamic): the bound, mean <= 2e-3 and
//     max <= 0.05. Trained weights are not chaotic under FP8 activation rounding: a flipped rounding stays
//     a small, mostly local perturbation instead of spreading to every later position. Measured on the
//     reference itself (scripts/fixtures/act_quant_sensitivity.py: every Linear input scaled by 1 + e,
//     ten values of e from -1e-6 to 1e-6): mean 1.5e-5..4.0e-4, max 0.005..0.031 (the random Llama:
//     mean 0.05-0.15, max 0.49-2.04). This engine: mean 4.2e-5, max 0.0053. The weight-only log-probs of
//     the same weights sit at mean 0.018 / max 0.40 from the W8A8 reference, so the bound does reject an
//     engine that drops the activation quantization (TrainedFp8DynamicBoundRejectsWeightOnly).
//   The same bound on the briefly trained Phi-3 / Gemma 2 / Gemma 3 (make_family_fixtures.py's
//     *-trained-fp8-dynamic; every reference whose base_model ends in "-trained" gets it). The reference's
//     own spread (the same ten e): mean 2.0e-4..3.6e-4 / max 0.023..0.032, 1.3e-4..6.3e-4 / 0.010..0.018,
//     4.9e-7..1.4e-5 / <= 0.002 (their random twins: mean up to 0.012, max up to 0.34..0.43); this engine
//     mean 4.6e-4 / max 0.032, 6.0e-4 / 0.017, 1.3e-6 / 3.0e-4; weight-only at mean 0.042 / 0.017 / 0.028,
//     max 0.46 / 0.24 / 0.31 (TrainedFp8DynamicBoundRejectsWeightOnly).
//   INT8 W8A8 (dynamic per-token int8 activations; the quantizer itself is bit-identical to
//   compressed-tensors'
//     on real inputs, Int8*ActivationQuantMatchesCompressedTensorsBitwise). Measured on the reference itself
//     (act_quant_sensitivity.py, ten values of e from -1e-6 to 1e-6):
//     llama-trained-int8-w8a8 (symmetric): mean 1.4e-4..1.0e-3, max 0.005..0.026; this engine mean 6.3e-4,
//       max 0.020 (first flip at positions 12, 13, 6, 33); the bound, mean <= 2e-3 / max <= 0.05.
//     llama-trained-int8-w8a8-g128-asym: mean 1.4e-6..1.8e-5, max <= 0.0016; this engine mean 2.7e-6, max
//       9.3e-4; the same bound. Both reject weight-only (TrainedInt8W8A8BoundRejectsWeightOnly) and match
//       the reference's wikitext perplexity within 1e-4 (TrainedW8A8PerplexityWithin1e4).
//     stories260k-int8-w8a8: chaotic, like the FP8 one but more so: the reference moves by mean 0.030-0.040 /
//       max 0.26-0.56 under those perturbations, as far as the weight-only reference is from it (mean 0.036 /
//       max 0.33), so this fixture cannot show that activation quantization is applied (the trained Llama
//       and the bitwise quantizer check do). This engine: mean 0.0245 / max 0.21; bound mean <= 0.05 / max
//       <= 0.6, the reference's own spread.
//   Static activation scales (llama-trained-fp8-static, llama-trained-int8-static, -static-asym: the stored
//     per-tensor input_scale / input_zero_point) and int4 weights with dynamic 8-bit activations
//     (llama-trained-w4afp8, -w4a8): the trained Llama's bound as above (reference's own spread under 1-ulp
//     input changes mean <= 1.0e-3, max <= 0.0497), each rejecting weight-only and within 1e-4 of the
//     reference's wikitext perplexity; this engine mean 6.3e-7..5.2e-4, max 4.6e-5..0.0125.
//     stories260k-fp8-static: chaotic like stories260k-fp8-dynamic (own spread up to mean 0.025 / max 0.36),
//     so held to stories260k-int8-w8a8's bound (mean <= 0.05 / max <= 0.6); this engine mean 0.0248 / max
//     0.34, the weight-only reference at mean 0.110 / max 1.34
//     (Stories260kFp8DynamicAppliesActivationQuant...). The quantizers match compressed-tensors bitwise
//     (Static*ActivationQuantMatchesCompressedTensorsBitwise, W4A8ActivationQuant...Bitwise).
//   W4A4 (NVFP4 with FP4 activations): the engine runs the weights only (W4A16, DESIGN.md §6), unlike the
//     reference; it is compared with the reference of its weight-only twin (NvFp4W4A4RunsAsW4A16), or with
//     the weight-only log-probs its reference file carries (FamilyFp8AndNvfp4: Phi-3, Gemma 2, Gemma 3).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "engine/model/safetensors.h"
#include "engine/model/weights.h"
#include "engine/reference/ops.h"
#include "engine/reference/reference_engine.h"
#include "engine/score_contract.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace scored {
namespace {

nlohmann::json ReadJson(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return nlohmann::json::parse(ss.str());
}

// Fixture folders: every folder of SCORED_FIXTURES_DIR holding a reference_logprobs.json.
std::vector<std::string> FixtureNames() {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(SCORED_FIXTURES_DIR, ec)) {
    if (entry.is_directory() && std::filesystem::exists(entry.path() / "reference_logprobs.json")) {
      names.push_back(entry.path().filename().string());
    }
  }
  std::sort(names.begin(), names.end());
  return names;
}

// The input_activations entry of config.json's first config group that has one; null when weight-only.
// The input-activation scheme of config.json as compressed-tensors spells it (null: weight-only);
// transformers' native FP8 (quant_method "fp8", dynamic) is the FP8 per-token-group scheme it describes.
nlohmann::json InputActivations(const nlohmann::json& config) {
  const auto qc = config.find("quantization_config");
  if (qc == config.end()) return nullptr;
  if (qc->value("quant_method", "") == "fp8") {
    return {{"type", "float"},
            {"num_bits", 8},
            {"dynamic", true},
            {"strategy", "group"},
            {"group_size", (*qc)["weight_block_size"][1]}};
  }
  const auto groups = qc->find("config_groups");
  if (groups == qc->end()) return nullptr;
  for (const auto& group : groups->items()) {
    const auto act = group.value().find("input_activations");
    if (act != group.value().end() && !act->is_null()) return *act;
  }
  return nullptr;
}

// Bits of the input-activation quantization of config.json (0: weight-only). 8: W8A8; 4: W4A4.
int ActivationBits(const nlohmann::json& config) {
  const nlohmann::json act = InputActivations(config);
  return act.is_null() ? 0 : act.value("num_bits", 0);
}

struct Deltas {
  double mean = 0.0;
  double max = 0.0;
};

// |our log-prob - reference log-prob| over every token of every sequence of `golden` (same ids).
Deltas Compare(const std::vector<std::vector<float>>& ours, const nlohmann::json& golden) {
  Deltas d;
  int64_t count = 0;
  for (size_t s = 0; s < ours.size(); ++s) {
    const std::vector<double> ref = golden["sequences"][s]["token_logprobs"].get<std::vector<double>>();
    for (size_t j = 0; j < ref.size(); ++j) {
      const double delta = std::fabs(ours[s][j] - ref[j]);
      d.mean += delta;
      d.max = std::max(d.max, delta);
      ++count;
    }
  }
  d.mean /= static_cast<double>(std::max<int64_t>(1, count));
  return d;
}

// A W8A8 fixture's distances: our log-probs to its reference (token_logprobs) and to the weight-only
// reference of the same weights (weight_only_token_logprobs), printed.
struct W8A8Distances {
  Deltas to_w8a8, to_weight_only;
};
W8A8Distances DistancesToBothReferences(const std::string& name,
                                        const std::vector<std::vector<float>>& ours) {
  nlohmann::json golden =
      ReadJson(std::string(SCORED_FIXTURES_DIR) + "/" + name + "/reference_logprobs.json");
  W8A8Distances d;
  d.to_w8a8 = Compare(ours, golden);
  for (nlohmann::json& seq : golden["sequences"]) seq["token_logprobs"] = seq["weight_only_token_logprobs"];
  d.to_weight_only = Compare(ours, golden);
  std::cout << name << ": |delta| to its W8A8 reference mean " << d.to_w8a8.mean << " max " << d.to_w8a8.max
            << ", to the weight-only reference mean " << d.to_weight_only.mean << " max "
            << d.to_weight_only.max << "\n";
  return d;
}

// Our log-probs for every sequence of the fixture `name`; empty if the fixture folder is absent.
// `kv_cache_quant`: EngineOptions::kv_cache_quant (apply a kv_cache_scheme).
std::vector<std::vector<float>> ScoreFixture(const std::string& name, bool kv_cache_quant = true) {
  const std::string dir = std::string(SCORED_FIXTURES_DIR) + "/" + name;
  std::vector<std::vector<float>> out;
  if (!std::filesystem::exists(dir + "/reference_logprobs.json")) return out;
  EngineOptions options;
  options.model_dir = dir;
  options.backend = Backend::kCpu;
  options.kv_cache_quant = kv_cache_quant;
  absl::StatusOr<std::unique_ptr<Engine>> engine = CreateReferenceEngine(options);
  EXPECT_TRUE(engine.ok()) << engine.status();
  if (!engine.ok()) return out;
  const nlohmann::json golden = ReadJson(dir + "/reference_logprobs.json");
  for (const nlohmann::json& seq : golden["sequences"]) {
    ScoreRequest request;
    request.tokens = seq["token_ids"].get<std::vector<int32_t>>();
    absl::StatusOr<std::vector<ScoreResult>> r = ScoreAll(*(*engine), {request});
    EXPECT_TRUE(r.ok()) << r.status();
    out.push_back(r.ok() ? (*r)[0].logprob : std::vector<float>{});
  }
  return out;
}

// 1-based position of the first log-prob more than 2e-4 from the reference; size + 1 if none is.
size_t FirstDivergence(const std::vector<float>& ours, const std::vector<double>& ref) {
  for (size_t j = 0; j < ref.size() && j < ours.size(); ++j) {
    if (std::fabs(ours[j] - ref[j]) > 2e-4) return j + 1;
  }
  return ref.size() + 1;
}

class FixtureTest : public ::testing::TestWithParam<std::string> {};

TEST_P(FixtureTest, LogprobsMatchReference) {
  const std::string dir = std::string(SCORED_FIXTURES_DIR) + "/" + GetParam();
  const nlohmann::json golden = ReadJson(dir + "/reference_logprobs.json");
  const nlohmann::json config = ReadJson(dir + "/config.json");
  const int act_bits = ActivationBits(config);
  const bool w8a8 = act_bits == 8;
  const bool int8_acts = w8a8 && InputActivations(config).value("type", "") == "int";
  const nlohmann::json act = InputActivations(config);
  const bool static_acts = w8a8 && act.contains("dynamic") && act["dynamic"] == false;

  EngineOptions options;
  options.model_dir = dir;
  options.backend = Backend::kCpu;
  options.num_threads = 2;
  absl::StatusOr<std::unique_ptr<Engine>> engine = CreateReferenceEngine(options);
  ASSERT_TRUE(engine.ok()) << engine.status();
  if (act_bits == 4) {
    EXPECT_FALSE((*engine)->info().format_notes.empty()) << "a W4A4 checkpoint run weight-only must say so";
    GTEST_SKIP() << "W4A4: run weight-only by design, compared in NvFp4W4A4RunsAsW4A16 / FamilyFp8AndNvfp4";
  }

  double max_delta = 0.0, sum_delta = 0.0, max_entropy_delta = 0.0;
  int64_t count = 0;
  for (const nlohmann::json& seq : golden["sequences"]) {
    const std::string name = seq["name"].get<std::string>();
    ScoreRequest request;
    request.tokens = seq["token_ids"].get<std::vector<int32_t>>();
    request.want_entropy = true;
    request.top_k = 2;
    const absl::StatusOr<std::vector<ScoreResult>> results = ScoreAll(*(*engine), {request});
    ASSERT_TRUE(results.ok()) << results.status();
    const ScoreResult& r = (*results)[0];
    const std::vector<double> expected = seq["token_logprobs"].get<std::vector<double>>();
    const std::vector<double> entropy = seq["entropy"].get<std::vector<double>>();
    const std::vector<int32_t> argmax = seq["argmax"].get<std::vector<int32_t>>();
    ASSERT_EQ(r.logprob.size(), expected.size()) << name;
    double seq_max_delta = 0.0;
    for (size_t j = 0; j < expected.size(); ++j) {
      const double delta = std::fabs(r.logprob[j] - expected[j]);
      seq_max_delta = std::max(seq_max_delta, delta);
      max_delta = std::max(max_delta, delta);
      sum_delta += delta;
      ++count;
      max_entropy_delta = std::max(max_entropy_delta, std::fabs(r.entropy[j] - entropy[j]));
      if (!w8a8) {
        EXPECT_NEAR(r.logprob[j], expected[j], 2e-4) << name << " position " << j + 1;
        EXPECT_NEAR(r.entropy[j], entropy[j], 2e-4) << name << " position " << j + 1;
        // The argmax agrees unless the top two are within noise of each other.
        if (r.top_k[j][0].logprob - r.top_k[j][1].logprob > 1e-3) {
          EXPECT_EQ(r.top_k[j][0].id, argmax[j]) << name << " position " << j + 1;
        }
      }
    }
    if (!w8a8) {
      EXPECT_NEAR(r.sum_logprob, seq["sum_logprob"].get<double>(), 2e-4 * expected.size()) << name;
    } else {
      std::cout << "  " << name << ": first position off by > 2e-4: " << FirstDivergence(r.logprob, expected)
                << " of " << expected.size() << ", max |delta| " << seq_max_delta << ", mean signed delta "
                << (r.sum_logprob - seq["sum_logprob"].get<double>()) / static_cast<double>(expected.size())
                << "\n";
    }
  }
  const double mean_delta = sum_delta / static_cast<double>(count);
  // Briefly trained bases ("llama-trained", "phi3-trained", "gemma2-trained", "gemma3-trained"): the trained
  // W8A8 bound (header).
  if (w8a8 && absl::EndsWith(golden.value("base_model", ""), "-trained")) {
    EXPECT_LE(mean_delta, 2e-3);
    EXPECT_LE(max_delta, 0.05);
  } else if ((int8_acts || static_acts) && golden["base_model"] == "stories260k") {
    // The reference's own spread under 1-ulp input changes: int8 mean 0.030-0.040 / max 0.26-0.56; static
    // FP8 up to mean 0.025 / max 0.36 (tests/fixtures/README.md).
    EXPECT_LE(mean_delta, 0.05);
    EXPECT_LE(max_delta, 0.6);
  } else if (w8a8 && golden["base_model"] == "stories260k") {
    EXPECT_LE(mean_delta, 0.03);
    EXPECT_LE(max_delta, 0.5);
  } else if (w8a8) {
    EXPECT_LE(mean_delta, 0.15);
    EXPECT_LE(max_delta, 1.0);
  }
  std::cout << GetParam() << " (" << (*engine)->info().format << (w8a8 ? ", W8A8" : "") << "): " << count
            << " tokens, |logprob delta| mean " << mean_delta << " max " << max_delta
            << ", max |entropy delta| " << max_entropy_delta << "\n";
}

INSTANTIATE_TEST_SUITE_P(Fixtures, FixtureTest, ::testing::ValuesIn(FixtureNames()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string name = info.param;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

// llama-fp8-dynamic and llama-fp8-w8a16 hold bit-identical FP8 weights; only the former quantizes
// activations. Our W8A8 log-probs must sit much closer to the W8A8 reference than to the W8A16 one
// (measured: mean 0.10 vs 0.33 nats), i.e. the activation quantization is applied.
TEST(Fixtures, Fp8DynamicAppliesActivationQuantization) {
  const std::vector<std::vector<float>> ours = ScoreFixture("llama-fp8-dynamic");
  const std::string w8a16 = std::string(SCORED_FIXTURES_DIR) + "/llama-fp8-w8a16/reference_logprobs.json";
  if (ours.empty() || !std::filesystem::exists(w8a16)) GTEST_SKIP() << "fixtures absent";
  const Deltas to_w8a8 = Compare(
      ours, ReadJson(std::string(SCORED_FIXTURES_DIR) + "/llama-fp8-dynamic/reference_logprobs.json"));
  const Deltas to_w8a16 = Compare(ours, ReadJson(w8a16));
  std::cout << "llama-fp8-dynamic: mean |delta| to its W8A8 reference " << to_w8a8.mean
            << ", to the W8A16 reference of the same weights " << to_w8a16.mean << "\n";
  EXPECT_LT(2.0 * to_w8a8.mean, to_w8a16.mean);
}

// stories260k-fp8-dynamic's reference file also holds the weight-only log-probs of the same weights. Ours
// must sit much closer to the W8A8 ones (measured: mean 0.012 vs 0.089 nats), i.e. the activation
// quantization is applied; the reference's own spread is a small part of the gap (see the header). The same
// for the static FP8 one (stories260k-fp8-static: its static scale costs more, and its own spread is larger).
TEST(Fixtures, Stories260kFp8DynamicAppliesActivationQuantization) {
  for (const auto& [name, factor] : std::vector<std::pair<std::string, double>>{
           {"stories260k-fp8-dynamic", 4.0}, {"stories260k-fp8-static", 3.0}}) {
    const std::vector<std::vector<float>> ours = ScoreFixture(name);
    if (ours.empty()) GTEST_SKIP() << name << " absent";
    nlohmann::json golden =
        ReadJson(std::string(SCORED_FIXTURES_DIR) + "/" + name + "/reference_logprobs.json");
    const Deltas to_w8a8 = Compare(ours, golden);
    for (nlohmann::json& seq : golden["sequences"]) seq["token_logprobs"] = seq["weight_only_token_logprobs"];
    const Deltas to_weight_only = Compare(ours, golden);
    std::cout << name << ": mean |delta| to its W8A8 reference " << to_w8a8.mean
              << ", to the weight-only reference of the same weights " << to_weight_only.mean << "\n";
    EXPECT_LT(factor * to_w8a8.mean, to_weight_only.mean) << name;
  }
}

// The 2:4 sparse FP8 W8A8 checkpoint (sparse-24-bitmask over FP8 weights, decompressed at load): the
// decompressed weights feed the same activation quantization, so ours sit much closer to the W8A8 reference
// than to the weight-only one of the same weights (measured: mean 0.020 vs 0.194 nats). The int8 one on
// stories260K cannot show it (0.046 vs 0.067: int8 per-token rounding on this model is chaotic, see the
// header); its trained-Llama twin does, in LogprobsMatchReference's trained bound.
TEST(Fixtures, Sparse24W8A8AppliesActivationQuantization) {
  for (const auto& [name, factor] :
       std::vector<std::pair<std::string, double>>{{"stories260k-sparse24-fp8-dynamic", 4.0}}) {
    const std::vector<std::vector<float>> ours = ScoreFixture(name);
    if (ours.empty()) GTEST_SKIP() << name << " absent";
    nlohmann::json golden =
        ReadJson(std::string(SCORED_FIXTURES_DIR) + "/" + name + "/reference_logprobs.json");
    const Deltas to_w8a8 = Compare(ours, golden);
    for (nlohmann::json& seq : golden["sequences"]) seq["token_logprobs"] = seq["weight_only_token_logprobs"];
    const Deltas to_weight_only = Compare(ours, golden);
    std::cout << name << ": mean |delta| to its W8A8 reference " << to_w8a8.mean
              << ", to the weight-only reference of the same weights " << to_weight_only.mean << "\n";
    EXPECT_LT(factor * to_w8a8.mean, to_weight_only.mean) << name;
  }
}

// The Phi-3 / Gemma 2 / Gemma 3 checkpoints in llm-compressor's FP8_DYNAMIC and NVFP4 presets
// (scripts/fixtures/make_family_fixtures.py: the random-weight bases of the family's W4A16 fixtures). Every
// family in both formats is present (a missing folder fails here, not silently).
//   NVFP4 (W4A4) runs weight-only (DESIGN.md section 6): within 2e-4 nats on every token of its reference's
//     weight_only_token_logprobs (the same decoded weights, activation quantization switched off).
//   FP8 dynamic (W8A8): exact up to the first FP8 activation rounding that flips between two correct fp32
//     implementations, chaotic after it on these random weights (the header); LogprobsMatchReference holds
//     them to the random-model W8A8 bound, and here ours must sit much closer to the W8A8 reference than to
//     the weight-only one of the same weights (the activation quantization is applied). Their trained twins
//     (*-trained-fp8-dynamic) are held to the trained bound (TrainedFp8DynamicBoundRejectsWeightOnly).
TEST(Fixtures, FamilyFp8AndNvfp4) {
  for (const char* family : {"phi3", "gemma2", "gemma3"}) {
    const std::string nvfp4 = std::string(family) + "-nvfp4";
    const std::vector<std::vector<float>> w4a4 = ScoreFixture(nvfp4);
    ASSERT_FALSE(w4a4.empty()) << nvfp4 << " absent";
    nlohmann::json golden =
        ReadJson(std::string(SCORED_FIXTURES_DIR) + "/" + nvfp4 + "/reference_logprobs.json");
    for (nlohmann::json& seq : golden["sequences"]) seq["token_logprobs"] = seq["weight_only_token_logprobs"];
    const Deltas d = Compare(w4a4, golden);
    std::cout << nvfp4 << " run weight-only vs its weight-only reference: mean " << d.mean << " max " << d.max
              << "\n";
    EXPECT_LE(d.max, 2e-4) << nvfp4;

    const std::string fp8 = std::string(family) + "-fp8-dynamic";
    const std::vector<std::vector<float>> w8a8 = ScoreFixture(fp8);
    ASSERT_FALSE(w8a8.empty()) << fp8 << " absent";
    golden = ReadJson(std::string(SCORED_FIXTURES_DIR) + "/" + fp8 + "/reference_logprobs.json");
    const Deltas to_w8a8 = Compare(w8a8, golden);
    size_t exact_sequences = 0;
    for (size_t s = 0; s < w8a8.size(); ++s) {
      const std::vector<double> ref = golden["sequences"][s]["token_logprobs"].get<std::vector<double>>();
      if (FirstDivergence(w8a8[s], ref) > ref.size()) ++exact_sequences;
    }
    for (nlohmann::json& seq : golden["sequences"]) seq["token_logprobs"] = seq["weight_only_token_logprobs"];
    const Deltas to_weight_only = Compare(w8a8, golden);
    std::cout << fp8 << ": |delta| to its W8A8 reference mean " << to_w8a8.mean << " max " << to_w8a8.max
              << " (" << exact_sequences << " of " << w8a8.size()
              << " sequences within 2e-4 everywhere), to the weight-only reference mean "
              << to_weight_only.mean << " max " << to_weight_only.max << "\n";
    EXPECT_LT(8.0 * to_w8a8.mean, to_weight_only.mean) << fp8;
    EXPECT_GE(exact_sequences, 1u) << fp8;  // exact where no rounding flips (measured: 3, 3, 1 of 4)
  }
}

// The FP8 W8A8 checkpoints of the briefly trained bases (llama-trained-fp8-dynamic, and the Phi-3 / Gemma 2 /
// Gemma 3 ones of make_family_fixtures.py): their W8A8 bound (mean <= 2e-3, max <= 0.05 in
// LogprobsMatchReference) is a real check, i.e. an engine that ran the checkpoint weight-only would fail it:
// our log-probs must sit within the bound of the W8A8 reference and well outside it from the weight-only
// reference of the same weights. Every folder is present (a missing one fails here, not silently).
TEST(Fixtures, TrainedFp8DynamicBoundRejectsWeightOnly) {
  for (const std::string name : {"llama-trained-fp8-dynamic", "phi3-trained-fp8-dynamic",
                                 "gemma2-trained-fp8-dynamic", "gemma3-trained-fp8-dynamic"}) {
    const std::vector<std::vector<float>> ours = ScoreFixture(name);
    ASSERT_FALSE(ours.empty()) << name << " absent";
    const auto [to_w8a8, to_weight_only] = DistancesToBothReferences(name, ours);
    EXPECT_LE(to_w8a8.mean, 2e-3) << name;
    EXPECT_LE(to_w8a8.max, 0.05) << name;
    EXPECT_GT(to_weight_only.mean, 4.0 * 2e-3) << name;
    EXPECT_GT(to_weight_only.max, 0.05) << name;
  }
}

// The INT8 W8A8 checkpoints of the trained Llama (symmetric, llm-compressor's W8A8; asymmetric group-128
// weights with asymmetric activations): within the bound of LogprobsMatchReference (mean <= 2e-3, max <=
// 0.05) of the W8A8 reference, and the weight-only reference of the same weights is outside it, so the bound
// rejects an engine that drops the int8 activation quantization (measured: weight-only mean 0.0108 / max
// 0.109 and mean 0.0088 / max 0.061).
// The same for static activation scales (llama-trained-fp8-static: llm-compressor's FP8, per-tensor FP8
// input_scale; llama-trained-int8-static(-asym): int8 input_scale, and input_zero_point) and for int4 weights
// with dynamic 8-bit activations (llama-trained-w4afp8 / -w4a8: llm-compressor's W4AFP8 / W4A8). Measured in
// tests/fixtures/README.md ("Static activation scales and W4A8").
TEST(Fixtures, TrainedInt8W8A8BoundRejectsWeightOnly) {
  for (const std::string name :
       {"llama-trained-int8-w8a8", "llama-trained-int8-w8a8-g128-asym", "llama-trained-fp8-static",
        "llama-trained-int8-static", "llama-trained-int8-static-asym", "llama-trained-w4afp8",
        "llama-trained-w4a8"}) {
    const std::vector<std::vector<float>> ours = ScoreFixture(name);
    if (ours.empty()) GTEST_SKIP() << name << " absent";
    const auto [to_w8a8, to_weight_only] = DistancesToBothReferences(name, ours);
    EXPECT_LE(to_w8a8.mean, 2e-3) << name;
    EXPECT_LE(to_w8a8.max, 0.05) << name;
    EXPECT_GT(to_weight_only.mean, 2.0 * 2e-3) << name;
    EXPECT_GT(to_weight_only.max, 0.05) << name;
  }
}

// Perplexity on real text (wikitext_test_0, held out from the training) of every W8A8 checkpoint of the
// trained Llama: within 1e-4 (relative) of the reference's, while the reference's own weight-only perplexity
// of the same weights is not (measured: FP8 3.2e-4, INT8 1.4e-3, INT8 asym 6.9e-4 off), so this rejects an
// engine that runs them weight-only.
TEST(Fixtures, TrainedW8A8PerplexityWithin1e4) {
  for (const std::string name :
       {"llama-trained-fp8-dynamic", "llama-trained-int8-w8a8", "llama-trained-int8-w8a8-g128-asym",
        "llama-trained-fp8-static", "llama-trained-int8-static", "llama-trained-int8-static-asym",
        "llama-trained-w4afp8", "llama-trained-w4a8"}) {
    const std::vector<std::vector<float>> ours = ScoreFixture(name);
    if (ours.empty()) GTEST_SKIP() << name << " absent";
    const nlohmann::json golden =
        ReadJson(std::string(SCORED_FIXTURES_DIR) + "/" + name + "/reference_logprobs.json");
    bool found = false;
    for (size_t s = 0; s < ours.size(); ++s) {
      const nlohmann::json& seq = golden["sequences"][s];
      if (seq["name"] != "wikitext_test_0") continue;
      found = true;
      double sum = 0.0;
      for (const float lp : ours[s]) sum += lp;
      const double n = seq["num_scored"].get<double>();
      // PPL = exp(-sum / n); the relative difference of two is exp(their mean log-prob difference) - 1.
      const double ours_rel = std::expm1((seq["sum_logprob"].get<double>() - sum) / n);
      const double weight_only_rel =
          std::expm1((seq["sum_logprob"].get<double>() - seq["weight_only_sum_logprob"].get<double>()) / n);
      std::cout << name << ": wikitext_test_0 PPL relative to the reference " << ours_rel
                << ", the weight-only reference's " << weight_only_rel << "\n";
      EXPECT_LE(std::fabs(ours_rel), 1e-4) << name;
      EXPECT_GT(std::fabs(weight_only_rel), 1e-4) << name;
    }
    EXPECT_TRUE(found) << name << " has no wikitext_test_0";
  }
}

// The 2:4 sparse INT8 W8A8 checkpoint of the trained Llama (SparseGPT then W8A8, sparse-24-bitmask over the
// int8 weights, decompressed at load; weights bit-exact, fixtures_test): the trained bound of
// LogprobsMatchReference holds (measured: mean 4.9e-4 / max 0.010) and rejects the weight-only reading
// (mean 0.0099 / max 0.071). Real-text perplexity over its 8 WikiText test texts (2040 tokens): -2.3e-5
// (relative) from the reference, within the 1e-4, against 4.7e-4 for the weight-only reading, which
// fails it. (On its first text alone the engine was 1.27e-4 off: per-token int8 rounding flips where fp32
// inputs differ by an ulp, whose sum over one 255-token text happened not to cancel; the quantizer is
// bitwise compressed-tensors', Sparse24Int8ActivationQuantMatchesCompressedTensorsBitwise.)
TEST(Fixtures, TrainedSparse24Int8W8A8BoundAndPerplexity) {
  const std::string name = "llama-trained-sparse24-int8-w8a8";
  const std::vector<std::vector<float>> ours = ScoreFixture(name);
  if (ours.empty()) GTEST_SKIP() << name << " absent";
  nlohmann::json golden =
      ReadJson(std::string(SCORED_FIXTURES_DIR) + "/" + name + "/reference_logprobs.json");
  const Deltas to_w8a8 = Compare(ours, golden);
  // Real text: every wikitext_test_<i> sequence (8 x 255 consecutive tokens), one perplexity over all.
  double ours_sum = 0.0, ref_sum = 0.0, weight_only_sum = 0.0, n = 0.0;
  int texts = 0;
  for (size_t s = 0; s < ours.size(); ++s) {
    const nlohmann::json& seq = golden["sequences"][s];
    if (seq["name"].get<std::string>().rfind("wikitext_test_", 0) != 0) continue;
    ++texts;
    for (const float lp : ours[s]) ours_sum += lp;
    ref_sum += seq["sum_logprob"].get<double>();
    weight_only_sum += seq["weight_only_sum_logprob"].get<double>();
    n += seq["num_scored"].get<double>();
  }
  ASSERT_EQ(texts, 8);
  // PPL = exp(-sum / n); the relative difference of two is exp(their mean log-prob difference) - 1.
  const double ours_rel = std::expm1((ref_sum - ours_sum) / n);
  const double weight_only_rel = std::expm1((ref_sum - weight_only_sum) / n);
  std::cout << name << ": WikiText (" << n << " tokens) PPL relative to the reference " << ours_rel
            << ", the weight-only reference's " << weight_only_rel << "\n";
  EXPECT_LE(std::fabs(ours_rel), 1e-4);
  EXPECT_GT(std::fabs(weight_only_rel), 1e-4);
  for (nlohmann::json& seq : golden["sequences"]) seq["token_logprobs"] = seq["weight_only_token_logprobs"];
  const Deltas to_weight_only = Compare(ours, golden);
  std::cout << name << ": |delta| to its W8A8 reference mean " << to_w8a8.mean << " max " << to_w8a8.max
            << ", to the weight-only reference mean " << to_weight_only.mean << " max " << to_weight_only.max
            << "\n";
  EXPECT_LE(to_w8a8.mean, 2e-3);
  EXPECT_LE(to_w8a8.max, 0.05);
  EXPECT_GT(to_weight_only.mean, 2.0 * 2e-3);
  EXPECT_GT(to_weight_only.max, 0.05);
}

// Checks an activation fake quantizer against compressed-tensors bit for bit: `fixture`'s
// reference_act_quant.safetensors holds real float32 Linear inputs of its reference forward (8 or so
// positions of its real-text sequence, the q/o/gate/down inputs of every layer) and what compressed-tensors'
// forward_quantize made of them. `quantize(module, x, rows, cols)` (module: e.g.
// "model.layers.0.mlp.down_proj") must give exactly the same floats (no tolerance: the same fp32 operations).
template <typename Quantize>
void ExpectActQuantMatchesBitwise(const std::string& fixture, int64_t expected_modules, Quantize quantize) {
  const std::string path =
      std::string(SCORED_FIXTURES_DIR) + "/" + fixture + "/reference_act_quant.safetensors";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "fixture absent";
  absl::StatusOr<std::unique_ptr<SafetensorsFile>> file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  const std::map<std::string, TensorView>& tensors = (*file)->tensors();
  int64_t modules = 0, elements = 0, mismatches = 0;
  for (const auto& [name, input] : tensors) {
    if (!absl::EndsWith(name, ".input")) continue;
    const auto qdq = tensors.find(name + "_qdq");
    ASSERT_NE(qdq, tensors.end()) << name;
    ASSERT_EQ(input.dtype, DType::kF32) << name;
    ASSERT_EQ(qdq->second.dtype, DType::kF32) << name;
    ASSERT_EQ(input.shape.size(), 2u) << name;
    ASSERT_EQ(input.shape, qdq->second.shape) << name;
    const int64_t rows = input.shape[0], cols = input.shape[1];
    std::vector<float> x(static_cast<size_t>(rows * cols));  // [rows, cols]
    std::vector<float> expected(x.size());                   // [rows, cols]
    std::memcpy(x.data(), input.data, x.size() * sizeof(float));
    std::memcpy(expected.data(), qdq->second.data, expected.size() * sizeof(float));
    quantize(name.substr(0, name.size() - std::string(".input").size()), x.data(), rows, cols);
    for (size_t i = 0; i < x.size(); ++i) {
      if (x[i] != expected[i] && ++mismatches <= 5) {
        ADD_FAILURE() << name << " element " << i << ": " << x[i] << " vs " << expected[i];
      }
    }
    ++modules;
    elements += rows * cols;
  }
  EXPECT_EQ(modules, expected_modules);
  EXPECT_EQ(mismatches, 0);
  std::cout << fixture << ": activation quantization vs compressed-tensors: " << modules << " Linear inputs, "
            << elements << " elements, " << mismatches << " differ\n";
}

// Per-token FP8 (stories260k-fp8-dynamic: tinystories_0, 8 positions, 5 layers).
TEST(Fixtures, Fp8ActivationQuantMatchesCompressedTensorsBitwise) {
  ExpectActQuantMatchesBitwise("stories260k-fp8-dynamic", 20,
                               [](const std::string&, float* x, int64_t rows, int64_t cols) {
                                 ref::FakeQuantizeFp8PerToken(x, rows, cols);
                               });
}

// Per-token symmetric int8 (stories260k-int8-w8a8: tinystories_0, 8 positions, 5 layers) and asymmetric int8
// with a zero point per token (llama-trained-int8-w8a8-g128-asym: wikitext_test_0, 6 positions, 2 layers).
TEST(Fixtures, Int8ActivationQuantMatchesCompressedTensorsBitwise) {
  ExpectActQuantMatchesBitwise("stories260k-int8-w8a8", 20,
                               [](const std::string&, float* x, int64_t rows, int64_t cols) {
                                 ref::FakeQuantizeInt8PerToken(x, rows, cols, /*symmetric=*/true);
                               });
}

TEST(Fixtures, Int8AsymActivationQuantMatchesCompressedTensorsBitwise) {
  ExpectActQuantMatchesBitwise("llama-trained-int8-w8a8-g128-asym", 8,
                               [](const std::string&, float* x, int64_t rows, int64_t cols) {
                                 ref::FakeQuantizeInt8PerToken(x, rows, cols, /*symmetric=*/false);
                               });
}

// The same per-token symmetric int8 quantizer on the real inputs of the 2:4 sparse trained Llama
// (llama-trained-sparse24-int8-w8a8: wikitext_test_0, 6 positions, 2 layers).
TEST(Fixtures, Sparse24Int8ActivationQuantMatchesCompressedTensorsBitwise) {
  ExpectActQuantMatchesBitwise("llama-trained-sparse24-int8-w8a8", 8,
                               [](const std::string&, float* x, int64_t rows, int64_t cols) {
                                 ref::FakeQuantizeInt8PerToken(x, rows, cols, /*symmetric=*/true);
                               });
}

// The stored static activation parameters of `module` in `fixture`'s model.safetensors: {input_scale,
// input_zero_point or 0}.
ref::Int8TokenParams StaticInputParams(const std::string& fixture, const std::string& module) {
  ref::Int8TokenParams p;
  absl::StatusOr<std::unique_ptr<SafetensorsFile>> file =
      SafetensorsFile::Open(std::string(SCORED_FIXTURES_DIR) + "/" + fixture + "/model.safetensors");
  EXPECT_TRUE(file.ok()) << file.status();
  if (!file.ok()) return p;
  const std::map<std::string, TensorView>& tensors = (*file)->tensors();
  const auto scale = tensors.find(module + ".input_scale");
  EXPECT_NE(scale, tensors.end()) << module;
  if (scale == tensors.end()) return p;
  EXPECT_TRUE(TensorToFloat(scale->second, &p.scale, 1).ok()) << module;
  if (const auto zp = tensors.find(module + ".input_zero_point"); zp != tensors.end()) {
    EXPECT_EQ(zp->second.dtype, DType::kI8) << module;
    p.zero_point = static_cast<float>(static_cast<int8_t>(zp->second.data[0]));
  }
  return p;
}

// Static per-tensor activation scales, FP8 (llm-compressor's FP8 scheme, stories260K: tinystories_0, 8
// positions, 5 layers; the trained Llama: wikitext_test_0, 6 positions, 2 layers) and int8 (symmetric, and
// with the stored input_zero_point): each Linear input quantized with that module's stored input_scale.
TEST(Fixtures, StaticFp8ActivationQuantMatchesCompressedTensorsBitwise) {
  for (const auto& [fixture, modules] : std::vector<std::pair<std::string, int64_t>>{
           {"stories260k-fp8-static", 20}, {"llama-trained-fp8-static", 8}}) {
    ExpectActQuantMatchesBitwise(fixture, modules,
                                 [&](const std::string& module, float* x, int64_t rows, int64_t cols) {
                                   const float scale = StaticInputParams(fixture, module).scale;
                                   ref::FakeQuantizeFp8Static(x, rows * cols, scale);
                                 });
  }
}

TEST(Fixtures, StaticInt8ActivationQuantMatchesCompressedTensorsBitwise) {
  for (const std::string fixture : {"llama-trained-int8-static", "llama-trained-int8-static-asym"}) {
    int nonzero_zero_points = 0;
    ExpectActQuantMatchesBitwise(fixture, 8,
                                 [&](const std::string& module, float* x, int64_t rows, int64_t cols) {
                                   const ref::Int8TokenParams p = StaticInputParams(fixture, module);
                                   nonzero_zero_points += p.zero_point != 0.0f ? 1 : 0;
                                   ref::FakeQuantizeInt8Span(x, rows * cols, p);
                                 });
    // The asymmetric fixture exercises the zero point (some inputs, e.g. after a norm, calibrate to 0).
    if (fixture == "llama-trained-int8-static-asym") {
      EXPECT_GT(nonzero_zero_points, 0);
    } else {
      EXPECT_EQ(nonzero_zero_points, 0);
    }
  }
}

// W4AFP8 / W4A8: int4 weights with llm-compressor's dynamic per-token FP8 / symmetric int8 activations (the
// same quantizers as W8A8's, on the inputs of an int4 model).
TEST(Fixtures, W4A8ActivationQuantMatchesCompressedTensorsBitwise) {
  ExpectActQuantMatchesBitwise("llama-trained-w4afp8", 8,
                               [](const std::string&, float* x, int64_t rows, int64_t cols) {
                                 ref::FakeQuantizeFp8PerToken(x, rows, cols);
                               });
  ExpectActQuantMatchesBitwise("llama-trained-w4a8", 8,
                               [](const std::string&, float* x, int64_t rows, int64_t cols) {
                                 ref::FakeQuantizeInt8PerToken(x, rows, cols, /*symmetric=*/true);
                               });
}

// llama-trained-modelopt-fp8-kv: ModelOpt's FP8 KV cache (kv_cache_quant_algo FP8, k_proj.k_scale /
// v_proj.v_scale) on the weights and input scales of llama-trained-modelopt-fp8 (the same calibration). With
// --kv_cache_quant=off it must score as that fixture's reference; applied, it must leave it (the K / V
// quantization is real) while FixtureTest holds it to its own kv-on reference.
TEST(Fixtures, ModelOptKvCacheFp8IsAppliedAndIgnorable) {
  const std::string name = "llama-trained-modelopt-fp8-kv";
  const std::vector<std::vector<float>> on = ScoreFixture(name);
  if (on.empty()) GTEST_SKIP() << name << " absent";
  const std::vector<std::vector<float>> off = ScoreFixture(name, /*kv_cache_quant=*/false);
  const nlohmann::json no_kv =
      ReadJson(std::string(SCORED_FIXTURES_DIR) + "/llama-trained-modelopt-fp8/reference_logprobs.json");
  const Deltas off_no_kv = Compare(off, no_kv), on_no_kv = Compare(on, no_kv);
  std::cout << name << ": --kv_cache_quant=off vs the kv-free fixture's reference max " << off_no_kv.max
            << ", applied vs it max " << on_no_kv.max << "\n";
  EXPECT_LE(off_no_kv.max, 2e-4);
  EXPECT_GT(on_no_kv.max, 10 * 2e-4);
}

// llama-nvfp4 (W4A4) is run weight-only; its weights equal llama-nvfp4a16's, so it must reproduce the
// NVFP4A16 reference at the weight-only tolerance (2e-4).
// llama-trained-w4a16-kv-fp8 (W4A16 weights + llm-compressor's FP8 KV cache: static per-tensor k_scale /
// v_scale): by default K (after RoPE) and V are quantize-dequantized as compressed-tensors' QuantizedKVCache
// does, within the weight-only bound (2e-4) of its reference, and the bound is a real check: the same
// checkpoint with --kv_cache_quant=off matches the kv-off reference (weight_only_token_logprobs: the forward
// with quantization switched off, the weights still the decompressed ones) and misses the kv-on one.
TEST(Fixtures, KvCacheFp8AppliedByDefaultAndIgnorable) {
  const std::string name = "llama-trained-w4a16-kv-fp8";
  const std::vector<std::vector<float>> on = ScoreFixture(name);
  if (on.empty()) GTEST_SKIP() << name << " absent";
  const std::vector<std::vector<float>> off = ScoreFixture(name, /*kv_cache_quant=*/false);
  const nlohmann::json kv_on =
      ReadJson(std::string(SCORED_FIXTURES_DIR) + "/" + name + "/reference_logprobs.json");
  nlohmann::json kv_off = kv_on;
  for (nlohmann::json& seq : kv_off["sequences"]) seq["token_logprobs"] = seq["weight_only_token_logprobs"];
  const Deltas on_on = Compare(on, kv_on), on_off = Compare(on, kv_off);
  const Deltas off_off = Compare(off, kv_off), off_on = Compare(off, kv_on);
  std::cout << name << ": kv applied vs its reference mean " << on_on.mean << " max " << on_on.max
            << ", vs the kv-off reference max " << on_off.max
            << "; --kv_cache_quant=off vs kv-off reference max " << off_off.max
            << ", vs the kv-on reference max " << off_on.max << "\n";
  EXPECT_LE(on_on.max, 2e-4);
  EXPECT_LE(off_off.max, 2e-4);
  EXPECT_GT(on_off.max, 10 * 2e-4);
  EXPECT_GT(off_on.max, 10 * 2e-4);

  EngineOptions options;
  options.model_dir = std::string(SCORED_FIXTURES_DIR) + "/" + name;
  options.backend = Backend::kCpu;
  absl::StatusOr<std::unique_ptr<Engine>> engine = CreateReferenceEngine(options);
  ASSERT_TRUE(engine.ok()) << engine.status();
  EXPECT_EQ((*engine)->info().format, "w4a16-g128-sym+kv-fp8");
  options.kv_cache_quant = false;
  engine = CreateReferenceEngine(options);
  ASSERT_TRUE(engine.ok()) << engine.status();
  EXPECT_EQ((*engine)->info().format, "w4a16-g128-sym+kv-fp8-ignored");
}

TEST(Fixtures, NvFp4W4A4RunsAsW4A16) {
  const std::vector<std::vector<float>> ours = ScoreFixture("llama-nvfp4");
  const std::string a16 = std::string(SCORED_FIXTURES_DIR) + "/llama-nvfp4a16/reference_logprobs.json";
  if (ours.empty() || !std::filesystem::exists(a16)) GTEST_SKIP() << "fixtures absent";
  const Deltas d = Compare(ours, ReadJson(a16));
  EXPECT_LE(d.max, 2e-4);
  std::cout << "llama-nvfp4 run weight-only vs the NVFP4A16 reference: mean " << d.mean << " max " << d.max
            << "\n";
}

// NVIDIA ModelOpt FP8 (llama-trained-modelopt-fp8, made by ModelOpt's own quantize + HF export): per-tensor
// FP8 weights and static per-tensor FP8 activations, read as FP8 W8A8 static. The W8A8 bound on every token,
// the perplexity within 1e-4 on wikitext_test_0, and both fail for a weight-only reading of the checkpoint.
TEST(Fixtures, ModelOptFp8BoundAndPerplexityRejectWeightOnly) {
  const std::string name = "llama-trained-modelopt-fp8";
  const std::vector<std::vector<float>> ours = ScoreFixture(name);
  if (ours.empty()) GTEST_SKIP() << name << " absent";
  nlohmann::json golden =
      ReadJson(std::string(SCORED_FIXTURES_DIR) + "/" + name + "/reference_logprobs.json");
  const Deltas to_w8a8 = Compare(ours, golden);
  double ours_rel = 0.0, weight_only_rel = 0.0;
  bool found = false;
  for (size_t s = 0; s < ours.size(); ++s) {
    const nlohmann::json& seq = golden["sequences"][s];
    if (seq["name"] != "wikitext_test_0") continue;
    found = true;
    double sum = 0.0;
    for (const float lp : ours[s]) sum += lp;
    const double n = seq["num_scored"].get<double>();
    ours_rel = std::expm1((seq["sum_logprob"].get<double>() - sum) / n);
    weight_only_rel =
        std::expm1((seq["sum_logprob"].get<double>() - seq["weight_only_sum_logprob"].get<double>()) / n);
  }
  for (nlohmann::json& seq : golden["sequences"]) seq["token_logprobs"] = seq["weight_only_token_logprobs"];
  const Deltas to_weight_only = Compare(ours, golden);
  std::cout << name << ": |delta| to its W8A8 reference mean " << to_w8a8.mean << " max " << to_w8a8.max
            << ", to the weight-only reference mean " << to_weight_only.mean << " max " << to_weight_only.max
            << "; wikitext_test_0 PPL relative " << ours_rel << ", weight-only " << weight_only_rel << "\n";
  ASSERT_TRUE(found);
  EXPECT_LE(to_w8a8.mean, 2e-3);
  EXPECT_LE(to_w8a8.max, 0.05);
  EXPECT_GT(to_weight_only.mean, 2.0 * 2e-3);
  EXPECT_GT(to_weight_only.max, 0.05);
  EXPECT_LE(std::fabs(ours_rel), 1e-4);
  EXPECT_GT(std::fabs(weight_only_rel), 1e-4);
}

// NVIDIA ModelOpt NVFP4 (llama-modelopt-nvfp4, made by ModelOpt): a W4A4 checkpoint, run weight-only (FP4
// activations are not emulated, as for compressed-tensors' W4A4, so the parameterized test skips it); its
// reference is the weight-only forward on ModelOpt's own dequantized weights, held to the weight-only 2e-4.
TEST(Fixtures, ModelOptNvfp4RunsWeightOnlyWithin2e4) {
  const std::string name = "llama-modelopt-nvfp4";
  const std::vector<std::vector<float>> ours = ScoreFixture(name);
  if (ours.empty()) GTEST_SKIP() << name << " absent";
  const nlohmann::json golden =
      ReadJson(std::string(SCORED_FIXTURES_DIR) + "/" + name + "/reference_logprobs.json");
  const Deltas d = Compare(ours, golden);
  std::cout << name << ": |delta| to its weight-only reference mean " << d.mean << " max " << d.max << "\n";
  EXPECT_LE(d.max, 2e-4);
}

TEST(Fixtures, FolderIsPopulated) { EXPECT_GE(FixtureNames().size(), 1u) << SCORED_FIXTURES_DIR; }

}  // namespace
}  // namespace scored
