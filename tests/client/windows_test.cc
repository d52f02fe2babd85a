// Unit tests of scored-ppl's pure parts: each method's window arithmetic on small inputs with
// hand-computed windows, dataset row parsing (against the real WikiText-2 and TinyStories files), the
// plan's choice of text per method, and the report math on a fixed NLL vector.
#include "client/ppl/windows.h"

#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "client/ppl/dataset.h"
#include "client/ppl/plan.h"
#include "client/ppl/progress.h"
#include "client/ppl/report.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace scored {
namespace ppl {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;

constexpr int32_t kBos = 1;
constexpr int32_t kEos = 2;

// Ten tokens t0..t9 = 100..109 with byte lengths 1..10, so every window's ids and bytes name their
// source positions.
TokenStream TenTokens() {
  TokenStream s;
  for (int32_t i = 0; i < 10; ++i) {
    s.ids.push_back(100 + i);
    s.byte_lengths.push_back(i + 1);
  }
  return s;
}

std::vector<int32_t> Ids(std::initializer_list<int32_t> positions) {
  std::vector<int32_t> out;
  for (int32_t p : positions) out.push_back(100 + p);
  return out;
}

MethodParams Params(Method m, int64_t ctx, int64_t stride, int64_t max_windows = 0) {
  MethodParams p;
  p.method = m;
  p.ctx = ctx;
  p.stride = stride;
  p.max_windows = max_windows;
  return p;
}

int64_t TotalScored(const std::vector<Window>& windows) {
  int64_t n = 0;
  for (const Window& w : windows) n += w.num_scored();
  return n;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream buf;
  buf << in.rdbuf();
  return buf.str();
}

// N = 10, ctx 4, stride 2: a in range(0, 6, 2) = 0, 2, 4 -> [t0..t3], [t2..t5], [t4..t7]; a = 6 would end
// at N and is excluded by range's bound. Every position after the first scored: 3 x 3.
TEST(WindowsTest, Exl3) {
  const auto w = Exl3Windows(TenTokens(), Params(Method::kExl3, 4, 2));
  ASSERT_EQ(w.size(), 3u);
  EXPECT_THAT(w[0].tokens, ElementsAreArray(Ids({0, 1, 2, 3})));
  EXPECT_THAT(w[1].tokens, ElementsAreArray(Ids({2, 3, 4, 5})));
  EXPECT_THAT(w[2].tokens, ElementsAreArray(Ids({4, 5, 6, 7})));
  for (const Window& x : w) EXPECT_EQ(x.score_from, 1);
  EXPECT_THAT(w[1].byte_lengths, ElementsAre(3, 4, 5, 6));
  EXPECT_EQ(TotalScored(w), 9);
  EXPECT_EQ(Exl3Windows(TenTokens(), Params(Method::kExl3, 4, 2, 2)).size(), 2u);
  // N - ctx <= 0: no window at all.
  EXPECT_TRUE(Exl3Windows(TenTokens(), Params(Method::kExl3, 10, 2)).empty());
}

// 10 / 4 = 2 disjoint windows [t0..t3], [t4..t7]; t8, t9 dropped.
TEST(WindowsTest, Gptq) {
  const auto w = GptqWindows(TenTokens(), Params(Method::kGptq, 4, 0));
  ASSERT_EQ(w.size(), 2u);
  EXPECT_THAT(w[0].tokens, ElementsAreArray(Ids({0, 1, 2, 3})));
  EXPECT_THAT(w[1].tokens, ElementsAreArray(Ids({4, 5, 6, 7})));
  EXPECT_EQ(w[0].score_from, 1);
  EXPECT_EQ(w[1].score_from, 1);
  EXPECT_EQ(TotalScored(w), 6);
  EXPECT_EQ(GptqWindows(TenTokens(), Params(Method::kGptq, 4, 0, 1)).size(), 1u);
}

// begin 0: end 4, targets 4 -> [t0..t3] scoring t1..t3 (from 1); begin 2: end 6, targets 6-4 = 2 ->
// [t2..t5] from 2 (t4, t5); begin 4: [t4..t7] from 2 (t6, t7); begin 6: end 10 = N, [t6..t9] from 2
// (t8, t9), stop. Every token after the first scored once: 9.
TEST(WindowsTest, Hf) {
  const auto w = HfWindows(TenTokens(), Params(Method::kHf, 4, 2));
  ASSERT_EQ(w.size(), 4u);
  EXPECT_THAT(w[0].tokens, ElementsAreArray(Ids({0, 1, 2, 3})));
  EXPECT_THAT(w[1].tokens, ElementsAreArray(Ids({2, 3, 4, 5})));
  EXPECT_THAT(w[2].tokens, ElementsAreArray(Ids({4, 5, 6, 7})));
  EXPECT_THAT(w[3].tokens, ElementsAreArray(Ids({6, 7, 8, 9})));
  EXPECT_EQ(w[0].score_from, 1);
  EXPECT_EQ(w[1].score_from, 2);
  EXPECT_EQ(w[2].score_from, 2);
  EXPECT_EQ(w[3].score_from, 2);
  EXPECT_EQ(TotalScored(w), 9);
}

// Uneven tail: ctx 4, stride 3: begin 0 -> [t0..t3] from 1; begin 3 -> end 7, targets 3, [t3..t6] from
// 1; begin 6 -> end 10, targets 3, [t6..t9] from 1. Still 9 scored, each once.
TEST(WindowsTest, HfStrideThree) {
  const auto w = HfWindows(TenTokens(), Params(Method::kHf, 4, 3));
  ASSERT_EQ(w.size(), 3u);
  EXPECT_THAT(w[1].tokens, ElementsAreArray(Ids({3, 4, 5, 6})));
  EXPECT_THAT(w[2].tokens, ElementsAreArray(Ids({6, 7, 8, 9})));
  for (const Window& x : w) EXPECT_EQ(x.score_from, 1);
  EXPECT_EQ(TotalScored(w), 9);
  // max_windows keeps the first ones.
  EXPECT_EQ(HfWindows(TenTokens(), Params(Method::kHf, 4, 2, 2)).size(), 2u);
}

// 10 / 4 = 2 chunks, first id replaced by BOS (byte length 0); positions 4/2 + 1 = 3 .. 3 scored:
// ctx/2 - 1 = 1 per chunk.
TEST(WindowsTest, LlamaCpp) {
  const auto w = LlamaCppWindows(TenTokens(), Params(Method::kLlamaCpp, 4, 0), true, kBos);
  ASSERT_EQ(w.size(), 2u);
  EXPECT_THAT(w[0].tokens, ElementsAre(kBos, 101, 102, 103));
  EXPECT_THAT(w[1].tokens, ElementsAre(kBos, 105, 106, 107));
  EXPECT_THAT(w[1].byte_lengths, ElementsAre(0, 6, 7, 8));
  EXPECT_EQ(w[0].score_from, 3);
  EXPECT_EQ(w[1].score_from, 3);
  EXPECT_EQ(TotalScored(w), 2);
  // Without BOS the chunks are untouched. ctx 8: one chunk scoring positions 5..7.
  const auto plain = LlamaCppWindows(TenTokens(), Params(Method::kLlamaCpp, 8, 0), false, kBos);
  ASSERT_EQ(plain.size(), 1u);
  EXPECT_THAT(plain[0].tokens, ElementsAreArray(Ids({0, 1, 2, 3, 4, 5, 6, 7})));
  EXPECT_EQ(plain[0].score_from, 5);
  EXPECT_EQ(plain[0].num_scored(), 3);
}

// lm-eval get_rolling_token_windows(max_seq_len 4, context_len 1), prefix P:
//   ([P, t0, t1, t2], [t0..t3])  -> request [P, t0..t3] scoring t0..t3 (from 1)
//   ([t3..t6], [t4..t7])         -> request [t3..t7] scoring t4..t7 (from 1)
//   ([t5..t8], [t8, t9])         -> request [t5..t9] scoring t8, t9 (from 3)
// Every document token scored exactly once: 10.
TEST(WindowsTest, Rolling) {
  const auto w = RollingWindows(TenTokens(), 4, kBos);
  ASSERT_EQ(w.size(), 3u);
  EXPECT_THAT(w[0].tokens, ElementsAre(kBos, 100, 101, 102, 103));
  EXPECT_THAT(w[0].byte_lengths, ElementsAre(0, 1, 2, 3, 4));
  EXPECT_EQ(w[0].score_from, 1);
  EXPECT_THAT(w[1].tokens, ElementsAreArray(Ids({3, 4, 5, 6, 7})));
  EXPECT_EQ(w[1].score_from, 1);
  EXPECT_THAT(w[2].tokens, ElementsAreArray(Ids({5, 6, 7, 8, 9})));
  EXPECT_EQ(w[2].score_from, 3);
  EXPECT_EQ(TotalScored(w), 10);
}

// A document shorter than ctx is one window [prefix] + tokens; an empty one gives none. Across
// documents max_windows counts all windows.
TEST(WindowsTest, RollingShortDocumentsAndMaxWindows) {
  TokenStream small;
  small.ids = {7, 8, 9};
  const auto one = RollingWindows(small, 4, kEos);
  ASSERT_EQ(one.size(), 1u);
  EXPECT_THAT(one[0].tokens, ElementsAre(kEos, 7, 8, 9));
  EXPECT_EQ(one[0].score_from, 1);
  EXPECT_TRUE(one[0].byte_lengths.empty());
  EXPECT_TRUE(RollingWindows(TokenStream(), 4, kBos).empty());
  // Exactly ctx tokens: still one window.
  TokenStream four;
  four.ids = {5, 6, 7, 8};
  EXPECT_EQ(RollingWindows(four, 4, kBos).size(), 1u);

  const std::vector<TokenStream> docs = {small, TenTokens(), small};
  EXPECT_EQ(BuildRollingWindows(docs, Params(Method::kRolling, 4, 0), kBos).size(), 5u);
  const auto limited = BuildRollingWindows(docs, Params(Method::kRolling, 4, 0, 3), kBos);
  ASSERT_EQ(limited.size(), 3u);
  EXPECT_THAT(limited[2].tokens, ElementsAreArray(Ids({3, 4, 5, 6, 7})));
}

// Chunks of ctx - 1 = 3: [t0 t1 t2] [t3 t4 t5] [t6 t7 t8] [t9], each as [P] + chunk, all chunk ids scored.
TEST(WindowsTest, Chunks) {
  const auto w = ChunksWindows(TenTokens(), Params(Method::kChunks, 4, 0), kBos);
  ASSERT_EQ(w.size(), 4u);
  EXPECT_THAT(w[0].tokens, ElementsAre(kBos, 100, 101, 102));
  EXPECT_THAT(w[1].tokens, ElementsAre(kBos, 103, 104, 105));
  EXPECT_THAT(w[2].tokens, ElementsAre(kBos, 106, 107, 108));
  EXPECT_THAT(w[3].tokens, ElementsAre(kBos, 109));
  EXPECT_THAT(w[3].byte_lengths, ElementsAre(0, 10));
  for (const Window& x : w) EXPECT_EQ(x.score_from, 1);
  EXPECT_EQ(TotalScored(w), 10);
  EXPECT_EQ(ChunksWindows(TenTokens(), Params(Method::kChunks, 4, 0, 2), kBos).size(), 2u);
}

// The window counts of reference_methods.json follow from N alone for the methods whose count does
// not depend on the tokenizer beyond N: 100 windows at ctx 512 whenever N is large enough.
TEST(WindowsTest, ScoredCountsAtGoldenParameters) {
  TokenStream big;
  big.ids.assign(300000, 5);
  EXPECT_EQ(TotalScored(Exl3Windows(big, Params(Method::kExl3, 512, 256, 100))), 51100);
  EXPECT_EQ(TotalScored(GptqWindows(big, Params(Method::kGptq, 512, 0, 100))), 51100);
  EXPECT_EQ(TotalScored(HfWindows(big, Params(Method::kHf, 512, 256, 100))), 25855);
  EXPECT_EQ(TotalScored(LlamaCppWindows(big, Params(Method::kLlamaCpp, 512, 0, 100), true, kBos)), 25500);
  EXPECT_EQ(TotalScored(BuildRollingWindows({big}, Params(Method::kRolling, 512, 0, 100), kBos)), 51200);
}

TEST(WindowsTest, MethodNamesAndDefaults) {
  for (const char* name : {"exl3", "gptq", "hf", "llamacpp", "rolling", "chunks"}) {
    auto m = ParseMethod(name);
    ASSERT_TRUE(m.ok()) << name;
    EXPECT_EQ(MethodName(*m), name);
  }
  EXPECT_FALSE(ParseMethod("ppl").ok());
  EXPECT_EQ(DefaultCtx(Method::kExl3), 2048);
  EXPECT_EQ(DefaultStride(Method::kExl3), 512);
  EXPECT_EQ(DefaultCtx(Method::kLlamaCpp), 512);
  EXPECT_EQ(DefaultCtx(Method::kGptq), 2048);
  EXPECT_EQ(DefaultStride(Method::kGptq), 0);
  EXPECT_FALSE(ValidateParams(Params(Method::kLlamaCpp, 5, 0)).ok());
  EXPECT_FALSE(ValidateParams(Params(Method::kExl3, 8, 0)).ok());
  EXPECT_FALSE(ValidateParams(Params(Method::kGptq, 1, 0)).ok());
  EXPECT_TRUE(ValidateParams(Params(Method::kHf, 8, 4)).ok());
}

// Rows are lines with their newline; whitespace-only lines (Python's isspace set, U+3000 included)
// become empty rows; a last line without newline is kept; \r\n and \r read as \n.
TEST(DatasetTest, WikiTextRows) {
  EXPECT_THAT(WikiTextRows(" \n = A = \n \n B c \n"), ElementsAre("", " = A = \n", "", " B c \n"));
  EXPECT_THAT(WikiTextRows("x\ny"), ElementsAre("x\n", "y"));
  EXPECT_THAT(WikiTextRows("x\r\n\t\r\ny\rz"), ElementsAre("x\n", "", "y\n", "z"));
  EXPECT_THAT(WikiTextRows("\xe3\x80\x80\nq\xc2\xa0\n"), ElementsAre("", "q\xc2\xa0\n"));
  EXPECT_TRUE(WikiTextRows("").empty());
}

// The real test split: 4358 rows (HF wikitext-2-raw-v1 test), 2891 of them non-empty (counted with
// Python's `row if row.strip() else ""` over the file's lines).
TEST(DatasetTest, WikiTextTestFile) {
  auto ds = LoadDataset(std::string(SCORED_DATA_DIR) + "/wikitext-2-raw/wiki.test.raw", Format::kWikiText, "",
                        "text");
  ASSERT_TRUE(ds.ok()) << ds.status();
  ASSERT_EQ(ds->rows.size(), 4358u);
  int64_t non_empty = 0;
  for (const auto& r : ds->rows) non_empty += r.empty() ? 0 : 1;
  EXPECT_EQ(non_empty, 2891);
  EXPECT_EQ(ds->rows[0], "");
  EXPECT_EQ(ds->rows[1], " = Robert Boulter = \n");
  EXPECT_EQ(ds->rows[2], "");
  EXPECT_EQ(ds->whole_text.size(), 1290590u);
  ASSERT_EQ(ds->documents.size(), 1u);
  EXPECT_EQ(ds->documents[0], ds->whole_text);
  const std::string joined = JoinRows(ds->rows, false);
  // "" + "\n\n" + " = Robert Boulter = \n" + "\n\n" + "" + "\n\n" + " Robert ..."
  EXPECT_EQ(joined.substr(0, 30), "\n\n = Robert Boulter = \n\n\n\n\n Ro");
  const std::string dropped = JoinRows(ds->rows, true);
  EXPECT_EQ(dropped.substr(0, 30), " = Robert Boulter = \n\n\n Robert");
}

TEST(DatasetTest, StripAndSplit) {
  EXPECT_EQ(StripWhitespace(" \t\nab c\xc2\xa0\n"), "ab c");
  EXPECT_EQ(StripWhitespace("\xff "), "\xff");
  EXPECT_TRUE(IsWhitespaceOnly("\x1c\x0b\xe2\x80\xa8"));
  EXPECT_THAT(SplitDocuments("\n a \n<S>\n<S> b<S>", "<S>"), ElementsAre("a", "b"));
  EXPECT_THAT(SplitDocuments("  whole text\n", ""), ElementsAre("whole text"));
}

// TinyStories sample split on <|endoftext|> and stripped gives exactly the 5 texts of
// stories260K-hf/reference_logprobs.json.
TEST(DatasetTest, TinyStoriesMatchesGoldenTexts) {
  auto ds = LoadDataset(std::string(SCORED_DATA_DIR) + "/tinystories-sample/tinystories_sample.txt",
                        Format::kText, "<|endoftext|>", "text");
  ASSERT_TRUE(ds.ok()) << ds.status();
  const auto golden = nlohmann::json::parse(
      ReadFile(std::string(SCORED_DATA_DIR) + "/stories260K-hf/reference_logprobs.json"));
  const auto& stories = golden["tinystories_sample"]["stories"];
  ASSERT_EQ(ds->documents.size(), stories.size());
  for (size_t i = 0; i < stories.size(); ++i) {
    EXPECT_EQ(ds->documents[i], stories[i]["text"].get<std::string>()) << "story " << i;
  }
}

TEST(DatasetTest, Jsonl) {
  auto docs = JsonlDocuments("{\"text\": \"a b\", \"id\": 1}\n\n{\"text\": \"c\\n\"}\n", "text");
  ASSERT_TRUE(docs.ok()) << docs.status();
  EXPECT_THAT(*docs, ElementsAre("a b", "c\n"));
  EXPECT_EQ(JsonlDocuments("{\"body\": \"x\"}\n", "text").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(JsonlDocuments("{\"text\": 3}\n", "text").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(JsonlDocuments("not json\n", "text").status().code(), absl::StatusCode::kInvalidArgument);
  auto ds = ParseDataset("{\"t\": \"x\"}\n{\"t\": \"y\"}\n", Format::kJsonl, "", "t");
  ASSERT_TRUE(ds.ok());
  EXPECT_EQ(ds->whole_text, "x\n\ny");
  EXPECT_EQ(FormatForPath("wiki.test.raw"), Format::kWikiText);
  EXPECT_EQ(FormatForPath("a.jsonl"), Format::kJsonl);
  EXPECT_EQ(FormatForPath("a.txt"), Format::kText);
}

// A byte-level tokenizer (id = byte value + 3, byte length 1) makes each method's choice of text
// visible in the windows.
absl::StatusOr<TokenStream> ByteTokens(const std::string& text) {
  TokenStream s;
  for (unsigned char c : text) {
    s.ids.push_back(static_cast<int32_t>(c) + 3);
    s.byte_lengths.push_back(1);
  }
  return s;
}

std::string Decode(absl::Span<const int32_t> ids) {
  std::string out;
  for (int32_t id : ids) out.push_back(id >= 3 ? static_cast<char>(id - 3) : '^');
  return out;
}

TEST(PlanTest, TextPerMethod) {
  auto ds = ParseDataset("ab\n \ncd\n", Format::kWikiText, "", "text");
  ASSERT_TRUE(ds.ok());
  const SpecialTokens special{kBos, kEos, true};
  // gptq: rows "ab\n", "", "cd\n" joined with "\n\n", with BOS: 11 tokens; ctx 11 -> one window.
  auto gptq = BuildPlan(*ds, Params(Method::kGptq, 11, 0), special, ByteTokens);
  ASSERT_TRUE(gptq.ok()) << gptq.status();
  EXPECT_TRUE(gptq->add_bos);
  EXPECT_EQ(gptq->num_input_tokens, 11);
  ASSERT_EQ(gptq->windows.size(), 1u);
  EXPECT_EQ(Decode(gptq->windows[0].tokens), "^ab\n\n\n\n\ncd\n");
  // exl3 drops the empty row: "^ab\n\n\ncd\n" (9 tokens); ctx 4 stride 3 -> a in range(0, 5, 3) = 0, 3.
  auto exl3 = BuildPlan(*ds, Params(Method::kExl3, 4, 3), special, ByteTokens);
  ASSERT_TRUE(exl3.ok()) << exl3.status();
  EXPECT_EQ(exl3->num_input_tokens, 9);
  ASSERT_EQ(exl3->windows.size(), 2u);
  EXPECT_EQ(Decode(exl3->windows[1].tokens), "\n\n\nc");
  // chunks: the raw file without BOS, windows [BOS] + 3 bytes.
  auto chunks = BuildPlan(*ds, Params(Method::kChunks, 4, 0), special, ByteTokens);
  ASSERT_TRUE(chunks.ok()) << chunks.status();
  EXPECT_EQ(Decode(chunks->windows[0].tokens), "^ab\n");
  ASSERT_EQ(chunks->windows.size(), 3u);
  EXPECT_EQ(Decode(chunks->windows[1].tokens), "^ \nc");
  EXPECT_EQ(Decode(chunks->windows[2].tokens), "^d\n");
  EXPECT_EQ(chunks->num_input_tokens, 8);
  // rolling without a BOS falls back to EOS as the prefix.
  auto rolling = BuildPlan(*ds, Params(Method::kRolling, 100, 0), SpecialTokens{-1, kEos, false}, ByteTokens);
  ASSERT_TRUE(rolling.ok()) << rolling.status();
  EXPECT_EQ(rolling->prefix_id, kEos);
  ASSERT_EQ(rolling->windows.size(), 1u);
  EXPECT_EQ(rolling->windows[0].tokens[0], kEos);
  EXPECT_EQ(rolling->windows[0].num_scored(), 8);
  // No BOS / EOS at all: rolling cannot build its prefix.
  EXPECT_EQ(BuildPlan(*ds, Params(Method::kRolling, 100, 0), SpecialTokens{-1, -1, false}, ByteTokens)
                .status()
                .code(),
            absl::StatusCode::kFailedPrecondition);
  // Too little text for one window.
  EXPECT_EQ(BuildPlan(*ds, Params(Method::kGptq, 100, 0), special, ByteTokens).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

// logprobs -1, -2 | -3, -4 (two windows, 2 + 3 bytes): n 4, sum -10, nll_mean 2.5,
// ppl e^2.5 = 12.182493960703473; sample variance ((1.5^2 + 0.5^2) * 2) / 3 = 5/3,
// stderr sqrt(5/3) / sqrt(4) = 0.6454972243679028; bits/byte 10 / ln 2 / 5 = 2.8853900817779268.
// Tolerance 1e-12 relative: a handful of double operations on exact inputs.
TEST(ReportTest, FixedNllVector) {
  Aggregator agg;
  const std::vector<float> a = {-1.0f, -2.0f};
  const std::vector<float> b = {-3.0f, -4.0f};
  agg.AddWindow(-3.0, a, 2);
  agg.AddWindow(-7.0, b, 3);
  EXPECT_EQ(agg.num_scored(), 4);
  EXPECT_EQ(agg.num_windows(), 2);
  EXPECT_NEAR(agg.NllMean(), 2.5, 1e-12);
  EXPECT_NEAR(agg.Ppl(), 12.182493960703473, 12.18 * 1e-12);
  EXPECT_NEAR(agg.NllStderr(), 0.6454972243679028, 1e-12);
  EXPECT_NEAR(agg.BitsPerByte(), 2.8853900817779268, 1e-12);

  Report report;
  FillResults(agg, &report);
  report.method = Params(Method::kHf, 512, 256, 100);
  report.tokens_per_second = 1234.5;
  const nlohmann::json j = ReportToJson(report);
  EXPECT_NEAR(j["ppl"].get<double>(), 12.182493960703473, 1e-11);
  EXPECT_EQ(j["num_scored"].get<int64_t>(), 4);
  EXPECT_EQ(j["num_windows"].get<int64_t>(), 2);
  EXPECT_EQ(j["num_bytes"].get<int64_t>(), 5);
  EXPECT_EQ(j["method"]["name"], "hf");
  EXPECT_EQ(j["method"]["ctx"].get<int64_t>(), 512);
  EXPECT_EQ(j["method"]["stride"].get<int64_t>(), 256);
  EXPECT_EQ(j["method"]["max_windows"].get<int64_t>(), 100);
  for (const char* key : {"nll_mean", "nll_stderr", "bits_per_byte", "wall_seconds", "tokens_per_second",
                          "model_fingerprint", "tokenizer_fingerprint"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  // PPL's error is first order in the NLL's: ppl * nll_stderr.
  EXPECT_NEAR(j["ppl_stderr"].get<double>(), 12.182493960703473 * 0.6454972243679028, 1e-11);
  EXPECT_NE(ReportToText(report).find("ppl            12.182494 +- 7.863766"), std::string::npos)
      << ReportToText(report);
}

// Unknown byte counts make bits-per-byte unknown (JSON null); one token has no stderr.
TEST(ReportTest, UnknownBytesAndSingleToken) {
  Aggregator agg;
  const std::vector<float> a = {-0.5f};
  agg.AddWindow(-0.5, a, -1);
  EXPECT_TRUE(std::isnan(agg.BitsPerByte()));
  EXPECT_EQ(agg.NllStderr(), 0.0);
  Report report;
  FillResults(agg, &report);
  EXPECT_TRUE(ReportToJson(report)["bits_per_byte"].is_null());
  EXPECT_TRUE(ReportToJson(report)["num_bytes"].is_null());
}

// The method block names what each method does with BOS.
TEST(ReportTest, MethodBlock) {
  Report report;
  report.method = Params(Method::kChunks, 512, 0);
  report.prefix_id = 1;
  nlohmann::json m = ReportToJson(report)["method"];
  EXPECT_EQ(m["prefix_id"].get<int32_t>(), 1);
  EXPECT_FALSE(m.contains("add_bos"));
  EXPECT_FALSE(m.contains("stride"));
  report.method = Params(Method::kLlamaCpp, 512, 0);
  report.add_bos = true;
  m = ReportToJson(report)["method"];
  EXPECT_TRUE(m["add_bos"].get<bool>());
  EXPECT_TRUE(m["first_token_replaced_by_bos"].get<bool>());
  EXPECT_FALSE(m.contains("prefix_id"));
}

// Bytes of scored positions only (llamacpp scores from ctx/2 + 1).
TEST(ReportTest, ScoredBytes) {
  const auto w = LlamaCppWindows(TenTokens(), Params(Method::kLlamaCpp, 8, 0), true, kBos);
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(ScoredBytes(w[0]), 6 + 7 + 8);
  Window none;
  none.tokens = {1, 2};
  EXPECT_EQ(ScoredBytes(none), -1);
}

TEST(ProgressTest, FormatLine) {
  EXPECT_EQ(Progress::FormatLine(50, 100, 12345.0, 67.0, 12.34567),
            "[############            ] 50/100 windows  12.3k tok/s  ETA 0:01:07  ppl 12.3457");
  EXPECT_EQ(Progress::FormatLine(0, 10, 0.0, std::numeric_limits<double>::quiet_NaN(), 0.0),
            "[                        ] 0/10 windows  0 tok/s  ETA --:--:--  ppl 0.0000");
}

// The ETA runs at this run's pace: 80 windows resumed from a journal, 10 scored in 5 s, 10 left: 5 s
// (counting the resumed ones as this run's would say 10 / (90 / 5) = 0.56 s).
TEST(ProgressTest, EtaCountsOnlyThisRunsWindows) {
  EXPECT_DOUBLE_EQ(Progress::EtaSeconds(90, 80, 100, 5.0), 5.0);
  EXPECT_DOUBLE_EQ(Progress::EtaSeconds(50, 0, 100, 10.0), 10.0);
  EXPECT_TRUE(std::isnan(Progress::EtaSeconds(80, 80, 100, 5.0)));  // nothing scored yet by this run
  EXPECT_TRUE(std::isnan(Progress::EtaSeconds(0, 0, 100, 0.0)));
}

}  // namespace
}  // namespace ppl
}  // namespace scored
