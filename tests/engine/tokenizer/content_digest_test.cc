// TokenizerContentDigest / CompareTokenizerContent: equal for tokenizers that tokenize alike whatever their
// files' bytes, and a named difference otherwise (the `scored --reference_model` tokenizer check).
#include "engine/tokenizer/content_digest.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "engine/tokenizer/tokenizer.h"
#include "gtest/gtest.h"

namespace scored {
namespace {

const std::string kStories = std::string(SCORED_DATA_DIR) + "/stories260K-hf";
const std::string kTokenizers = std::string(SCORED_DATA_DIR) + "/tokenizers";

std::unique_ptr<Tokenizer> LoadOrDie(const std::string& dir) {
  absl::StatusOr<std::unique_ptr<Tokenizer>> t = Tokenizer::Load(dir);
  EXPECT_TRUE(t.ok()) << dir << ": " << t.status();
  return t.ok() ? std::move(*t) : nullptr;
}

// A copy of stories260K-hf's tokenizer files with tokenizer_config.json replaced.
class StoriesCopy {
 public:
  explicit StoriesCopy(const std::string& tag, const std::string& tokenizer_config)
      : dir_(std::filesystem::path(::testing::TempDir()) / (tag + "_" + std::to_string(::getpid()))) {
    std::filesystem::create_directories(dir_);
    for (const char* f : {"tokenizer.model", "special_tokens_map.json"}) {
      std::filesystem::copy_file(kStories + "/" + f, dir_ / f,
                                 std::filesystem::copy_options::overwrite_existing);
    }
    std::ofstream(dir_ / "tokenizer_config.json") << tokenizer_config;
  }
  ~StoriesCopy() { std::filesystem::remove_all(dir_); }
  std::string dir() const { return dir_.string(); }

 private:
  std::filesystem::path dir_;
};

TEST(TokenizerContentTest, RewrittenConfigThatTokenizesAlikeIsTheSame) {
  // What a quantization tool writes: other key order, other whitespace, keys added and dropped.
  StoriesCopy copy("tok_rewritten",
                   R"({"tokenizer_class": "LlamaTokenizer", "unk_token": "<unk>", "eos_token": "</s>",
                      "bos_token": "<s>", "add_bos_token": true, "model_max_length": 1000000000000,
                      "extra_special_tokens": {}, "chat_template": null})");
  std::unique_ptr<Tokenizer> a = LoadOrDie(kStories);
  std::unique_ptr<Tokenizer> b = LoadOrDie(copy.dir());
  ASSERT_TRUE(a && b);
  EXPECT_NE(a->fingerprint(), b->fingerprint());  // the bytes differ ...
  const std::string digest = TokenizerContentDigest(*a);
  EXPECT_EQ(digest.size(), 64u);
  EXPECT_EQ(digest, TokenizerContentDigest(*b));  // ... what tokenizes does not
  EXPECT_TRUE(CompareTokenizerContent(*a, *b).ok()) << CompareTokenizerContent(*a, *b);
}

TEST(TokenizerContentTest, AddBosDefaultDifferenceIsNamed) {
  StoriesCopy copy("tok_nobos", R"({"add_bos_token": false, "bos_token": "<s>", "eos_token": "</s>",
                                    "unk_token": "<unk>", "tokenizer_class": "LlamaTokenizer"})");
  std::unique_ptr<Tokenizer> a = LoadOrDie(kStories);
  std::unique_ptr<Tokenizer> b = LoadOrDie(copy.dir());
  ASSERT_TRUE(a && b);
  EXPECT_NE(TokenizerContentDigest(*a), TokenizerContentDigest(*b));
  const absl::Status s = CompareTokenizerContent(*a, *b);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(s.message(), "add-BOS default true vs false")) << s;
}

TEST(TokenizerContentTest, VocabularySizeDifferenceIsNamed) {
  std::unique_ptr<Tokenizer> a = LoadOrDie(kTokenizers + "/llama2");
  std::unique_ptr<Tokenizer> b = LoadOrDie(kStories);
  ASSERT_TRUE(a && b);
  const absl::Status s = CompareTokenizerContent(*a, *b);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(s.message(), "vocabulary size 32000 vs 512")) << s;
}

// Same size, same BOS/EOS, same kind: Llama-2 and Mistral differ in their pieces.
TEST(TokenizerContentTest, PieceDifferenceIsNamed) {
  std::unique_ptr<Tokenizer> a = LoadOrDie(kTokenizers + "/llama2");
  std::unique_ptr<Tokenizer> b = LoadOrDie(kTokenizers + "/mistral-7b-v0.1");
  ASSERT_TRUE(a && b);
  ASSERT_EQ(a->vocab_size(), b->vocab_size());
  const absl::Status s = CompareTokenizerContent(*a, *b);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(s.message(), "token ")) << s;
  EXPECT_NE(TokenizerContentDigest(*a), TokenizerContentDigest(*b));
}

// A 128k vocabulary (tiktoken) against itself: equal, and cheap enough for start-up.
TEST(TokenizerContentTest, LargeVocabularyAgainstItself) {
  std::unique_ptr<Tokenizer> a = LoadOrDie(kTokenizers + "/llama3");
  std::unique_ptr<Tokenizer> b = LoadOrDie(kTokenizers + "/llama3");
  ASSERT_TRUE(a && b);
  EXPECT_TRUE(CompareTokenizerContent(*a, *b).ok());
  EXPECT_EQ(TokenizerContentDigest(*a), TokenizerContentDigest(*b));
}

}  // namespace
}  // namespace scored
