// Tokenizer::Load failures: each names the file and the problem, with the documented status code.
// Broken folders are written to a fresh temporary directory per test.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "engine/tokenizer/tokenizer.h"

namespace scored {
namespace {

using ::testing::HasSubstr;

class LoadErrorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = ::testing::TempDir() + "/tokenizer_errors_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    for (const char* name : {"tokenizer.json", "tokenizer.model", "vocab.json", "merges.txt",
                             "tokenizer_config.json"}) {
      unlink((dir_ + "/" + name).c_str());
    }
    rmdir(dir_.c_str());
  }
  void Write(const std::string& name, const std::string& bytes) {
    std::ofstream(dir_ + "/" + name, std::ios::binary) << bytes;
  }
  // Expects Load to fail with `code` and a message containing the file name and `problem`.
  void ExpectError(absl::StatusCode code, const std::string& file, const std::string& problem) {
    const auto t = Tokenizer::Load(dir_);
    ASSERT_FALSE(t.ok());
    EXPECT_EQ(t.status().code(), code) << t.status();
    EXPECT_THAT(std::string(t.status().message()), HasSubstr(file));
    EXPECT_THAT(std::string(t.status().message()), HasSubstr(problem));
  }

  std::string dir_;
};

TEST_F(LoadErrorsTest, MissingFolder) {
  const auto t = Tokenizer::Load(dir_ + "/nope");
  EXPECT_EQ(t.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(t.status().message()), HasSubstr("nope"));
}

TEST_F(LoadErrorsTest, EmptyFolder) {
  ExpectError(absl::StatusCode::kNotFound, dir_, "no tokenizer files");
}

TEST_F(LoadErrorsTest, VocabWithoutMerges) {
  Write("vocab.json", "{\"a\": 0}");
  ExpectError(absl::StatusCode::kNotFound, "merges.txt", "file not found");
}

TEST_F(LoadErrorsTest, TokenizerJsonNotJson) {
  Write("tokenizer.json", "{\"model\": ");
  ExpectError(absl::StatusCode::kInvalidArgument, "tokenizer.json", "invalid JSON");
}

TEST_F(LoadErrorsTest, TokenizerJsonUnigram) {
  Write("tokenizer.json", R"({"model": {"type": "Unigram", "vocab": []}})");
  ExpectError(absl::StatusCode::kUnimplemented, "tokenizer.json", "'Unigram' is not supported");
}

TEST_F(LoadErrorsTest, TokenizerJsonUnsupportedPreTokenizer) {
  Write("tokenizer.json",
        R"({"pre_tokenizer": {"type": "Digits"}, "model": {"type": "BPE", "vocab": {}, "merges": []}})");
  ExpectError(absl::StatusCode::kUnimplemented, "tokenizer.json", "unsupported pre_tokenizer");
}

TEST_F(LoadErrorsTest, TokenizerJsonMergeOutOfVocabulary) {
  Write("tokenizer.json", R"({"normalizer": {"type": "Replace", "pattern": {"String": " "},
      "content": "\u2581"}, "model": {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": ["a b"]}})");
  ExpectError(absl::StatusCode::kInvalidArgument, "tokenizer.json", "'ab' is not in the vocabulary");
}

TEST_F(LoadErrorsTest, TokenizerJsonWrongVocabType) {
  Write("tokenizer.json", R"({"model": {"type": "BPE", "vocab": [1, 2], "merges": []}})");
  ExpectError(absl::StatusCode::kInvalidArgument, "tokenizer.json", "model.vocab must be an object");
}

TEST_F(LoadErrorsTest, SentencePieceGarbage) {
  Write("tokenizer.model", std::string("\x0a\xff\xff\xff\x01garbage", 12));
  ExpectError(absl::StatusCode::kInvalidArgument, "tokenizer.model",
              "not a valid SentencePiece model");
}

TEST_F(LoadErrorsTest, TiktokenBadLine) {
  Write("tokenizer.model", "IQ== 0\nIg== 1\n!!!! 2\n");
  ExpectError(absl::StatusCode::kInvalidArgument, "tokenizer.model", "line 3");
}

TEST_F(LoadErrorsTest, TiktokenMissingBytes) {
  Write("tokenizer.model", "IQ== 0\nIg== 1\n");
  ExpectError(absl::StatusCode::kInvalidArgument, "tokenizer.model", "no token for byte 0");
}

TEST_F(LoadErrorsTest, MergesMalformedLine) {
  Write("vocab.json", "{\"a\": 0}");
  Write("merges.txt", "#version: 0.2\na b c\n");
  ExpectError(absl::StatusCode::kInvalidArgument, "merges.txt", "line 2");
}

TEST_F(LoadErrorsTest, ConfigBadJson) {
  Write("tokenizer.model", "garbage that is not tiktoken");
  Write("tokenizer_config.json", "{");
  const auto t = Tokenizer::Load(dir_);
  ASSERT_FALSE(t.ok());
  // The model file is read first; its error is reported.
  EXPECT_THAT(std::string(t.status().message()), HasSubstr("tokenizer.model"));
}

TEST_F(LoadErrorsTest, ForcedFormatMissingFile) {
  const auto t = Tokenizer::Load(dir_, Tokenizer::Format::kTiktoken);
  EXPECT_EQ(t.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(t.status().message()), HasSubstr("tokenizer.model"));
}

// A metaspace vocabulary with a token that has '▁' after another character ("a▁"): merges may
// cross the start of a '▁' run, so the segment must stay one BPE word.
TEST_F(LoadErrorsTest, MetaspaceMergeAcrossSpace) {
  Write("tokenizer.json", R"({"normalizer": {"type": "Sequence", "normalizers": [
      {"type": "Prepend", "prepend": "\u2581"},
      {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]},
    "decoder": {"type": "Strip", "content": " ", "start": 1, "stop": 0},
    "model": {"type": "BPE", "vocab": {"\u2581": 0, "a": 1, "b": 2, "a\u2581": 3, "a\u2581b": 4},
              "merges": ["a \u2581", "a\u2581 b"]}})");
  const auto t = Tokenizer::Load(dir_);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ((*t)->kind(), "hf-bpe-metaspace");
  const auto ids = (*t)->Encode("a b");
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*ids, (std::vector<int32_t>{0, 4}));
  EXPECT_EQ((*t)->Decode(*ids).value(), "a b");
  // No byte fallback and no unknown token: a character without a token is an error.
  EXPECT_EQ((*t)->Encode("c").status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace scored
