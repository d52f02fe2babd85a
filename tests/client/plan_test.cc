// Plans of scored-ppl built with the real stories260K tokenizer (tokenizer.model): the token ids and
// window counts every golden of ../shared/data/stories260K-hf depends on, checked without a server.
#include "client/ppl/plan.h"

#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "client/ppl/dataset.h"
#include "client/ppl/windows.h"
#include "engine/tokenizer/tokenizer.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace scored {
namespace ppl {
namespace {

std::string DataDir() { return SCORED_DATA_DIR; }

nlohmann::json ReadJson(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream buf;
  buf << in.rdbuf();
  return nlohmann::json::parse(buf.str());
}

class PlanGoldenTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto tok = Tokenizer::Load(DataDir() + "/stories260K-hf");
    ASSERT_TRUE(tok.ok()) << tok.status();
    tokenizer_ = std::shared_ptr<const Tokenizer>(std::move(*tok));
    special_ = {tokenizer_->bos_id(), tokenizer_->eos_id(), tokenizer_->add_bos_by_default()};
    const Tokenizer* t = tokenizer_.get();
    tokenize_ = [t](const std::string& text) -> absl::StatusOr<TokenStream> {
      TokenStream s;
      auto ids = t->Encode(text);
      if (!ids.ok()) return ids.status();
      s.ids = *std::move(ids);
      for (int32_t id : s.ids) s.byte_lengths.push_back(static_cast<int32_t>(t->TokenByteLength(id)));
      return s;
    };
  }

  std::shared_ptr<const Tokenizer> tokenizer_;
  SpecialTokens special_;
  TokenizeFn tokenize_;
};

TEST_F(PlanGoldenTest, SpecialTokens) {
  EXPECT_EQ(special_.bos_id, 1);
  EXPECT_EQ(special_.eos_id, 2);
  EXPECT_TRUE(special_.add_bos_by_default);
}

// rolling over the TinyStories sample: one window per story, ids = the golden [1] + encode(story).
TEST_F(PlanGoldenTest, TinyStoriesRollingIds) {
  const nlohmann::json golden = ReadJson(DataDir() + "/stories260K-hf/reference_logprobs.json");
  const nlohmann::json& stories = golden["tinystories_sample"]["stories"];
  auto ds = LoadDataset(DataDir() + "/tinystories-sample/tinystories_sample.txt", Format::kText,
                        "<|endoftext|>", "text");
  ASSERT_TRUE(ds.ok()) << ds.status();
  MethodParams params;
  params.method = Method::kRolling;
  params.ctx = 2048;
  auto plan = BuildPlan(*ds, params, special_, tokenize_);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->windows.size(), stories.size());
  int64_t scored = 0;
  for (size_t i = 0; i < stories.size(); ++i) {
    EXPECT_EQ(plan->windows[i].tokens, stories[i]["token_ids"].get<std::vector<int32_t>>()) << i;
    EXPECT_EQ(plan->windows[i].score_from, 1);
    scored += plan->windows[i].num_scored();
  }
  EXPECT_EQ(scored, golden["tinystories_sample"]["total_scored"].get<int64_t>());
}

// chunks ctx 512 over the whole wiki.test.raw: 809,284 tokens, 1,584 windows, the golden first ids.
TEST_F(PlanGoldenTest, WikiTextChunks) {
  const nlohmann::json golden = ReadJson(DataDir() + "/stories260K-hf/reference_wikitext2_test_ppl.json");
  auto ds = LoadDataset(DataDir() + "/wikitext-2-raw/wiki.test.raw", Format::kWikiText, "", "text");
  ASSERT_TRUE(ds.ok()) << ds.status();
  MethodParams params;
  params.method = Method::kChunks;
  params.ctx = 512;
  auto plan = BuildPlan(*ds, params, special_, tokenize_);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->num_input_tokens, golden["n_tokens"].get<int64_t>());
  EXPECT_EQ(static_cast<int64_t>(plan->windows.size()), golden["n_windows"].get<int64_t>());
  int64_t scored = 0;
  for (const Window& w : plan->windows) scored += w.num_scored();
  EXPECT_EQ(scored, golden["n_scored"].get<int64_t>());
  const auto first = golden["first_64_token_ids"].get<std::vector<int32_t>>();
  ASSERT_GE(plan->windows[0].tokens.size(), first.size() + 1);
  EXPECT_EQ(plan->windows[0].tokens[0], 1);
  EXPECT_EQ(std::vector<int32_t>(plan->windows[0].tokens.begin() + 1,
                                 plan->windows[0].tokens.begin() + 1 + static_cast<int64_t>(first.size())),
            first);
}

// num_windows and num_scored of every method in reference_methods.json.
TEST_F(PlanGoldenTest, ReferenceMethodCounts) {
  const nlohmann::json golden = ReadJson(DataDir() + "/stories260K-hf/reference_methods.json");
  auto ds = LoadDataset(DataDir() + "/wikitext-2-raw/wiki.test.raw", Format::kWikiText, "", "text");
  ASSERT_TRUE(ds.ok()) << ds.status();
  int checked = 0;
  for (const nlohmann::json& result : golden["results"]) {
    if (!result.contains("num_windows")) continue;
    const std::string name = result["method"].get<std::string>();
    SCOPED_TRACE(name);
    auto method = ParseMethod(name);
    ASSERT_TRUE(method.ok());
    MethodParams params;
    params.method = *method;
    params.ctx = result["params"]["ctx"].get<int64_t>();
    params.stride = result["params"].value("stride", int64_t{0});
    params.max_windows = result["params"].value("max_windows", int64_t{0});
    auto plan = BuildPlan(*ds, params, special_, tokenize_);
    ASSERT_TRUE(plan.ok()) << plan.status();
    int64_t scored = 0;
    for (const Window& w : plan->windows) scored += w.num_scored();
    EXPECT_EQ(static_cast<int64_t>(plan->windows.size()), result["num_windows"].get<int64_t>());
    EXPECT_EQ(scored, result["num_scored"].get<int64_t>());
    ++checked;
  }
  EXPECT_EQ(checked, 5);
}

}  // namespace
}  // namespace ppl
}  // namespace scored
