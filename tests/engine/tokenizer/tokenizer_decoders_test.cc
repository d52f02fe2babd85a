// The tokenizer.json fixtures of BPE models with a subword prefix or an end-of-word suffix (openai-gpt-style:
// BertNormalizer, BertPreTokenizer, "</w>" and BPEDecoder; subword-prefix-style: Nmt, NFKD, StripAccents,
// Split / Punctuation / Digits without ByteLevel, "##" and the WordPiece decoder; clip-style: byte-level with
// "</w>"), and variants of those and of golden.json's fixtures with another decoder, normalizer or
// pre-tokenizer (tests/fixtures/tokenizers/decoders-golden.json, made by
// scripts/fixtures/make_tokenizer_decoder_fixtures.py with the HF tokenizers library). Every case must give
// the library's ids and decoded text.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

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
using ::testing::HasSubstr;

const std::string kFixtures = std::string(SCORED_FIXTURES_DIR) + "/tokenizers";

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

const nlohmann::json& Golden() {
  static const nlohmann::json* golden =
      new nlohmann::json(nlohmann::json::parse(ReadAll(kFixtures + "/decoders-golden.json")));
  return *golden;
}

// The case strings the indices of decoders-golden.json point into: golden.json's cases, its pipeline_cases,
// then extra_cases.
const std::vector<std::string>& AllCases() {
  static const std::vector<std::string>* cases = [] {
    const nlohmann::json base = nlohmann::json::parse(ReadAll(kFixtures + "/golden.json"));
    auto* all = new std::vector<std::string>();
    for (const char* key : {"cases", "pipeline_cases"}) {
      for (const auto& c : base[key]) all->push_back(c.get<std::string>());
    }
    for (const auto& c : Golden()["extra_cases"]) all->push_back(c.get<std::string>());
    return all;
  }();
  return *cases;
}

// The library's decoded text of case `index`: the case itself unless `differs` records another (null: the
// library fails on it, and the case is skipped).
bool ExpectedText(const nlohmann::json& differs, size_t index, std::string* text) {
  const std::string key = std::to_string(index);
  if (!differs.contains(key)) {
    *text = AllCases()[index];
    return true;
  }
  if (differs[key].is_null()) return false;
  *text = differs[key].get<std::string>();
  return true;
}

struct Fixture {
  const char* name;
  const char* kind;
  int64_t vocab_size;
  int32_t bos_id;
  int32_t eos_id;
  bool add_bos;
};

// openai-gpt: <unk> 0, no BOS / EOS. subword-prefix: [UNK] 0, [CLS] 1 (BOS, from "[CLS] $A"), [SEP] 2 (EOS).
// clip: <|startoftext|> 0, <|endoftext|> 1 (the unknown token too).
const Fixture kFixtureList[] = {
    {"openai-gpt-style", "hf-bpe-metaspace", 999, -1, -1, false},
    {"subword-prefix-style", "hf-bpe-metaspace", 997, 1, 2, true},
    {"clip-style", "hf-bpe-bytelevel", 1198, 0, 1, false},
};

class AffixFixtureTest : public ::testing::TestWithParam<Fixture> {
 protected:
  void SetUp() override {
    auto t = Tokenizer::Load(kFixtures + "/" + GetParam().name);
    ASSERT_TRUE(t.ok()) << t.status();
    tok_ = std::move(t).value();
  }
  std::unique_ptr<Tokenizer> tok_;
};

TEST_P(AffixFixtureTest, SpecialTokensAndKind) {
  const Fixture& f = GetParam();
  EXPECT_EQ(tok_->kind(), f.kind);
  EXPECT_EQ(tok_->vocab_size(), f.vocab_size);
  EXPECT_EQ(tok_->bos_id(), f.bos_id);
  EXPECT_EQ(tok_->eos_id(), f.eos_id);
  EXPECT_EQ(tok_->add_bos_by_default(), f.add_bos);
}

// The library's add_special_tokens=False / True ids and its decode of the former.
TEST_P(AffixFixtureTest, EveryCaseMatchesTheLibrary) {
  const std::string name = GetParam().name;
  const auto& g = Golden()[name];
  const auto& indices = Golden()["case_indices"];
  ASSERT_EQ(g["nospecial"].size(), indices.size());
  ASSERT_GT(indices.size(), 90u);
  for (size_t k = 0; k < indices.size(); ++k) {
    const size_t i = indices[k].get<size_t>();
    const std::vector<int32_t> expected = g["nospecial"][k].get<std::vector<int32_t>>();
    const auto ids = tok_->Encode(AllCases()[i]);
    ASSERT_TRUE(ids.ok()) << name << " case " << i << ": " << ids.status();
    EXPECT_THAT(*ids, ElementsAreArray(expected)) << name << " case " << i;
    std::vector<int32_t> full;
    if (tok_->add_bos_by_default()) full.push_back(tok_->bos_id());
    full.insert(full.end(), ids->begin(), ids->end());
    const std::string key = std::to_string(i);
    const auto& special = g["special_differs"];
    EXPECT_THAT(full,
                ElementsAreArray(special.contains(key) ? special[key].get<std::vector<int32_t>>() : expected))
        << name << " case " << i;
    std::string text;
    ASSERT_TRUE(ExpectedText(g["decoded_differs"], i, &text));
    EXPECT_EQ(tok_->Decode(expected).value(), text) << name << " case " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, AffixFixtureTest, ::testing::ValuesIn(kFixtureList), [](const auto& info) {
  const std::string name = info.param.name;
  return std::string(name == "openai-gpt-style"       ? "OpenAiGptStyle"
                     : name == "subword-prefix-style" ? "SubwordPrefixStyle"
                                                      : "ClipStyle");
});

// A token's byte length is its text in the middle of a decoded text: the suffix as the space it decodes to,
// the prefix dropped, a token without it one space more.
TEST(AffixTokenTest, TokenByteLengthsFollowTheDecoder) {
  auto openai = Tokenizer::Load(kFixtures + "/openai-gpt-style");
  ASSERT_TRUE(openai.ok()) << openai.status();
  const std::vector<int32_t> the = (*openai)->Encode("the").value();
  ASSERT_EQ(the.size(), 1u);
  EXPECT_EQ((*openai)->Decode(the).value(), "the");
  EXPECT_EQ((*openai)->TokenByteLength(the[0]), 4);  // "the</w>" -> "the "
  EXPECT_EQ((*openai)->TokenByteLength(0), 0);       // <unk>, special
  auto prefix = Tokenizer::Load(kFixtures + "/subword-prefix-style");
  ASSERT_TRUE(prefix.ok()) << prefix.status();
  const std::vector<int32_t> ids = (*prefix)->Encode("zzz").value();  // "z", "##z", "##z" unless merged
  ASSERT_GE(ids.size(), 2u);
  EXPECT_EQ((*prefix)->Decode(ids).value(), "zzz");
  int64_t bytes = 0;
  for (const int32_t id : ids) bytes += (*prefix)->TokenByteLength(id);
  EXPECT_EQ(bytes, 4);  // " z" for the first (as any token not after the prefix), "z" for the others
}

// tokenizer.json variants in a temporary folder.
class VariantTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = ::testing::TempDir() + "tokenizer_decoders_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    unlink((dir_ + "/tokenizer.json").c_str());
    rmdir(dir_.c_str());
  }
  absl::StatusOr<std::unique_ptr<Tokenizer>> LoadWith(const std::string& fixture,
                                                      const nlohmann::json& fields) {
    nlohmann::json j = nlohmann::json::parse(ReadAll(kFixtures + "/" + fixture + "/tokenizer.json"));
    for (const auto& [field, value] : fields.items()) {
      if (field.rfind("model.", 0) == 0) {
        j["model"][field.substr(6)] = value;
      } else {
        j[field] = value;
      }
    }
    std::ofstream(dir_ + "/tokenizer.json", std::ios::binary) << j.dump();
    return Tokenizer::Load(dir_);
  }
  // Expects UNIMPLEMENTED naming tokenizer.json, `what` and `value_text`.
  void ExpectUnsupported(const std::string& fixture, const std::string& field, const std::string& value,
                         const std::string& what, const std::string& value_text) {
    const auto t = LoadWith(fixture, {{field, nlohmann::json::parse(value)}});
    ASSERT_FALSE(t.ok()) << field << " = " << value;
    EXPECT_EQ(t.status().code(), absl::StatusCode::kUnimplemented) << t.status();
    const std::string message(t.status().message());
    EXPECT_THAT(message, HasSubstr("tokenizer.json"));
    EXPECT_THAT(message, HasSubstr(what));
    EXPECT_THAT(message, HasSubstr(value_text));
  }
  std::string dir_;
};

// The ids of `fixture` for variant case k: decoders-golden.json's fixture_ids for golden.json's fixtures,
// else the fixture's own goldens (over case_indices, which hold every variant case).
std::vector<int32_t> FixtureIds(const std::string& fixture, size_t k) {
  if (Golden()["fixture_ids"].contains(fixture)) {
    return Golden()["fixture_ids"][fixture][k].get<std::vector<int32_t>>();
  }
  const size_t index = Golden()["variant_case_indices"][k].get<size_t>();
  const auto& indices = Golden()["case_indices"];
  for (size_t m = 0; m < indices.size(); ++m) {
    if (indices[m].get<size_t>() == index)
      return Golden()[fixture]["nospecial"][m].get<std::vector<int32_t>>();
  }
  ADD_FAILURE() << "case " << index << " not in case_indices";
  return {};
}

// Every decoder variant decodes the fixture's ids (which it also encodes) to the library's text.
TEST_F(VariantTest, DecoderVariantsMatchTheLibrary) {
  const auto& indices = Golden()["variant_case_indices"];
  ASSERT_GT(Golden()["decoder_variants"].size(), 12u);
  for (const auto& variant : Golden()["decoder_variants"]) {
    const std::string name = variant["name"].get<std::string>();
    const std::string fixture = variant["fixture"].get<std::string>();
    const auto t = LoadWith(fixture, {{"decoder", variant["decoder"]}});
    ASSERT_TRUE(t.ok()) << name << ": " << t.status();
    int checked = 0;
    for (size_t k = 0; k < indices.size(); ++k) {
      const size_t i = indices[k].get<size_t>();
      const std::vector<int32_t> ids = FixtureIds(fixture, k);
      EXPECT_THAT((*t)->Encode(AllCases()[i]).value(), ElementsAreArray(ids)) << name << " case " << i;
      std::string text;
      if (!ExpectedText(variant["decoded_differs"], i, &text)) continue;
      EXPECT_EQ((*t)->Decode(ids).value(), text) << name << " case " << i;
      ++checked;
    }
    EXPECT_GT(checked, 70) << name;
  }
}

// Every pipeline variant (another normalizer or pre-tokenizer) gives the library's ids and decoded text.
TEST_F(VariantTest, PipelineVariantsMatchTheLibrary) {
  const auto& indices = Golden()["variant_case_indices"];
  ASSERT_GT(Golden()["pipeline_variants"].size(), 5u);
  for (const auto& variant : Golden()["pipeline_variants"]) {
    const std::string name = variant["name"].get<std::string>();
    const auto t = LoadWith(variant["fixture"].get<std::string>(), variant["fields"]);
    ASSERT_TRUE(t.ok()) << name << ": " << t.status();
    for (size_t k = 0; k < indices.size(); ++k) {
      const size_t i = indices[k].get<size_t>();
      const std::vector<int32_t> expected = variant["nospecial"][k].get<std::vector<int32_t>>();
      const auto ids = (*t)->Encode(AllCases()[i]);
      ASSERT_TRUE(ids.ok()) << name << " case " << i << ": " << ids.status();
      EXPECT_THAT(*ids, ElementsAreArray(expected)) << name << " case " << i;
      std::string text;
      ASSERT_TRUE(ExpectedText(variant["decoded_differs"], i, &text));
      EXPECT_EQ((*t)->Decode(expected).value(), text) << name << " case " << i;
    }
  }
}

// Where the ids cut a UTF-8 character the bytes are returned as they are (the library writes U+FFFD for
// each); ByteFallback reads <0xNN> with either case of hex digit and a leading '+', as Rust's
// u8::from_str_radix.
TEST_F(VariantTest, ByteFallbackForms) {
  const auto t =
      LoadWith("gemma-style", {{"decoder", nlohmann::json::parse(R"({"type": "Sequence", "decoders": [
      {"type": "ByteFallback"}, {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always"}]})")}});
  ASSERT_TRUE(t.ok()) << t.status();
  const int32_t kByte0 = 7;  // <0x00> in gemma-style
  EXPECT_EQ((*t)->Decode({kByte0 + 0xE2, kByte0 + 0x82}).value(), "\xE2\x82");
  EXPECT_EQ((*t)->Decode({kByte0 + 0xE2, kByte0 + 0x82, kByte0 + 0xAC}).value(), "\xE2\x82\xAC");  // €
  const auto added = LoadWith("gemma-style", {{"added_tokens", nlohmann::json::parse(R"([
      {"id": 0, "content": "<0x+A>", "special": false}, {"id": 1, "content": "<0xe9>", "special": false},
      {"id": 2, "content": "<0xg1>", "special": false}])")},
                                              {"decoder", {{"type", "ByteFallback"}}}});
  ASSERT_TRUE(added.ok()) << added.status();
  EXPECT_EQ((*added)->Decode({0, 2}).value(), "\n<0xg1>");
  EXPECT_EQ((*added)->Decode({1}).value(), "\xE9");
}

TEST_F(VariantTest, UnsupportedPiecesFailAtLoadNamingFieldAndValue) {
  ExpectUnsupported("gemma-style", "decoder", R"({"type": "CTC", "pad_token": "<pad>"})", "decoder", "CTC");
  ExpectUnsupported("gemma-style", "decoder", R"({"type": "Strip", "content": "ab", "start": 1, "stop": 0})",
                    "decoder", R"("content":"ab")");
  ExpectUnsupported("gemma-style", "decoder", R"({"type": "Strip", "content": " ", "start": -1, "stop": 0})",
                    "decoder", R"("start":-1)");
  ExpectUnsupported("gemma-style", "decoder", R"({"type": "BPEDecoder", "suffix": ""})", "decoder",
                    "BPEDecoder");
  // The decoder must undo the byte-level alphabet: ByteLevel first, once, and only for a byte-level
  // vocabulary.
  ExpectUnsupported("gemma-style", "decoder", R"({"type": "ByteLevel"})",
                    "ByteLevel without a ByteLevel pre_tokenizer", "ByteLevel");
  ExpectUnsupported("phi4-style", "decoder", R"({"type": "Fuse"})", "not ByteLevel first", "Fuse");
  ExpectUnsupported("phi4-style", "decoder", "null", "not ByteLevel first", "null");
  ExpectUnsupported(
      "phi4-style", "decoder",
      R"({"type": "Sequence", "decoders": [{"type": "Strip", "content": " ", "start": 1, "stop": 0},
                          {"type": "ByteLevel"}]})",
      "not ByteLevel first", "Strip");
  ExpectUnsupported("phi4-style", "decoder",
                    R"({"type": "Sequence", "decoders": [{"type": "ByteLevel"}, {"type": "ByteLevel"}]})",
                    "a second ByteLevel", "ByteLevel");
  // Malformed fields of the types read here (the types not read: tokenizer_fixtures_test).
  ExpectUnsupported("pipelines-style", "pre_tokenizer", R"({"type": "FixedLength", "length": 0})",
                    "pre_tokenizer", "FixedLength");
  ExpectUnsupported("openai-gpt-style", "normalizer", R"({"type": "BertNormalizer", "lowercase": "yes"})",
                    "normalizer", "BertNormalizer");
}

// A merge whose right side is shorter than the continuing_subword_prefix cannot be applied (the library
// panics).
TEST_F(VariantTest, MergeShorterThanThePrefixIsRefused) {
  const auto t = LoadWith("subword-prefix-style", {{"model.continuing_subword_prefix", "######"}});
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument) << t.status();
  EXPECT_THAT(std::string(t.status().message()), HasSubstr("continuing_subword_prefix"));
}

}  // namespace
}  // namespace scored
