// The reference engine on the real stories260K checkpoint (HF Llama format, fp32, tied embeddings, GQA
// 8 heads / 4 kv heads) against the float64 goldens of shared/data/stories260K-hf, plus the Score contract:
// validation codes, batch independence, score_from, and the optional outputs.
#include "engine/reference/reference_engine.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "engine/score_contract.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace scored {
namespace {

const std::string kModelDir = std::string(SCORED_DATA_DIR) + "/stories260K-hf";

nlohmann::json ReadJson(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return nlohmann::json::parse(ss.str());
}

std::unique_ptr<Engine> MakeEngine(int num_threads) {
  EngineOptions options;
  options.model_dir = kModelDir;
  options.backend = Backend::kCpu;
  options.num_threads = num_threads;
  absl::StatusOr<std::unique_ptr<Engine>> engine = CreateReferenceEngine(options);
  EXPECT_TRUE(engine.ok()) << engine.status();
  return engine.ok() ? std::move(*engine) : nullptr;
}

class ReferenceEngineTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    engine_ = MakeEngine(2).release();
    goldens_ = new nlohmann::json(ReadJson(kModelDir + "/reference_logprobs.json"));
  }
  static void TearDownTestSuite() {
    delete engine_;
    delete goldens_;
  }
  void SetUp() override { ASSERT_NE(engine_, nullptr); }

  static ScoreResult ScoreOne(const ScoreRequest& request) {
    absl::StatusOr<std::vector<ScoreResult>> r = ScoreAll(*engine_, {request});
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? (*r)[0] : ScoreResult{};
  }

  static Engine* engine_;
  static nlohmann::json* goldens_;
};
Engine* ReferenceEngineTest::engine_ = nullptr;
nlohmann::json* ReferenceEngineTest::goldens_ = nullptr;

TEST_F(ReferenceEngineTest, ModelInfo) {
  const ModelInfo& info = engine_->info();
  EXPECT_EQ(info.architecture, "LlamaForCausalLM");
  EXPECT_EQ(info.backend, "cpu");
  EXPECT_EQ(info.compute_dtype, "fp32");
  EXPECT_EQ(info.tp, 1);
  EXPECT_EQ(info.vocab_size, 512);
  EXPECT_EQ(info.max_seq_len, 512);  // max_position_embeddings
  EXPECT_GT(info.num_parameters, 0);
  EXPECT_GT(info.resident_bytes, 0);
  EXPECT_EQ(info.format.empty(), false);
  EXPECT_EQ(info.model_fingerprint.size(), 64u);  // hex SHA-256 (engine/model/fingerprint.h)
}

// Every token of the 5 TinyStories stories (1,806 scored tokens). The goldens are float64 arithmetic on the
// same fp32 weights; fp32 activations with double reductions stay within ~1e-5 of them (transformers'
// float64 run, which keeps RMSNorm/RoPE tables in fp32, differs by 2e-5): 1e-4 absolute per token.
TEST_F(ReferenceEngineTest, TinyStoriesLogprobsMatchGolden) {
  const nlohmann::json& sample = (*goldens_)["tinystories_sample"];
  double total = 0.0;
  int64_t total_scored = 0;
  double max_diff = 0.0;
  for (const nlohmann::json& story : sample["stories"]) {
    ScoreRequest request;
    request.tokens = story["token_ids"].get<std::vector<int32_t>>();
    const std::vector<double> expected = story["token_logprobs"].get<std::vector<double>>();
    const ScoreResult result = ScoreOne(request);
    ASSERT_EQ(result.num_scored, static_cast<int32_t>(expected.size()));
    ASSERT_EQ(result.logprob.size(), expected.size());
    double sum = 0.0;
    for (size_t j = 0; j < expected.size(); ++j) {
      EXPECT_NEAR(result.logprob[j], expected[j], 1e-4) << "story " << story["story_index"] << " token " << j;
      max_diff = std::max(max_diff, std::fabs(result.logprob[j] - expected[j]));
      sum += expected[j];
    }
    EXPECT_NEAR(result.sum_logprob, story["sum_logprob"].get<double>(), 1e-4 * expected.size());
    total += result.sum_logprob;
    total_scored += result.num_scored;
  }
  EXPECT_EQ(total_scored, sample["total_scored"].get<int64_t>());
  const double ppl = std::exp(-total / total_scored);
  EXPECT_NEAR(ppl, sample["ppl"].get<double>(), 1e-5 * sample["ppl"].get<double>());
  std::cout << "max |logprob - golden| over " << total_scored << " tokens: " << max_diff << ", PPL " << ppl
            << "\n";
}

// 200 greedy steps from [BOS] by repeated Score calls: the next id is the top-1 (argmax, lowest id on ties)
// at a placeholder last position.
TEST_F(ReferenceEngineTest, GreedyContinuationMatchesGolden) {
  const std::vector<int32_t> expected =
      (*goldens_)["greedy_from_bos"]["token_ids"].get<std::vector<int32_t>>();
  ASSERT_EQ(expected.size(), 201u);
  std::vector<int32_t> ids = {1};
  while (ids.size() < expected.size()) {
    ScoreRequest request;
    request.tokens = ids;
    request.tokens.push_back(0);  // placeholder: only the predicted distribution at this position is used
    request.score_from = static_cast<int32_t>(ids.size());
    request.top_k = 1;
    const ScoreResult result = ScoreOne(request);
    ASSERT_EQ(result.top_k.size(), 1u);
    ids.push_back(result.top_k[0][0].id);
  }
  EXPECT_EQ(ids, expected);
  // Scoring the golden continuation in one call: every position is greedy.
  ScoreRequest whole;
  whole.tokens = expected;
  const ScoreResult result = ScoreOne(whole);
  for (size_t j = 0; j < result.greedy.size(); ++j) EXPECT_EQ(result.greedy[j], 1) << j;
}

TEST_F(ReferenceEngineTest, ResultsDoNotDependOnBatchOrThreads) {
  const nlohmann::json& stories = (*goldens_)["tinystories_sample"]["stories"];
  std::vector<ScoreRequest> batch(3);
  batch[0].tokens = stories[0]["token_ids"].get<std::vector<int32_t>>();
  batch[1].tokens = stories[1]["token_ids"].get<std::vector<int32_t>>();
  batch[1].want_entropy = true;
  batch[2].tokens = {1, 403, 407};
  const absl::StatusOr<std::vector<ScoreResult>> together = ScoreAll(*engine_, batch);
  ASSERT_TRUE(together.ok()) << together.status();
  std::unique_ptr<Engine> serial = MakeEngine(1);
  std::unique_ptr<Engine> wide = MakeEngine(3);
  ASSERT_NE(serial, nullptr);
  ASSERT_NE(wide, nullptr);
  for (size_t i = 0; i < batch.size(); ++i) {
    for (Engine* e : {engine_, serial.get(), wide.get()}) {
      const absl::StatusOr<std::vector<ScoreResult>> alone = ScoreAll(*e, {batch[i]});
      ASSERT_TRUE(alone.ok()) << alone.status();
      EXPECT_EQ((*alone)[0].logprob, (*together)[i].logprob) << i;
      EXPECT_EQ((*alone)[0].entropy, (*together)[i].entropy) << i;
      EXPECT_EQ((*alone)[0].sum_logprob, (*together)[i].sum_logprob) << i;
    }
  }
}

TEST_F(ReferenceEngineTest, ScoreFromScoresOnlyTheTail) {
  ScoreRequest full;
  full.tokens = (*goldens_)["tinystories_sample"]["stories"][2]["token_ids"].get<std::vector<int32_t>>();
  const ScoreResult all = ScoreOne(full);
  ScoreRequest tail = full;
  tail.score_from = 100;
  const ScoreResult part = ScoreOne(tail);
  ASSERT_EQ(part.num_scored, static_cast<int32_t>(full.tokens.size()) - 100);
  for (int32_t i = 0; i < part.num_scored; ++i) EXPECT_EQ(part.logprob[i], all.logprob[99 + i]) << i;
  // score_from < 1 acts as 1.
  ScoreRequest zero = full;
  zero.score_from = 0;
  EXPECT_EQ(ScoreOne(zero).logprob, all.logprob);
}

TEST_F(ReferenceEngineTest, OptionalOutputsAreConsistent) {
  ScoreRequest request;
  request.tokens = (*goldens_)["tinystories_sample"]["stories"][3]["token_ids"].get<std::vector<int32_t>>();
  request.want_rank = true;
  request.want_entropy = true;
  request.top_k = 64;
  const ScoreResult r = ScoreOne(request);
  ASSERT_EQ(r.rank.size(), r.logprob.size());
  ASSERT_EQ(r.entropy.size(), r.logprob.size());
  ASSERT_EQ(r.top_k.size(), r.logprob.size());
  for (size_t j = 0; j < r.logprob.size(); ++j) {
    const int32_t target = request.tokens[j + 1];
    EXPECT_GE(r.rank[j], 1);
    EXPECT_EQ(r.rank[j] == 1, r.greedy[j] == 1) << j;  // no exact logit ties in this model's outputs
    EXPECT_GT(r.entropy[j], 0.0f);
    EXPECT_LT(r.entropy[j], std::log(512.0f) + 1e-4f);
    ASSERT_EQ(r.top_k[j].size(), 64u);
    for (size_t i = 1; i < 64; ++i) EXPECT_GE(r.top_k[j][i - 1].logprob, r.top_k[j][i].logprob);
    EXPECT_EQ(r.top_k[j][0].id == target, r.greedy[j] == 1);
    if (r.rank[j] <= 64) {
      EXPECT_EQ(r.top_k[j][r.rank[j] - 1].id, target) << j;
      EXPECT_NEAR(r.top_k[j][r.rank[j] - 1].logprob, r.logprob[j], 1e-6) << j;
    }
  }
}

// The whole vocabulary as top-k (the widest a stored reference keeps here), and Q's gather at those ids:
// each candidate's logprob is bitwise its top-k entry, the top-k's exps sum to 1, the last entry is the min
// logprob, and a candidate equal to the target has the target's logprob.
TEST_F(ReferenceEngineTest, CandidateGatherAndMinLogprob) {
  ScoreRequest request;
  request.tokens = (*goldens_)["tinystories_sample"]["stories"][2]["token_ids"].get<std::vector<int32_t>>();
  request.tokens.resize(std::min<size_t>(request.tokens.size(), 40));
  request.score_from = 5;
  request.top_k = 512;
  const ScoreResult top = ScoreOne(request);
  const int64_t n = top.num_scored;
  ASSERT_EQ(static_cast<int64_t>(top.top_k.size()), n);
  ScoreRequest gather = request;
  gather.top_k = 0;
  gather.want_min_logprob = true;
  gather.num_candidates = 514;  // the 512 top ids reversed, then the target and an id again
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(top.top_k[i].size(), 512u);
    for (int c = 511; c >= 0; --c) gather.candidate_ids.push_back(top.top_k[i][c].id);
    gather.candidate_ids.push_back(request.tokens[request.score_from + i]);
    gather.candidate_ids.push_back(top.top_k[i][0].id);
  }
  const ScoreResult got = ScoreOne(gather);
  ASSERT_EQ(static_cast<int64_t>(got.candidate_logprob.size()), n * 514);
  ASSERT_EQ(static_cast<int64_t>(got.min_logprob.size()), n);
  EXPECT_EQ(got.logprob, top.logprob);  // the gather changes nothing else
  for (int64_t i = 0; i < n; ++i) {
    const float* row = got.candidate_logprob.data() + i * 514;
    double mass = 0.0;
    for (int c = 0; c < 512; ++c) {
      const float want = top.top_k[i][511 - c].logprob;
      ASSERT_EQ(std::memcmp(&row[c], &want, sizeof(float)), 0) << i << " " << c;
      mass += std::exp(static_cast<double>(row[c]));
    }
    EXPECT_NEAR(mass, 1.0, 1e-5) << i;
    EXPECT_EQ(row[0], got.min_logprob[i]) << i;  // the last top-k entry is the least likely id
    EXPECT_EQ(row[512], got.logprob[i]) << i;    // the same rounding of the same double
    EXPECT_EQ(row[513], top.top_k[i][0].logprob) << i;
  }
}

TEST_F(ReferenceEngineTest, InvalidRequestsReturnTheContractCodes) {
  auto code = [](const ScoreRequest& request) { return ScoreAll(*engine_, {request}).status().code(); };
  ScoreRequest ok;
  ok.tokens = {1, 403, 407};
  EXPECT_EQ(code(ok), absl::StatusCode::kOk);

  ScoreRequest one = ok;
  one.tokens = {1};
  EXPECT_EQ(code(one), absl::StatusCode::kInvalidArgument);
  ScoreRequest from = ok;
  from.score_from = 3;
  EXPECT_EQ(code(from), absl::StatusCode::kInvalidArgument);
  ScoreRequest topk = ok;
  topk.top_k = kMaxTopK + 1;
  EXPECT_EQ(code(topk), absl::StatusCode::kInvalidArgument);
  topk.top_k = 513;  // more than the vocabulary
  EXPECT_EQ(code(topk), absl::StatusCode::kInvalidArgument);
  topk.top_k = -1;
  EXPECT_EQ(code(topk), absl::StatusCode::kInvalidArgument);
  ScoreRequest bad_id = ok;
  bad_id.tokens[2] = 512;
  const absl::Status status = ScoreAll(*engine_, {bad_id}).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("position 2"), std::string::npos) << status;
  EXPECT_NE(status.message().find("512"), std::string::npos) << status;
  bad_id.tokens[2] = -1;
  EXPECT_EQ(code(bad_id), absl::StatusCode::kInvalidArgument);
  ScoreRequest too_long;
  too_long.tokens.assign(513, 1);
  const absl::Status long_status = ScoreAll(*engine_, {too_long}).status();
  EXPECT_EQ(long_status.code(), absl::StatusCode::kOutOfRange);
  EXPECT_NE(long_status.message().find("max_seq_len is 512"), std::string::npos) << long_status;
  // One bad request fails alone: the others of its batch are scored, and the engine keeps serving.
  const std::vector<absl::StatusOr<ScoreResult>> mixed = engine_->Score({ok, one, ok});
  ASSERT_EQ(mixed.size(), 3u);
  EXPECT_TRUE(mixed[0].ok()) << mixed[0].status();
  EXPECT_EQ(mixed[1].status().code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(mixed[2].ok()) << mixed[2].status();
  EXPECT_EQ(mixed[2]->logprob, mixed[0]->logprob);
  EXPECT_EQ(ScoreAll(*engine_, {ok, one}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code(ok), absl::StatusCode::kOk);
  // A 512-token sequence (the limit) is fine.
  ScoreRequest longest;
  longest.tokens.assign(512, 1);
  EXPECT_EQ(code(longest), absl::StatusCode::kOk);
}

TEST(ReferenceEngineLoad, MissingModelNamesThePath) {
  EngineOptions options;
  options.model_dir = std::string(SCORED_DATA_DIR) + "/no-such-model";
  const absl::StatusOr<std::unique_ptr<Engine>> engine = CreateReferenceEngine(options);
  ASSERT_FALSE(engine.ok());
  EXPECT_NE(engine.status().message().find("no-such-model"), std::string::npos) << engine.status();
}

TEST(ReferenceEngineLoad, MaxSeqLenOptionOverridesAndBatchLimitApplies) {
  EngineOptions options;
  options.model_dir = kModelDir;
  options.max_seq_len = 64;
  options.max_batch_tokens = 32;
  options.num_threads = 1;
  absl::StatusOr<std::unique_ptr<Engine>> engine = CreateReferenceEngine(options);
  ASSERT_TRUE(engine.ok()) << engine.status();
  EXPECT_EQ((*engine)->info().max_seq_len, 64);
  EXPECT_EQ((*engine)->info().max_batch_tokens, 32);
  ScoreRequest request;
  request.tokens.assign(33, 1);
  const absl::Status status = ScoreAll(*(*engine), {request}).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kOutOfRange);
  EXPECT_NE(status.message().find("max_batch_tokens is 32"), std::string::npos) << status;
  request.tokens.assign(65, 1);
  EXPECT_EQ(ScoreAll(*(*engine), {request}).status().code(), absl::StatusCode::kOutOfRange);
}

// A Mistral config over the same weights with a 100-token sliding window: without sliding-window
// attention the engine caps the context at the window, inside which it equals full causal attention.
TEST(ReferenceEngineLoad, MistralSlidingWindowCapsContext) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("scored_reference_mistral_" + std::to_string(getpid()));
  fs::create_directories(dir);
  fs::copy_file(kModelDir + "/model.safetensors", dir / "model.safetensors",
                fs::copy_options::overwrite_existing);
  nlohmann::json config = ReadJson(kModelDir + "/config.json");
  config["architectures"] = {"MistralForCausalLM"};
  config["model_type"] = "mistral";
  config["sliding_window"] = 100;
  std::ofstream(dir / "config.json") << config.dump(2);

  EngineOptions options;
  options.model_dir = dir.string();
  options.num_threads = 2;
  absl::StatusOr<std::unique_ptr<Engine>> mistral = CreateReferenceEngine(options);
  ASSERT_TRUE(mistral.ok()) << mistral.status();
  EXPECT_EQ((*mistral)->info().architecture, "MistralForCausalLM");
  EXPECT_EQ((*mistral)->info().max_seq_len, 100);
  std::unique_ptr<Engine> llama = MakeEngine(2);
  ASSERT_NE(llama, nullptr);
  ScoreRequest request;
  request.tokens = ReadJson(kModelDir + "/reference_logprobs.json")["greedy_from_bos"]["token_ids"]
                       .get<std::vector<int32_t>>();
  request.tokens.resize(100);
  const absl::StatusOr<std::vector<ScoreResult>> a = ScoreAll(*(*mistral), {request});
  const absl::StatusOr<std::vector<ScoreResult>> b = ScoreAll(*llama, {request});
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ((*a)[0].logprob, (*b)[0].logprob);
  request.tokens.push_back(1);
  EXPECT_EQ(ScoreAll(*(*mistral), {request}).status().code(), absl::StatusCode::kOutOfRange);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace scored
