// Tokenizer::Load on assembled folders: failures (each names the file and the problem, with the
// documented status code), tokenizer_config.json overrides, and a synthetic metaspace vocabulary.
// Folders are written to a fresh temporary directory per test.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>

#include "engine/tokenizer/tokenizer.h"

namespace scored {
namespace {

using ::testing::HasSubstr;

class LoadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = ::testing::TempDir() + "tokenizer_errors_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    for (const char* name : {"tokenizer.json", "tokenizer.model", "vocab.json", "merges.txt",
                             "tokenizer_config.json", "special_tokens_map.json"}) {
      unlink((dir_ + "/" + name).c_str());
    }
    rmdir(dir_.c_str());
  }
  void Write(const std::string& name, const std::string& bytes) {
    std::ofstream(dir_ + "/" + name, std::ios::binary) << bytes;
  }
  void Copy(const std::string& from, const std::string& name) {
    std::ifstream in(from, std::ios::binary);
    Write(name, std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()));
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

TEST_F(LoadTest, MissingFolder) {
  const auto t = Tokenizer::Load(dir_ + "/nope");
  EXPECT_EQ(t.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(t.status().message()), HasSubstr("nope"));
}

TEST_F(LoadTest, EmptyFolder) { ExpectError(absl::StatusCode::kNotFound, dir_, "no tokenizer files"); }

TEST_F(LoadTest, VocabWithoutMerges) {
  Write("vocab.json", "{\"a\": 0}");
  ExpectError(absl::StatusCode::kNotFound, "merges.txt", "file not found");
}

TEST_F(LoadTest, TokenizerJsonNotJson) {
  Write("tokenizer.json", "{\"model\": ");
  ExpectError(absl::StatusCode::kInvalidArgument, "tokenizer.json", "invalid JSON");
}

TEST_F(LoadTest, TokenizerJsonUnigram) {
  Write("tokenizer.json", R"({"model": {"type": "Unigram", "vocab": []}})");
  ExpectError(absl::StatusCode::kUnimplemented, "tokenizer.json", "'Unigram' is not supported");
}

// An unsupported tokenizer.json next to a tokenizer.model: the SentencePiece model is used.
TEST_F(LoadTest, UnsupportedTokenizerJsonFallsBackToTokenizerModel) {
  Write("tokenizer.json", R"({"model": {"type": "Unigram", "vocab": []}})");
  Copy(std::string(SCORED_DATA_DIR) + "/tokenizers/mistral-7b-v0.1/tokenizer.model", "tokenizer.model");
  const auto t = Tokenizer::Load(dir_);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ((*t)->kind(), "sentencepiece");
  // A malformed (not merely unsupported) tokenizer.json is still an error.
  Write("tokenizer.json", "{");
  ExpectError(absl::StatusCode::kInvalidArgument, "tokenizer.json", "invalid JSON");
}

TEST_F(LoadTest, TokenizerJsonUnsupportedPreTokenizer) {
  Write(
      "tokenizer.json",
      R"({"pre_tokenizer": {"type": "UnicodeScripts"}, "model": {"type": "BPE", "vocab": {}, "merges": []}})");
  ExpectError(absl::StatusCode::kUnimplemented, "tokenizer.json", "unsupported pre_tokenizer");
}

// Digits without ByteLevel or a decoder runs through the general pipeline; without a decoder the tokens are
// joined with ' ', as the library does (its ids and text: [4, 2, 3, 0], "ab 1 2 a").
TEST_F(LoadTest, TokenizerJsonWithoutDecoderJoinsWithSpaces) {
  Write("tokenizer.json", R"({"pre_tokenizer": {"type": "Digits", "individual_digits": false},
      "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "1": 2, "2": 3, "ab": 4}, "merges": ["a b"]}})");
  const auto t = Tokenizer::Load(dir_);
  ASSERT_TRUE(t.ok()) << t.status();
  const auto ids = (*t)->Encode("ab12a");
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_EQ(*ids, (std::vector<int32_t>{4, 2, 3, 0}));
  EXPECT_EQ((*t)->Decode(*ids).value(), "ab 1 2 a");
}

TEST_F(LoadTest, TokenizerJsonMergeOutOfVocabulary) {
  Write("tokenizer.json", R"({"normalizer": {"type": "Replace", "pattern": {"String": " "},
      "content": "\u2581"}, "model": {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": ["a b"]}})");
  ExpectError(absl::StatusCode::kInvalidArgument, "tokenizer.json", "'ab' is not in the vocabulary");
}

TEST_F(LoadTest, TokenizerJsonWrongVocabType) {
  Write("tokenizer.json", R"({"model": {"type": "BPE", "vocab": [1, 2], "merges": []}})");
  ExpectError(absl::StatusCode::kInvalidArgument, "tokenizer.json", "model.vocab must be an object");
}

TEST_F(LoadTest, SentencePieceGarbage) {
  Write("tokenizer.model", std::string("\x0a\xff\xff\xff\x01garbage", 12));
  ExpectError(absl::StatusCode::kInvalidArgument, "tokenizer.model", "not a valid SentencePiece model");
}

TEST_F(LoadTest, TiktokenBadLine) {
  Write("tokenizer.model", "IQ== 0\nIg== 1\n!!!! 2\n");
  ExpectError(absl::StatusCode::kInvalidArgument, "tokenizer.model", "line 3");
}

TEST_F(LoadTest, TiktokenMissingBytes) {
  Write("tokenizer.model", "IQ== 0\nIg== 1\n");
  ExpectError(absl::StatusCode::kInvalidArgument, "tokenizer.model", "no token for 254 of the 256 bytes");
}

TEST_F(LoadTest, MergesMalformedLine) {
  Write("vocab.json", "{\"a\": 0}");
  Write("merges.txt", "#version: 0.2\na b c\n");
  ExpectError(absl::StatusCode::kInvalidArgument, "merges.txt", "line 2");
}

TEST_F(LoadTest, ConfigBadJson) {
  Write("tokenizer.model", "garbage that is not tiktoken");
  Write("tokenizer_config.json", "{");
  const auto t = Tokenizer::Load(dir_);
  ASSERT_FALSE(t.ok());
  // The model file is read first; its error is reported.
  EXPECT_THAT(std::string(t.status().message()), HasSubstr("tokenizer.model"));
}

TEST_F(LoadTest, ForcedFormatMissingFile) {
  const auto t = Tokenizer::Load(dir_, Tokenizer::Format::kTiktoken);
  EXPECT_EQ(t.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(t.status().message()), HasSubstr("tokenizer.model"));
}

// tokenizer_config.json overrides the SentencePiece defaults (BOS 1, EOS 2, add BOS).
TEST_F(LoadTest, SentencePieceWithConfigOverrides) {
  Copy(std::string(SCORED_DATA_DIR) + "/tokenizers/mistral-7b-v0.1/tokenizer.model", "tokenizer.model");
  Write("tokenizer_config.json", R"({"add_bos_token": false, "eos_token": "<unk>"})");
  const auto t = Tokenizer::Load(dir_);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ((*t)->bos_id(), 1);
  EXPECT_EQ((*t)->eos_id(), 0);
  EXPECT_FALSE((*t)->add_bos_by_default());
  Write("tokenizer_config.json", R"({"eos_token": {"content": "</nope>"}})");
  ExpectError(absl::StatusCode::kInvalidArgument, dir_, "eos_token '</nope>'");
  Write("tokenizer_config.json", R"({"add_bos_token": "yes"})");
  ExpectError(absl::StatusCode::kInvalidArgument, "tokenizer_config.json", "must be a boolean");
}

// The Llama-3 tiktoken file next to Llama-3.2-Instruct's tokenizer_config.json: the config's added
// tokens (Llama-3.1+ names such as <|finetune_right_pad_id|>) and EOS <|eot_id|> are used; BOS is
// still added by default (the config has no add_bos_token).
TEST_F(LoadTest, TiktokenWithLlama32Config) {
  Copy(std::string(SCORED_DATA_DIR) + "/tokenizers/llama3/tokenizer.model", "tokenizer.model");
  Copy(std::string(SCORED_DATA_DIR) + "/models-configs/llama-3.2-1b-instruct/tokenizer_config.json",
       "tokenizer_config.json");
  Copy(std::string(SCORED_DATA_DIR) + "/models-configs/llama-3.2-1b-instruct/special_tokens_map.json",
       "special_tokens_map.json");
  const auto t = Tokenizer::Load(dir_);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ((*t)->kind(), "tiktoken");
  EXPECT_EQ((*t)->vocab_size(), 128256);
  EXPECT_EQ((*t)->bos_id(), 128000);
  EXPECT_EQ((*t)->eos_id(), 128009);
  EXPECT_TRUE((*t)->add_bos_by_default());
  EXPECT_EQ((*t)->Encode("<|finetune_right_pad_id|>").value(), (std::vector<int32_t>{128004}));
}

// A metaspace vocabulary with a token that has '▁' after another character ("a▁"): merges may
// cross the start of a '▁' run, so the segment must stay one BPE word.
TEST_F(LoadTest, MetaspaceMergeAcrossSpace) {
  Write("tokenizer.json", R"({"normalizer": {"type": "Sequence", "normalizers": [
      {"type": "Prepend", "prepend": "\u2581"},
      {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]},
    "decoder": {"type": "Sequence", "decoders": [
      {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
      {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
    "model": {"type": "BPE", "vocab": {"\u2581": 0, "a": 1, "b": 2, "a\u2581": 3, "a\u2581b": 4},
              "merges": ["a \u2581", "a\u2581 b"]}})");
  const auto t = Tokenizer::Load(dir_);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ((*t)->kind(), "hf-bpe-metaspace");
  const auto ids = (*t)->Encode("a b");
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*ids, (std::vector<int32_t>{0, 4}));
  EXPECT_EQ((*t)->Decode(*ids).value(), "a b");  // the library's text (a Strip alone would leave "▁a▁b")
  // No byte fallback and no unknown token: a character without a token is an error.
  EXPECT_EQ((*t)->Encode("c").status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace scored
