// TokenizeInPieces against one tokenization of the whole text, with the real tokenizers of the test data
// (SentencePiece with its dummy prefix: stories260K and Mistral; byte-level BPE: GPT-2; tiktoken: Llama 3):
// WikiText-2 test (1.29 MB) in pieces of 96 KiB gives exactly the same ids and byte lengths, and a text
// whose pieces cannot be joined is refused, never joined wrongly.
#include "client/ppl/piecewise_tokenize.h"

#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "engine/tokenizer/tokenizer.h"
#include "gtest/gtest.h"

namespace scored::ppl {
namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class PiecewiseTokenizeTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    auto tok = Tokenizer::Load(std::string(SCORED_DATA_DIR) + "/" + GetParam());
    ASSERT_TRUE(tok.ok()) << tok.status();
    tokenizer_ = *std::move(tok);
  }

  // The piece tokenizer a server's Tokenize(want_byte_lengths) is, counting its calls.
  PieceTokenizer Local() {
    return [this](absl::string_view piece) -> absl::StatusOr<TokenStream> {
      ++calls_;
      TokenStream s;
      absl::StatusOr<std::vector<int32_t>> ids =
          tokenizer_->Encode(std::string_view(piece.data(), piece.size()));
      if (!ids.ok()) return ids.status();
      s.ids = *ids;
      for (const int32_t id : s.ids)
        s.byte_lengths.push_back(static_cast<int32_t>(tokenizer_->TokenByteLength(id)));
      return s;
    };
  }

  std::unique_ptr<Tokenizer> tokenizer_;
  int calls_ = 0;
};

TEST_P(PiecewiseTokenizeTest, WikiTextInPiecesEqualsOneTokenization) {
  const std::string text = ReadFile(std::string(SCORED_DATA_DIR) + "/wikitext-2-raw/wiki.test.raw");
  ASSERT_GT(text.size(), 1000000u);
  absl::StatusOr<TokenStream> whole = Local()(text);
  ASSERT_TRUE(whole.ok()) << whole.status();
  calls_ = 0;
  PieceOptions options;
  options.piece_bytes = 96 << 10;
  options.overlap_bytes = 8 << 10;
  absl::StatusOr<TokenStream> pieces = TokenizeInPieces(text, options, Local());
  ASSERT_TRUE(pieces.ok()) << pieces.status();
  EXPECT_GE(calls_, 14);
  ASSERT_EQ(pieces->ids.size(), whole->ids.size());
  EXPECT_EQ(pieces->ids, whole->ids);
  EXPECT_EQ(pieces->byte_lengths, whole->byte_lengths);
  // A text that fits is one call.
  calls_ = 0;
  absl::StatusOr<TokenStream> small = TokenizeInPieces(text.substr(0, 50000), options, Local());
  ASSERT_TRUE(small.ok());
  EXPECT_EQ(calls_, 1);
}

// An overlap that lies inside one long run of a repeated character: every neighbourhood there recurs, so
// no join is unique and the text is refused, naming --tokenizer DIR, not joined by a guess.
TEST_P(PiecewiseTokenizeTest, UnjoinablePiecesAreRefusedNotGuessed) {
  std::string text =
      ReadFile(std::string(SCORED_DATA_DIR) + "/wikitext-2-raw/wiki.test.raw").substr(0, 60000);
  text.replace(20000, 20000, std::string(20000, 'a'));
  absl::StatusOr<TokenStream> whole = Local()(text);
  ASSERT_TRUE(whole.ok());
  PieceOptions options;
  options.piece_bytes = 32 << 10;
  options.overlap_bytes = 4 << 10;
  absl::StatusOr<TokenStream> pieces = TokenizeInPieces(text, options, Local());
  ASSERT_FALSE(pieces.ok()) << "joined inside a run of one character";
  EXPECT_EQ(pieces.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(pieces.status().message().find("--tokenizer DIR"), std::string::npos) << pieces.status();
  EXPECT_NE(pieces.status().message().find("--max_text_bytes of at least 60000"), std::string::npos)
      << pieces.status();
  // The same run away from the overlaps (bytes [1000, 21000), the first piece's middle) joins exactly.
  text = ReadFile(std::string(SCORED_DATA_DIR) + "/wikitext-2-raw/wiki.test.raw").substr(0, 60000);
  text.replace(1000, 20000, std::string(20000, 'a'));
  whole = Local()(text);
  pieces = TokenizeInPieces(text, options, Local());
  ASSERT_TRUE(pieces.ok()) << pieces.status();
  EXPECT_EQ(pieces->ids, whole->ids);
}

INSTANTIATE_TEST_SUITE_P(Tokenizers, PiecewiseTokenizeTest,
                         ::testing::Values("stories260K-hf", "tokenizers/gpt2", "tokenizers/llama3",
                                           "tokenizers/mistral-7b-v0.1"),
                         [](const ::testing::TestParamInfo<const char*>& p) {
                           std::string name = p.param;
                           for (char& c : name) {
                             if (!isalnum(static_cast<unsigned char>(c))) c = '_';
                           }
                           return name;
                         });

}  // namespace
}  // namespace scored::ppl
