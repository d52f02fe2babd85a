// End to end: `scored --backend=cpu --model <stories260k-w4a16-channel> --reference_model <stories260K-hf>`
// (issue 17). Score with want_reference returns the comparison fields, bitwise the values of the same CPU
// engine run in this process; GetModelInfo describes the reference; a reference whose tokenizer tokenizes
// differently is refused at start naming the difference, while one whose tokenizer_config.json bytes differ
// but tokenizes alike is accepted; without a reference, want_reference is INVALID_ARGUMENT.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/score_contract.h"
#include "gmock/gmock.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "scored/v1/scorer.grpc.pb.h"
#include "tests/server/scored_process.h"

namespace scored {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using testing::ScoredProcess;
using testing::ScoredProcessOptions;

const std::string kQuantDir = std::string(SCORED_FIXTURES_DIR) + "/stories260k-w4a16-channel";

// Real TinyStories ids (the start of the fixtures' first reference sequence).
const std::vector<int32_t> kTokens = {1,   403, 407, 261, 378, 432, 383, 286, 261, 376, 298,
                                      315, 421, 395, 317, 426, 338, 401, 396, 267, 337, 410};

std::unique_ptr<v1::Scorer::Stub> NewStub(const std::string& address) {
  return v1::Scorer::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
}

absl::StatusOr<std::unique_ptr<ScoredProcess>> StartScored(const std::string& reference_dir) {
  ScoredProcessOptions options;
  options.args = {"--model=" + kQuantDir, "--backend=cpu", "--metrics_listen="};
  if (!reference_dir.empty()) options.args.push_back("--reference_model=" + reference_dir);
  return ScoredProcess::Start(options);
}

// A copy of stories260K-hf (weights linked) with tokenizer_config.json replaced.
class BaselineCopy {
 public:
  BaselineCopy(const std::string& tag, const std::string& tokenizer_config)
      : dir_(fs::path(::testing::TempDir()) / (tag + "_" + std::to_string(::getpid()))) {
    const fs::path src = testing::StoriesModelDir();
    fs::create_directories(dir_);
    for (const auto& entry : fs::directory_iterator(src)) {
      const fs::path to = dir_ / entry.path().filename();
      fs::remove(to);
      if (entry.path().filename() == "model.safetensors") {
        fs::create_symlink(entry.path(), to);
      } else {
        fs::copy_file(entry.path(), to);
      }
    }
    std::ofstream(dir_ / "tokenizer_config.json", std::ios::trunc) << tokenizer_config;
  }
  ~BaselineCopy() { fs::remove_all(dir_); }
  std::string dir() const { return dir_.string(); }

 private:
  fs::path dir_;
};

TEST(ReferenceModelE2eTest, ScoreReturnsTheEnginesComparison) {
  absl::StatusOr<std::unique_ptr<ScoredProcess>> proc = StartScored(testing::StoriesModelDir());
  ASSERT_TRUE(proc.ok()) << proc.status();
  EXPECT_THAT((*proc)->ReadLog(), HasSubstr("reference model " + testing::StoriesModelDir()));
  auto stub = NewStub((*proc)->grpc_address());

  v1::ScoreRequest request;
  request.mutable_tokens()->mutable_ids()->Assign(kTokens.begin(), kTokens.end());
  request.set_want_reference(true);
  v1::ScoreResponse response;
  grpc::ClientContext context;
  const grpc::Status status = stub->Score(&context, request, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();

  // The same engine in this process.
  EngineOptions options;
  options.model_dir = kQuantDir;
  options.reference_model_dir = testing::StoriesModelDir();
  options.backend = Backend::kCpu;
  absl::StatusOr<std::unique_ptr<Engine>> engine = CreateEngine(options);
  ASSERT_TRUE(engine.ok()) << engine.status();
  ScoreRequest local;
  local.tokens = kTokens;
  local.want_reference = true;
  absl::StatusOr<std::vector<ScoreResult>> want = ScoreAll(**engine, {local});
  ASSERT_TRUE(want.ok()) << want.status();
  const ScoreResult& w = (*want)[0];

  const int n = static_cast<int>(kTokens.size()) - 1;
  ASSERT_EQ(response.num_scored(), n);
  ASSERT_EQ(response.kld_size(), n);
  ASSERT_EQ(response.ref_logprob_size(), n);
  ASSERT_EQ(response.ref_greedy_size(), n);
  ASSERT_EQ(response.same_top_size(), n);
  int same = 0;
  for (int j = 0; j < n; ++j) {
    EXPECT_EQ(response.kld(j), w.kld[j]) << j;
    EXPECT_EQ(response.ref_logprob(j), w.ref_logprob[j]) << j;
    EXPECT_EQ(response.ref_greedy(j), w.ref_greedy[j] != 0) << j;
    EXPECT_EQ(response.same_top(j), w.same_top[j] != 0) << j;
    EXPECT_EQ(response.logprob(j), w.logprob[j]) << j;
    EXPECT_GE(response.kld(j), 0.0f);
    same += response.same_top(j) ? 1 : 0;
  }
  EXPECT_EQ(response.sum_kld(), w.sum_kld);
  EXPECT_EQ(response.sum_ref_logprob(), w.sum_ref_logprob);
  EXPECT_GT(response.sum_kld(), 0.0);  // a 4-bit quant is not its original
  EXPECT_GT(same, 0);
  EXPECT_NE(response.sum_ref_logprob(), response.sum_logprob());

  // Without want_reference: none of the fields.
  request.set_want_reference(false);
  v1::ScoreResponse plain;
  grpc::ClientContext plain_context;
  ASSERT_TRUE(stub->Score(&plain_context, request, &plain).ok());
  EXPECT_EQ(plain.kld_size(), 0);
  EXPECT_EQ(plain.ref_logprob_size(), 0);
  EXPECT_EQ(plain.sum_kld(), 0.0);

  v1::ModelInfo info;
  grpc::ClientContext info_context;
  ASSERT_TRUE(stub->GetModelInfo(&info_context, v1::GetModelInfoRequest(), &info).ok());
  ASSERT_TRUE(info.has_reference());
  EXPECT_EQ(info.reference().vocab_size(), 512);
  EXPECT_EQ(info.reference().format(), (*engine)->info().reference->format);
  EXPECT_EQ(info.reference().model_fingerprint(), (*engine)->info().reference->model_fingerprint);
  EXPECT_NE(info.reference().model_fingerprint(), info.model_fingerprint());
  EXPECT_EQ(info.reference().bos_id(), info.bos_id());
  EXPECT_FALSE(info.reference().has_reference());
}

TEST(ReferenceModelE2eTest, WantReferenceWithoutReferenceIsInvalidArgument) {
  absl::StatusOr<std::unique_ptr<ScoredProcess>> proc = StartScored("");
  ASSERT_TRUE(proc.ok()) << proc.status();
  auto stub = NewStub((*proc)->grpc_address());
  v1::ScoreRequest request;
  request.mutable_tokens()->mutable_ids()->Assign(kTokens.begin(), kTokens.end());
  request.set_want_reference(true);
  v1::ScoreResponse response;
  grpc::ClientContext context;
  const grpc::Status status = stub->Score(&context, request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("no reference model"));
  EXPECT_THAT(status.error_message(), HasSubstr("--reference_model DIR"));
  v1::ModelInfo info;
  grpc::ClientContext info_context;
  ASSERT_TRUE(stub->GetModelInfo(&info_context, v1::GetModelInfoRequest(), &info).ok());
  EXPECT_FALSE(info.has_reference());
}

// The add-BOS default is part of what tokenizes: a reference that differs there is refused at start.
TEST(ReferenceModelE2eTest, DifferentTokenizerIsRefusedNamingTheDifference) {
  BaselineCopy copy("ref_nobos", R"({"add_bos_token": false, "bos_token": "<s>", "eos_token": "</s>",
                                      "unk_token": "<unk>", "tokenizer_class": "LlamaTokenizer"})");
  absl::StatusOr<std::unique_ptr<ScoredProcess>> proc = StartScored(copy.dir());
  ASSERT_FALSE(proc.ok());
  EXPECT_THAT(std::string(proc.status().message()), HasSubstr("add-BOS default true vs false"));
  EXPECT_THAT(std::string(proc.status().message()), HasSubstr("--reference_model " + copy.dir()));
}

// Config bytes rewritten as quantization tools do (key order, whitespace, keys added), same tokenization.
TEST(ReferenceModelE2eTest, RewrittenTokenizerConfigIsAccepted) {
  BaselineCopy copy("ref_rewritten", R"({"tokenizer_class":"LlamaTokenizer","unk_token":"<unk>",
      "eos_token":"</s>","bos_token":"<s>","add_bos_token":true,"model_max_length":1000000000000,
      "extra_special_tokens":{},"chat_template":null})");
  absl::StatusOr<std::unique_ptr<ScoredProcess>> proc = StartScored(copy.dir());
  ASSERT_TRUE(proc.ok()) << proc.status();
  auto stub = NewStub((*proc)->grpc_address());
  v1::ModelInfo info;
  grpc::ClientContext info_context;
  ASSERT_TRUE(stub->GetModelInfo(&info_context, v1::GetModelInfoRequest(), &info).ok());
  ASSERT_TRUE(info.has_reference());
  // The files' bytes differ (tokenizer fingerprint), what tokenizes does not.
  EXPECT_NE(info.reference().tokenizer_fingerprint(), info.tokenizer_fingerprint());
}

}  // namespace
}  // namespace scored
