// The native SentencePiece tokenizer against libsentencepiece (the test oracle, linked into this
// binary only): identical ids on the whole of WikiText-2 test and on every golden case, edge cases
// and pseudo-random texts, for the three shared `.model` files; identical decode; and malformed
// or unsupported model files rejected with a status.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "engine/tokenizer/sentencepiece_bpe.h"
#include "engine/tokenizer/sentencepiece_proto.h"
#include "engine/tokenizer/tokenizer.h"
#include "tests/engine/tokenizer/sentencepiece_oracle.h"

namespace scored {
namespace {

using tokenizer_internal::SentencePieceWrapper;
using Format = Tokenizer::Format;

const std::string kData = SCORED_DATA_DIR;

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

struct ModelCase {
  const char* name;
  const char* dir;  // under SCORED_DATA_DIR, holding tokenizer.model
};

// tok512.model is byte-identical in stories260K-hf (stories260K-hf/SOURCE.md).
const ModelCase kModels[] = {
    {"tok512", "stories260K-hf"},
    {"llama2", "tokenizers/llama2"},
    {"mistral", "tokenizers/mistral-7b-v0.1"},
};

class NativeVsLibraryTest : public ::testing::TestWithParam<ModelCase> {
 protected:
  void SetUp() override {
    const std::string dir = kData + "/" + GetParam().dir;
    auto t = Tokenizer::Load(dir, Format::kSentencePiece);
    ASSERT_TRUE(t.ok()) << t.status();
    native_ = std::move(t).value();
    oracle_ = std::make_unique<SentencePieceWrapper>();
    ASSERT_EQ(oracle_->LoadFromSerializedProto(ReadAll(dir + "/tokenizer.model")), "");
  }

  std::vector<int32_t> LibraryEncode(const std::string& text) const {
    std::vector<int> ids;
    EXPECT_EQ(oracle_->Encode(text, &ids), "");
    return std::vector<int32_t>(ids.begin(), ids.end());
  }
  std::string LibraryDecode(const std::vector<int32_t>& ids) const {
    std::string text;
    EXPECT_EQ(oracle_->Decode(std::vector<int>(ids.begin(), ids.end()), &text), "");
    return text;
  }
  // Encode ids and decoded text both equal the library's.
  void ExpectSame(const std::string& text, const std::string& what) const {
    const auto ids = native_->Encode(text);
    ASSERT_TRUE(ids.ok()) << ids.status();
    const std::vector<int32_t> expected = LibraryEncode(text);
    EXPECT_EQ(*ids, expected) << GetParam().name << " " << what << ": " << text.substr(0, 80);
    const auto decoded = native_->Decode(*ids);
    ASSERT_TRUE(decoded.ok()) << decoded.status();
    EXPECT_EQ(*decoded, LibraryDecode(expected)) << GetParam().name << " " << what;
  }

  std::unique_ptr<Tokenizer> native_;
  std::unique_ptr<SentencePieceWrapper> oracle_;
};

TEST_P(NativeVsLibraryTest, VocabularyAndSpecialIds) {
  EXPECT_EQ(native_->vocab_size(), oracle_->piece_size());
  EXPECT_EQ(native_->bos_id(), oracle_->bos_id());
  EXPECT_EQ(native_->eos_id(), oracle_->eos_id());
  EXPECT_EQ(native_->kind(), "sentencepiece");
}

TEST_P(NativeVsLibraryTest, WholeWikiText2Test) {
  const std::string text = ReadAll(kData + "/wikitext-2-raw/wiki.test.raw");
  ASSERT_GT(text.size(), 1000000u);
  ExpectSame(text, "wiki.test.raw");
}

TEST_P(NativeVsLibraryTest, WikiText2Lines) {
  const std::string text = ReadAll(kData + "/wikitext-2-raw/wiki.test.raw");
  size_t start = 0;
  int lines = 0;
  while (start < text.size() && lines < 2000) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    ExpectSame(text.substr(start, end - start), "line " + std::to_string(lines));
    start = end + 1;
    ++lines;
  }
}

TEST_P(NativeVsLibraryTest, GoldenCases) {
  const auto golden = nlohmann::json::parse(ReadAll(kData + "/tokenizer-golden/tokenizer_golden.json"));
  const auto& cases = golden["cases"];
  ASSERT_EQ(cases.size(), 14u);
  for (size_t i = 0; i < cases.size(); ++i) {
    ExpectSame(cases[i].get<std::string>(), "golden case " + std::to_string(i));
  }
}

TEST_P(NativeVsLibraryTest, EdgeCases) {
  const char* cases[] = {
      "",
      " ",
      "   ",
      "a",
      " a",
      "a ",
      "  a  b  ",
      "a\tb\nc\r\nd",
      "\n\n",
      "<s></s><unk>",
      "<0x41>",
      "\xE2\x96\x81",
      "\xE2\x96\x81\xE2\x96\x81x",
      "x\xE2\x96\x81y",
      "\xF0\x9F\x98\x80\xF0\x9F\xA4\x96 emoji",
      "\xE4\xB8\xAD\xE6\x96\x87\xE5\xAD\x97 \xE9\xBE\x98",
      "\xC3\xA9\xC3\xA8 cafe\xCC\x81",
      "\xEF\xBF\xBD \x7F \x01",
      "1234567890 3.14159",
      "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
      "                         x",
      "Hello world! How's it going?  Double  spaces,\ttabs.",
  };
  for (const char* c : cases) ExpectSame(c, "edge case");
}

// Pseudo-random texts from a fixed seed: ASCII words, spaces, and code points from several blocks
// (many without a piece: byte fallback / unknown).
TEST_P(NativeVsLibraryTest, PseudoRandomTexts) {
  std::mt19937 rng(12345);
  const uint32_t blocks[][2] = {{0x20, 0x7E},       {0x20, 0x20},     {0xA0, 0x24F},    {0x370, 0x52F},
                                {0x2000, 0x206F},   {0x2580, 0x259F}, {0x4E00, 0x9FFF}, {0xAC00, 0xD7A3},
                                {0x1F300, 0x1FAFF}, {0x1, 0x1F}};
  for (int n = 0; n < 1500; ++n) {
    std::string text;
    const int len = static_cast<int>(rng() % 40);
    for (int i = 0; i < len; ++i) {
      const auto& b = blocks[rng() % (sizeof(blocks) / sizeof(blocks[0]))];
      uint32_t cp = b[0] + rng() % (b[1] - b[0] + 1);
      if (cp == 0) cp = ' ';
      if (cp < 0x80) {
        text.push_back(static_cast<char>(cp));
      } else if (cp < 0x800) {
        text.push_back(static_cast<char>(0xC0 | (cp >> 6)));
        text.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
      } else if (cp < 0x10000) {
        text.push_back(static_cast<char>(0xE0 | (cp >> 12)));
        text.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
        text.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
      } else {
        text.push_back(static_cast<char>(0xF0 | (cp >> 18)));
        text.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
        text.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
        text.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
      }
    }
    ExpectSame(text, "random text " + std::to_string(n));
  }
}

// Decode of arbitrary id sequences (no control ids: the library renders them as "", this
// tokenizer as their text; no byte ids, whose cut UTF-8 the library replaces by U+FFFD while this
// tokenizer returns the bytes) equals the library's; the unknown id included.
TEST_P(NativeVsLibraryTest, DecodeRandomIds) {
  std::mt19937 rng(777);
  std::vector<int32_t> pool;
  for (int32_t id = 0; id < native_->vocab_size(); ++id) {
    if (!oracle_->IsControl(id) && !oracle_->IsByte(id)) pool.push_back(id);
  }
  for (int n = 0; n < 500; ++n) {
    std::vector<int32_t> ids(rng() % 12);
    for (int32_t& id : ids) id = pool[rng() % pool.size()];
    const auto decoded = native_->Decode(ids);
    ASSERT_TRUE(decoded.ok());
    EXPECT_EQ(*decoded, LibraryDecode(ids)) << GetParam().name << " sequence " << n;
  }
  // Byte ids that form whole characters, at the start and after a piece.
  const std::vector<int32_t> bytes = {oracle_->PieceToId("<0xE4>"), oracle_->PieceToId("<0xB8>"),
                                      oracle_->PieceToId("<0xAD>")};
  const int32_t word = pool[pool.size() / 2];
  for (const auto& ids : {bytes, std::vector<int32_t>{word, bytes[0], bytes[1], bytes[2]},
                          std::vector<int32_t>{bytes[0], bytes[1], bytes[2], word, word}}) {
    EXPECT_EQ(native_->Decode(ids).value(), LibraryDecode(ids)) << GetParam().name;
  }
}

INSTANTIATE_TEST_SUITE_P(SharedModels, NativeVsLibraryTest, ::testing::ValuesIn(kModels),
                         [](const auto& info) { return std::string(info.param.name); });

// A model file cut at every length, and with single bytes flipped, is an error or a valid model,
// never a crash.
TEST(SentencePieceProtoTest, TruncatedAndCorruptedFilesAreErrors) {
  const std::string bytes = ReadAll(kData + "/stories260K-hf/tokenizer.model");
  ASSERT_FALSE(bytes.empty());
  for (size_t len = 0; len < bytes.size(); len += 7) {
    auto proto = tokenizer_internal::ParseSentencePieceProto(std::string_view(bytes).substr(0, len));
    if (!proto.ok()) {
      EXPECT_EQ(proto.status().code(), absl::StatusCode::kInvalidArgument);
    }
  }
  // Corrupted bytes that still parse go through validation and, if accepted, encode and decode.
  std::mt19937 rng(99);
  int accepted = 0;
  for (int n = 0; n < 2000; ++n) {
    std::string corrupted = bytes;
    for (int k = 0; k < 1 + n % 3; ++k) corrupted[rng() % corrupted.size()] = static_cast<char>(rng());
    auto proto = tokenizer_internal::ParseSentencePieceProto(corrupted);
    if (!proto.ok()) continue;
    auto model = tokenizer_internal::SentencePieceBpe::Create(*std::move(proto));
    if (!model.ok()) continue;
    ++accepted;
    std::string normalized;
    model->Normalize("Once upon a time,  there was a \xE4\xB8\xAD dog.", &normalized);
    tokenizer_internal::SentencePieceBpe::Scratch scratch;
    std::vector<int32_t> ids;
    model->EncodeNormalized(normalized, &scratch, &ids);
    for (const int32_t id : ids) ASSERT_TRUE(id >= 0 && id < model->size());
    std::string decoded;
    model->DecodeRun(ids, &decoded);
  }
  EXPECT_GT(accepted, 0);
}

// Writes `bytes` as tokenizer.model in a temporary folder and loads it.
absl::StatusOr<std::unique_ptr<Tokenizer>> LoadModelBytes(const std::string& bytes) {
  std::string dir = ::testing::TempDir() + "spm_native_XXXXXX";
  if (mkdtemp(dir.data()) == nullptr) return absl::InternalError("mkdtemp");
  std::ofstream(dir + "/tokenizer.model", std::ios::binary) << bytes;
  auto t = Tokenizer::Load(dir, Format::kSentencePiece);
  unlink((dir + "/tokenizer.model").c_str());
  rmdir(dir.c_str());
  return t;
}

std::string Varint(uint64_t v) {
  std::string out;
  while (v >= 0x80) {
    out.push_back(static_cast<char>(0x80 | (v & 0x7F)));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
  return out;
}
std::string LengthDelimited(int field, const std::string& payload) {
  return Varint((static_cast<uint64_t>(field) << 3) | 2) + Varint(payload.size()) + payload;
}
std::string VarintField(int field, uint64_t v) {
  return Varint(static_cast<uint64_t>(field) << 3) + Varint(v);
}

TEST(SentencePieceProtoTest, UnsupportedAndInvalidModels) {
  const std::string bytes = ReadAll(kData + "/stories260K-hf/tokenizer.model");
  // A later trainer_spec merges into the first: model_type UNIGRAM.
  auto unigram = LoadModelBytes(bytes + LengthDelimited(2, VarintField(3, 1)));
  ASSERT_FALSE(unigram.ok());
  EXPECT_EQ(unigram.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(unigram.status().message()), ::testing::HasSubstr("UNIGRAM"));
  // A normalizer with a precompiled character map (as nmt_nfkc has).
  auto nfkc =
      LoadModelBytes(bytes + LengthDelimited(3, LengthDelimited(1, "nmt_nfkc") + LengthDelimited(2, "xxxx")));
  ASSERT_FALSE(nfkc.ok());
  EXPECT_EQ(nfkc.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(nfkc.status().message()), ::testing::HasSubstr("nmt_nfkc"));
  // byte_fallback false with byte pieces present.
  auto no_fallback = LoadModelBytes(bytes + LengthDelimited(2, VarintField(35, 0)));
  ASSERT_FALSE(no_fallback.ok());
  EXPECT_EQ(no_fallback.status().code(), absl::StatusCode::kInvalidArgument);
  // A duplicate piece.
  auto duplicate = LoadModelBytes(bytes + LengthDelimited(1, LengthDelimited(1, "<s>") + VarintField(3, 3)));
  ASSERT_FALSE(duplicate.ok());
  EXPECT_EQ(duplicate.status().code(), absl::StatusCode::kInvalidArgument);
  // Not a model at all (wire-format error), and an empty file (no pieces; the default model_type
  // UNIGRAM is reported first).
  auto junk = LoadModelBytes("hello world\n");
  ASSERT_FALSE(junk.ok());
  EXPECT_EQ(junk.status().code(), absl::StatusCode::kInvalidArgument) << junk.status();
  auto empty = LoadModelBytes("");
  ASSERT_FALSE(empty.ok());
  EXPECT_EQ(empty.status().code(), absl::StatusCode::kUnimplemented) << empty.status();
}

}  // namespace
}  // namespace scored
