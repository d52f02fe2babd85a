// Tokenizer::Encode under EncodeLimits, for every format of the golden tests: the ids are bit-identical
// when no bound is hit; a token limit stops the encoding shortly after it is passed (OUT_OF_RANGE, not
// after the whole text); a stop predicate is polled during a long text and stops it (CANCELLED).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "engine/tokenizer/tokenizer.h"

namespace scored {
namespace {

using ::testing::HasSubstr;
using Format = Tokenizer::Format;

const std::string kData = SCORED_DATA_DIR;

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// The first 256 KiB of wiki.test.raw, cut at a line end (a few ten thousand tokens in every format).
const std::string& Text() {
  static const std::string* text = [] {
    std::string all = ReadAll(kData + "/wikitext-2-raw/wiki.test.raw");
    all.resize(all.find('\n', 256 << 10) + 1);
    return new std::string(std::move(all));
  }();
  return *text;
}

// "... stopped after N tokens)" -> N (-1 if absent).
int64_t StoppedAfter(const absl::Status& status) {
  const std::string message(status.message());
  const size_t at = message.find("after ");
  if (at == std::string::npos) return -1;
  const size_t end = message.find(' ', at + 6);
  int64_t n = -1;
  if (!absl::SimpleAtoi(message.substr(at + 6, end - at - 6), &n)) return -1;
  return n;
}

struct Source {
  const char* name;
  const char* dir;  // under SCORED_DATA_DIR
  Format format;
};

const Source kSources[] = {
    {"tok512_spm", "stories260K-hf", Format::kAuto},
    {"llama2_spm", "tokenizers/llama2", Format::kSentencePiece},
    {"llama2_tokjson", "tokenizers/llama2", Format::kAuto},
    {"gpt2", "tokenizers/gpt2", Format::kAuto},
    {"qwen2_5", "models-configs/qwen2.5-0.5b-instruct", Format::kAuto},
    {"llama3_tiktoken", "tokenizers/llama3", Format::kAuto},
};

class EncodeLimitsTest : public ::testing::TestWithParam<Source> {
 protected:
  // Each format's tokenizer and Encode(Text()) are made once and shared by its tests (loading the large
  // vocabularies and encoding 256 KiB six times over was most of this test's time under ASan).
  struct Loaded {
    std::unique_ptr<Tokenizer> tokenizer;
    std::vector<int32_t> full;
  };

  void SetUp() override {
    static auto* loaded = new std::map<std::string, Loaded>();
    auto it = loaded->find(GetParam().name);
    if (it == loaded->end()) {
      auto t = Tokenizer::Load(kData + "/" + GetParam().dir, GetParam().format);
      ASSERT_TRUE(t.ok()) << t.status();
      auto full = (*t)->Encode(Text());
      ASSERT_TRUE(full.ok()) << full.status();
      it = loaded->emplace(GetParam().name, Loaded{std::move(t).value(), std::move(full).value()}).first;
    }
    tokenizer_ = it->second.tokenizer.get();
    full_ = it->second.full;
    ASSERT_GT(full_.size(), 20000u);
  }

  const Tokenizer* tokenizer_ = nullptr;
  std::vector<int32_t> full_;  // Encode(Text()) without limits
};

TEST_P(EncodeLimitsTest, IdsUnchangedWhenNoLimitIsHit) {
  std::atomic<int> polls{0};
  EncodeLimits limits;
  limits.max_tokens = static_cast<int64_t>(full_.size());  // exactly the text's count: not passed
  limits.stop = [&polls] {
    polls.fetch_add(1);
    return false;
  };
  auto ids = tokenizer_->Encode(Text(), limits);
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_EQ(*ids, full_);
  // Polled along the way, not only at the start: at least once per kPollWords words.
  EXPECT_GE(polls.load(), static_cast<int>(full_.size() / (8 * EncodeLimits::kPollWords)));
}

TEST_P(EncodeLimitsTest, TokenLimitStopsRightAfterItIsPassed) {
  EncodeLimits limits;
  limits.max_tokens = static_cast<int64_t>(full_.size()) - 1;
  auto ids = tokenizer_->Encode(Text(), limits);
  ASSERT_FALSE(ids.ok());
  EXPECT_EQ(ids.status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_THAT(ids.status().message(), HasSubstr(absl::StrCat("more than ", full_.size() - 1, " tokens")));

  // A small limit on a long text: the encoding ends within a word of the limit (at the word that passes
  // it, or before a word that cannot fit), i.e. long before the text's own tens of thousands of tokens.
  limits.max_tokens = 100;
  ids = tokenizer_->Encode(Text(), limits);
  ASSERT_FALSE(ids.ok());
  EXPECT_EQ(ids.status().code(), absl::StatusCode::kOutOfRange) << ids.status();
  EXPECT_THAT(ids.status().message(), HasSubstr("more than 100 tokens"));
  const int64_t stopped_after = StoppedAfter(ids.status());
  EXPECT_GT(stopped_after, 50) << ids.status();
  EXPECT_LT(stopped_after, 200) << ids.status();

  // max_tokens 0 refuses any text with a token; an empty text passes.
  limits.max_tokens = 0;
  EXPECT_EQ(tokenizer_->Encode("a", limits).status().code(), absl::StatusCode::kOutOfRange);
  auto empty = tokenizer_->Encode("", limits);
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_TRUE(empty->empty());
}

TEST_P(EncodeLimitsTest, StopPredicateCancelsMidText) {
  // True from the fifth poll on: the encoding stops part-way, with fewer ids than the whole text.
  int polls = 0;
  EncodeLimits limits;
  limits.stop = [&polls] { return ++polls >= 5; };
  auto ids = tokenizer_->Encode(Text(), limits);
  ASSERT_FALSE(ids.ok());
  EXPECT_EQ(ids.status().code(), absl::StatusCode::kCancelled) << ids.status();
  EXPECT_EQ(polls, 5);
  const int64_t stopped_after = StoppedAfter(ids.status());
  EXPECT_GE(stopped_after, 0) << ids.status();
  EXPECT_LT(stopped_after, static_cast<int64_t>(full_.size()) / 2) << ids.status();

  // Already stopped: nothing is encoded.
  limits.stop = [] { return true; };
  ids = tokenizer_->Encode(Text(), limits);
  ASSERT_FALSE(ids.ok());
  EXPECT_EQ(ids.status().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(StoppedAfter(ids.status()), 0) << ids.status();
}

// A text that is one word (no spaces): the stop predicate is polled inside the word's merges too, so a long
// word is no shelter from it.
TEST_P(EncodeLimitsTest, StopPolledInsideOneLongWord) {
  // The letters of the text, twice over (about 400 KiB): English letter sequences, many merges (one copy
  // gives the 512-entry vocabulary only 6 polls, two give it 10 and the large vocabularies ~40).
  std::string word;
  for (int i = 0; i < 2; ++i) {
    for (const char c : Text()) {
      if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) word.push_back(c);
    }
  }
  int polls = 0;
  EncodeLimits limits;
  limits.stop = [&polls] {
    ++polls;
    return false;
  };
  auto ids = tokenizer_->Encode(word, limits);
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_EQ(*ids, tokenizer_->Encode(word).value());
  const int total_polls = polls;
  // A handful of polls at most come from the word level; the rest from within the merges.
  EXPECT_GE(total_polls, 8);

  polls = 0;
  limits.stop = [&polls, total_polls] { return ++polls >= total_polls - 2; };
  ids = tokenizer_->Encode(word, limits);
  ASSERT_FALSE(ids.ok());
  EXPECT_EQ(ids.status().code(), absl::StatusCode::kCancelled) << ids.status();
}

// A word that cannot fit the token limit is not encoded at all: each id stands for at most the longest
// vocabulary entry, so its length alone says it has too many tokens.
TEST_P(EncodeLimitsTest, LongWordOverTheTokenLimitIsNotEncoded) {
  std::string word;
  for (const char c : Text()) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) word.push_back(c);
  }
  int polls = 0;
  EncodeLimits limits;
  limits.max_tokens = 100;
  limits.stop = [&polls] {
    ++polls;
    return false;
  };
  auto ids = tokenizer_->Encode(word, limits);
  ASSERT_FALSE(ids.ok());
  EXPECT_EQ(ids.status().code(), absl::StatusCode::kOutOfRange) << ids.status();
  EXPECT_EQ(StoppedAfter(ids.status()), 0) << ids.status();
  EXPECT_LE(polls, 4);  // the whole-text passes only, no merges
  // The same word within a limit its length allows: encoded as without limits.
  const auto full = tokenizer_->Encode(word).value();
  limits.max_tokens = static_cast<int64_t>(full.size());
  ids = tokenizer_->Encode(word, limits);
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_EQ(*ids, full);
}

// Stopped from another thread (as a server cancels a call): a flag set while a long text is encoded.
TEST_P(EncodeLimitsTest, StopFromAnotherThread) {
  std::string text;
  for (int i = 0; i < 16; ++i) text += Text();  // 4 MiB
  std::atomic<bool> stop{false};
  absl::Notification started;
  EncodeLimits limits;
  limits.stop = [&] {
    if (!started.HasBeenNotified()) started.Notify();
    return stop.load();
  };
  absl::StatusOr<std::vector<int32_t>> ids;
  std::thread encoder([&] { ids = tokenizer_->Encode(text, limits); });
  started.WaitForNotification();  // the first poll runs before any work
  stop.store(true);
  encoder.join();
  ASSERT_FALSE(ids.ok());
  EXPECT_EQ(ids.status().code(), absl::StatusCode::kCancelled) << ids.status();
  EXPECT_LT(StoppedAfter(ids.status()), static_cast<int64_t>(full_.size()) * 16);
}

INSTANTIATE_TEST_SUITE_P(Formats, EncodeLimitsTest, ::testing::ValuesIn(kSources),
                         [](const ::testing::TestParamInfo<Source>& info) { return info.param.name; });

}  // namespace
}  // namespace scored
