// End to end: the whole WikiText-2 test split through stories260K on the CPU reference engine, by the
// protocol of shared/data/stories260K-hf/reference_wikitext2_test_ppl.json: wiki.test.raw as one string,
// SentencePiece ids without BOS (809,284), consecutive chunks of 511 ids, each scored as [BOS] + chunk with
// every chunk token scored. Prints the measured tokens/s.
//
// SCORED_E2E_MAX_WINDOWS=K (a positive integer) scores only the first K windows (the sanitizer stage, where
// the whole file takes > 15 min): every window is still checked against its own float64 golden, and the
// PPL golden becomes exp(-sum of those K golden window sums / their token count), from the same file.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "engine/reference/reference_engine.h"
#include "engine/score_contract.h"
#include "engine/tokenizer/tokenizer.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/e2e_windows.h"

namespace scored {
namespace {

const std::string kModelDir = std::string(SCORED_DATA_DIR) + "/stories260K-hf";

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

using ::scored::testing::MaxWindowsFromEnv;

TEST(WikiText2, Stories260KChunksPplMatchesGolden) {
  const nlohmann::json golden =
      nlohmann::json::parse(ReadFile(kModelDir + "/reference_wikitext2_test_ppl.json"));
  const std::string text = ReadFile(std::string(SCORED_DATA_DIR) + "/wikitext-2-raw/wiki.test.raw");
  ASSERT_FALSE(text.empty());

  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = Tokenizer::Load(kModelDir);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  absl::StatusOr<std::vector<int32_t>> ids = (*tokenizer)->Encode(text);
  ASSERT_TRUE(ids.ok()) << ids.status();
  ASSERT_EQ(static_cast<int64_t>(ids->size()), golden["n_tokens"].get<int64_t>());
  const std::vector<int32_t> first_ids = golden["first_64_token_ids"].get<std::vector<int32_t>>();
  ASSERT_EQ(std::vector<int32_t>(ids->begin(), ids->begin() + 64), first_ids);

  EngineOptions options;
  options.model_dir = kModelDir;
  options.backend = Backend::kCpu;
  absl::StatusOr<std::unique_ptr<Engine>> engine = CreateReferenceEngine(options);
  ASSERT_TRUE(engine.ok()) << engine.status();

  constexpr int64_t kChunk = 511;
  constexpr int64_t kWindowsPerCall = 16;
  const std::vector<double> window_golden = golden["window_sum_logprob"].get<std::vector<double>>();
  const int64_t n = static_cast<int64_t>(ids->size());
  const int64_t all_windows = (n + kChunk - 1) / kChunk;
  ASSERT_EQ(all_windows, static_cast<int64_t>(window_golden.size()));
  const int64_t max_windows = MaxWindowsFromEnv();
  ASSERT_GE(max_windows, 0) << "SCORED_E2E_MAX_WINDOWS must be a positive integer";
  const int64_t num_windows = max_windows > 0 ? std::min(max_windows, all_windows) : all_windows;

  double sum_logprob = 0.0;
  int64_t num_scored = 0;
  double max_window_diff = 0.0;
  const auto start = std::chrono::steady_clock::now();
  for (int64_t w0 = 0; w0 < num_windows; w0 += kWindowsPerCall) {
    std::vector<ScoreRequest> batch;
    for (int64_t w = w0; w < std::min(num_windows, w0 + kWindowsPerCall); ++w) {
      ScoreRequest request;
      request.tokens.push_back(1);  // BOS
      request.tokens.insert(request.tokens.end(), ids->begin() + w * kChunk,
                            ids->begin() + std::min(n, (w + 1) * kChunk));
      batch.push_back(std::move(request));
    }
    absl::StatusOr<std::vector<ScoreResult>> results = ScoreAll(*(*engine), batch);
    ASSERT_TRUE(results.ok()) << results.status();
    for (size_t i = 0; i < results->size(); ++i) {
      const ScoreResult& r = (*results)[i];
      const double expected = window_golden[w0 + i];
      // ~511 tokens each within ~3e-5 of the float64 golden, errors of both signs (max measured 5.7e-4):
      // 2e-3 absolute per window.
      EXPECT_NEAR(r.sum_logprob, expected, 2e-3) << "window " << w0 + i;
      max_window_diff = std::max(max_window_diff, std::fabs(r.sum_logprob - expected));
      sum_logprob += r.sum_logprob;
      num_scored += r.num_scored;
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  const double ppl = std::exp(-sum_logprob / num_scored);
  double golden_ppl = golden["ppl"].get<double>();
  if (num_windows == all_windows) {
    EXPECT_EQ(num_scored, golden["n_scored"].get<int64_t>());
  } else {
    EXPECT_EQ(num_scored, num_windows * kChunk);
    double golden_sum = 0.0;
    for (int64_t w = 0; w < num_windows; ++w) golden_sum += window_golden[w];
    golden_ppl = std::exp(-golden_sum / static_cast<double>(num_windows * kChunk));
  }
  // 1e-5 relative in PPL is 1e-5 in the mean NLL: fp32 rounding averages out far below that (even for one
  // window: 5.7e-4 max per window sum / 511 tokens = 1.1e-6).
  EXPECT_NEAR(ppl, golden_ppl, 1e-5 * golden_ppl);
  std::cout << "WikiText-2 test, stories260K, chunks of 511 + BOS, " << num_windows << " of " << all_windows
            << " windows: PPL " << ppl << " (golden " << golden_ppl << ", relative diff "
            << std::fabs(ppl - golden_ppl) / golden_ppl << "), max |window sum diff| " << max_window_diff
            << ", " << num_scored << " tokens in " << seconds << " s = " << num_scored / seconds
            << " tokens/s on " << (*engine)->info().backend << "\n";
}

}  // namespace
}  // namespace scored
