// The stored reference file of scored-ppl --save_reference (client/ppl/reference_file.h): an exact round trip
// written out of order, the size formula, FILE only after Finish, resumption of FILE.partial (a torn last
// block cut off, a corrupt one too), refusals naming the field (another run's partial file, a run that does
// not match the file), and a corrupt or truncated complete file refused as DATA_LOSS. No server.
#include "client/ppl/reference_file.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace scored {
namespace ppl {
namespace {

using ::testing::HasSubstr;

constexpr int32_t kK = 4;
constexpr int64_t kVocab = 50;

ReferenceHeader Header(int64_t windows, int64_t positions_per_window) {
  ReferenceHeader h;
  h.identity.Add("tokenizer_fingerprint", "abc");
  h.identity.Add("ctx", "128");
  h.identity.Add("windows_sha256", "0123");
  h.model_fingerprint = "r-model";
  h.model_path = "/models/R";
  h.model_format = "dense-bf16";
  h.vocab_size = kVocab;
  h.top_k = kK;
  h.num_windows = windows;
  h.num_positions = windows * positions_per_window;
  return h;
}

// A window of n positions with distinct values (the top-k logprobs descending, their mass below 1).
ReferenceWindow Window(int64_t index, int32_t n) {
  ReferenceWindow w;
  w.window = index;
  w.num_scored = n;
  w.k = kK;
  w.sum_logprob = -1.25 * static_cast<double>(index + 1) - 1e-13;
  std::mt19937 rng(static_cast<uint32_t>(index));
  for (int32_t i = 0; i < n; ++i) {
    w.logprob.push_back(-0.5f - 0.01f * static_cast<float>(rng() % 100));
    w.entropy.push_back(1.0f + 0.001f * static_cast<float>(rng() % 1000));
    for (int32_t j = 0; j < kK; ++j) {
      w.top_ids.push_back(static_cast<int32_t>((index * 7 + i * 3 + j) % kVocab));
      w.top_logprobs.push_back(-1.0f - static_cast<float>(j) - 0.1f * static_cast<float>(i % 5));
    }
  }
  return w;
}

std::string TempPath(const std::string& name) {
  const std::string path = absl::StrCat(::testing::TempDir(), "/reference_file_test.", ::getpid(), ".", name);
  std::remove(path.c_str());
  std::remove((path + ".partial").c_str());
  return path;
}

bool Exists(const std::string& path) { return std::ifstream(path).good(); }

int64_t FileBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  return static_cast<int64_t>(in.tellg());
}

void ExpectSameWindow(const ReferenceWindow& got, const ReferenceWindow& want) {
  EXPECT_EQ(got.window, want.window);
  EXPECT_EQ(got.num_scored, want.num_scored);
  EXPECT_EQ(got.k, want.k);
  EXPECT_EQ(got.sum_logprob, want.sum_logprob);  // bit for bit
  EXPECT_EQ(got.logprob, want.logprob);
  EXPECT_EQ(got.entropy, want.entropy);
  EXPECT_EQ(got.top_ids, want.top_ids);
  EXPECT_EQ(got.top_logprobs, want.top_logprobs);
  ASSERT_EQ(got.tail_mass.size(), static_cast<size_t>(want.num_scored));
  for (int32_t i = 0; i < want.num_scored; ++i) {
    const absl::Span<const float> top(want.top_logprobs.data() + i * kK, kK);
    EXPECT_EQ(got.tail_mass[i], TailMass(top, kVocab)) << i;
  }
}

TEST(ReferenceFileTest, TailMass) {
  const std::vector<float> half = {std::log(0.25f), std::log(0.25f)};
  EXPECT_NEAR(TailMass(half, 10), 0.5, 1e-7);
  EXPECT_EQ(TailMass(half, 2), 0.0);              // k = vocab: nothing left out, whatever the rounding
  const std::vector<float> over = {0.0f, -1.0f};  // mass > 1 from rounding: clamped
  EXPECT_EQ(TailMass(over, 10), 0.0);
  EXPECT_EQ(ReferenceFileBytes(10, 1000, 1024), 16 + 1024 + 10 * 32 + 1000 * (16 + 8192) + 24);
}

TEST(ReferenceFileTest, RoundTripOutOfOrderAndTheFinalNameOnlyAtTheEnd) {
  const std::string path = TempPath("roundtrip");
  const ReferenceHeader header = Header(3, 5);
  {
    auto writer = ReferenceWriter::Open(path, header, nullptr);
    ASSERT_TRUE(writer.ok()) << writer.status();
    for (int64_t i : {2, 0, 1}) ASSERT_TRUE((*writer)->Append(Window(i, 5)).ok());
    EXPECT_FALSE(Exists(path)) << "FILE appeared before Finish";
    EXPECT_EQ((*writer)->Append(Window(1, 5)).code(), absl::StatusCode::kInvalidArgument);  // stored already
    ASSERT_TRUE((*writer)->Finish().ok());
    EXPECT_EQ((*writer)->bytes(), FileBytes(path));
  }
  EXPECT_TRUE(Exists(path));
  EXPECT_FALSE(Exists(path + ".partial"));
  auto file = ReferenceFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  const ReferenceHeader& h = (*file)->header();
  EXPECT_EQ(h.identity.fields, header.identity.fields);
  EXPECT_EQ(h.model_fingerprint, "r-model");
  EXPECT_EQ(h.model_format, "dense-bf16");
  EXPECT_EQ(h.top_k, kK);
  EXPECT_EQ(h.num_positions, 15);
  for (int64_t i = 0; i < 3; ++i) {
    auto w = (*file)->Read(i);
    ASSERT_TRUE(w.ok()) << w.status();
    ExpectSameWindow(*w, Window(i, 5));
  }
  EXPECT_EQ((*file)->Read(3).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE((*file)->CheckRun(header.identity).ok());
  // An existing FILE is never overwritten.
  EXPECT_EQ(ReferenceWriter::Open(path, header, nullptr).status().code(), absl::StatusCode::kAlreadyExists);
  std::remove(path.c_str());
}

TEST(ReferenceFileTest, ARunThatDiffersIsRefusedNamingTheField) {
  const std::string path = TempPath("mismatch");
  const ReferenceHeader header = Header(1, 3);
  {
    auto writer = ReferenceWriter::Open(path, header, nullptr);
    ASSERT_TRUE(writer.ok());
    ASSERT_TRUE((*writer)->Append(Window(0, 3)).ok());
    ASSERT_TRUE((*writer)->Finish().ok());
  }
  auto file = ReferenceFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  JournalIdentity other = header.identity;
  other.fields[1].second = "64";
  const absl::Status status = (*file)->CheckRun(other);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(status.message()), HasSubstr("ctx '128' but this run has '64'"));
  other = header.identity;
  other.fields[0].second = "xyz";
  EXPECT_THAT(std::string((*file)->CheckRun(other).message()), HasSubstr("tokenizer_fingerprint 'abc'"));
  std::remove(path.c_str());
}

TEST(ReferenceFileTest, APartialFileResumesAndATornTailIsCutOff) {
  const std::string path = TempPath("resume");
  const ReferenceHeader header = Header(4, 6);
  {
    auto writer = ReferenceWriter::Open(path, header, nullptr);
    ASSERT_TRUE(writer.ok());
    ASSERT_TRUE((*writer)->Append(Window(3, 6)).ok());
    ASSERT_TRUE((*writer)->Append(Window(1, 6)).ok());
  }  // "killed": no Finish
  const int64_t whole = FileBytes(path + ".partial");
  {
    // A torn third block: its first 40 bytes only.
    std::ofstream out(path + ".partial", std::ios::binary | std::ios::app);
    out.write("WNDW\0\0\0\0\0\0\0\0\6\0\0\0\4\0\0\0xxxxxxxxxxxxxxxxxxxx", 40);
  }
  std::string notes;
  {
    char* buf = nullptr;
    size_t size = 0;
    std::FILE* note = open_memstream(&buf, &size);
    auto writer = ReferenceWriter::Open(path, header, note);
    std::fclose(note);
    notes.assign(buf, size);
    std::free(buf);
    ASSERT_TRUE(writer.ok()) << writer.status();
    EXPECT_EQ(FileBytes(path + ".partial"), whole);
    ASSERT_EQ((*writer)->resumed().size(), 2u);
    ExpectSameWindow((*writer)->resumed().at(1), Window(1, 6));
    ExpectSameWindow((*writer)->resumed().at(3), Window(3, 6));
    EXPECT_EQ((*writer)->Finish().code(), absl::StatusCode::kFailedPrecondition);  // 2 windows missing
    ASSERT_TRUE((*writer)->Append(Window(0, 6)).ok());
    ASSERT_TRUE((*writer)->Append(Window(2, 6)).ok());
    ASSERT_TRUE((*writer)->Finish().ok());
  }
  EXPECT_THAT(notes, HasSubstr("cutting off its last 40 bytes"));
  EXPECT_THAT(notes, HasSubstr("2 of 4 windows already stored"));
  auto file = ReferenceFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  for (int64_t i = 0; i < 4; ++i) ExpectSameWindow(*(*file)->Read(i), Window(i, 6));
  std::remove(path.c_str());
}

TEST(ReferenceFileTest, APartialFileOfAnotherRunIsRefused) {
  const std::string path = TempPath("other_partial");
  {
    auto writer = ReferenceWriter::Open(path, Header(2, 3), nullptr);
    ASSERT_TRUE(writer.ok());
    ASSERT_TRUE((*writer)->Append(Window(0, 3)).ok());
  }
  ReferenceHeader other = Header(2, 3);
  other.top_k = 8;
  const absl::Status status = ReferenceWriter::Open(path, other, nullptr).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(status.message()), HasSubstr("its top_k is '4', this run's '8'"));
  EXPECT_THAT(std::string(status.message()), HasSubstr("delete it to start over"));
  std::remove((path + ".partial").c_str());
}

TEST(ReferenceFileTest, CorruptOrIncompleteFilesAreDataLoss) {
  const std::string path = TempPath("corrupt");
  {
    auto writer = ReferenceWriter::Open(path, Header(2, 3), nullptr);
    ASSERT_TRUE(writer.ok());
    ASSERT_TRUE((*writer)->Append(Window(0, 3)).ok());
    ASSERT_TRUE((*writer)->Append(Window(1, 3)).ok());
    ASSERT_TRUE((*writer)->Finish().ok());
  }
  std::string bytes;
  {
    std::ifstream in(path, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    bytes = ss.str();
  }
  auto write = [&](const std::string& data) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << data;
  };
  // A flipped byte inside window 1's logprobs: the file opens, window 1 fails its checksum.
  std::string flipped = bytes;
  flipped[flipped.size() - 24 - 100] ^= 0x10;
  write(flipped);
  auto file = ReferenceFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_TRUE((*file)->Read(0).ok());
  const absl::Status read = (*file)->Read(1).status();
  EXPECT_EQ(read.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(read.message()), HasSubstr("window 1's block fails its checksum"));
  // Without its trailer (a partial file renamed by hand) or cut short: refused at Open.
  write(bytes.substr(0, bytes.size() - 24));
  EXPECT_EQ(ReferenceFile::Open(path).status().code(), absl::StatusCode::kDataLoss);
  write(bytes.substr(0, bytes.size() - 60));
  EXPECT_EQ(ReferenceFile::Open(path).status().code(), absl::StatusCode::kDataLoss);
  write("not a reference file at all");
  EXPECT_THAT(std::string(ReferenceFile::Open(path).status().message()), HasSubstr("SCOREDRF"));
  std::remove(path.c_str());
  EXPECT_EQ(ReferenceFile::Open(path).status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace ppl
}  // namespace scored
