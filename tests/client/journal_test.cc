// The scored-ppl journal (client/ppl/journal.h): exact round trip of records, resumption, a torn last
// line, a header of another run, records that fail their checks, paths that are not regular files. Real files
// in the test's temporary folder; no server.
#include "client/ppl/journal.h"

#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace scored {
namespace ppl {
namespace {

std::string ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream buf;
  buf << in.rdbuf();
  return buf.str();
}

JournalIdentity Identity(const std::string& ctx) {
  JournalIdentity id;
  id.Add("method", "chunks");
  id.Add("ctx", ctx);
  id.Add("model_fingerprint", "abc");
  return id;
}

JournalRecord Record(int64_t window) {
  JournalRecord r;
  r.window = window;
  // Values whose shortest decimal forms are long: the text must still round-trip bit for bit.
  r.logprobs = {-0.1f / 3.0f, -7.123456789f, -std::numeric_limits<float>::denorm_min(),
                -1234.5678f / 3.0f - static_cast<float>(window), -1e-30f * static_cast<float>(window + 1)};
  for (const float v : r.logprobs) r.sum_logprob += v;  // what the server sends: the sum in double
  r.num_bytes = 17 + window;
  return r;
}

void ExpectSameRecord(const JournalRecord& a, const JournalRecord& b) {
  EXPECT_EQ(a.window, b.window);
  EXPECT_EQ(a.sum_logprob, b.sum_logprob);  // bitwise: exact round trip
  ASSERT_EQ(a.logprobs.size(), b.logprobs.size());
  for (size_t i = 0; i < a.logprobs.size(); ++i) EXPECT_EQ(a.logprobs[i], b.logprobs[i]) << i;
  EXPECT_EQ(a.num_bytes, b.num_bytes);
}

TEST(JournalTest, RecordLineRoundTripsExactly) {
  for (int64_t w : {0, 1, 299}) {
    auto parsed = ParseRecordLine(FormatRecordLine(Record(w)));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    ExpectSameRecord(*parsed, Record(w));
  }
  JournalRecord special = Record(5);
  special.logprobs.push_back(-std::numeric_limits<float>::infinity());
  special.sum_logprob = -std::numeric_limits<double>::infinity();
  auto parsed = ParseRecordLine(FormatRecordLine(special));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ExpectSameRecord(*parsed, special);
  EXPECT_FALSE(ParseRecordLine("{\"w\":3,\"s\":-1.5,\"n\":2,\"b\":4,\"lp\":[-1").ok());
  EXPECT_FALSE(ParseRecordLine("{\"w\":3,\"s\":-1.5,\"n\":3,\"b\":4,\"lp\":[-1,-2]}").ok());
  // Without its checksum a record line is not one.
  const std::string line = FormatRecordLine(Record(1));
  EXPECT_FALSE(ParseRecordLine(line.substr(0, line.rfind(",\"c\":")) + "}").ok());
}

TEST(JournalTest, ResumesRecordsAndToleratesATornLastLine) {
  const std::string path = ::testing::TempDir() + "/journal_test_torn.jsonl";
  std::remove(path.c_str());
  {
    auto j = Journal::Open(path, Identity("512"));
    ASSERT_TRUE(j.ok()) << j.status();
    EXPECT_TRUE((*j)->resumed().empty());
    for (int64_t w : {2, 0, 1}) ASSERT_TRUE((*j)->Append(Record(w)).ok());
    ASSERT_TRUE((*j)->Close().ok());
  }
  const std::string complete = ReadText(path);
  {
    // A crash in the middle of a write: half a record, no newline.
    std::ofstream out(path, std::ios::binary | std::ios::app);
    const std::string torn = FormatRecordLine(Record(3));
    out << torn.substr(0, torn.size() / 2);
  }
  {
    auto j = Journal::Open(path, Identity("512"));
    ASSERT_TRUE(j.ok()) << j.status();
    ASSERT_EQ((*j)->resumed().size(), 3u);
    for (int64_t w : {0, 1, 2}) ExpectSameRecord((*j)->resumed().at(w), Record(w));
    EXPECT_EQ(ReadText(path), complete);  // the torn tail was cut off
    ASSERT_TRUE((*j)->Append(Record(3)).ok());
  }
  auto j = Journal::Open(path, Identity("512"));
  ASSERT_TRUE(j.ok()) << j.status();
  ASSERT_EQ((*j)->resumed().size(), 4u);
  ExpectSameRecord((*j)->resumed().at(3), Record(3));
}

TEST(JournalTest, HeaderOfAnotherRunNamesTheField) {
  const std::string path = ::testing::TempDir() + "/journal_test_mismatch.jsonl";
  std::remove(path.c_str());
  {
    auto j = Journal::Open(path, Identity("512"));
    ASSERT_TRUE(j.ok()) << j.status();
  }
  auto j = Journal::Open(path, Identity("1024"));
  ASSERT_FALSE(j.ok());
  EXPECT_EQ(j.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(j.status().message().find("'ctx' is '512' there but '1024' now"), std::string::npos)
      << j.status();
}

// Replaces the first occurrence of `from` in `text` (which must hold it).
std::string Replace(std::string text, const std::string& from, const std::string& to) {
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return at == std::string::npos ? text : text.replace(at, from.size(), to);
}

// What a note_out stream received.
std::string Notes(std::FILE* f) {
  std::fflush(f);
  std::rewind(f);
  std::string out;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof(buf), f)) > 0;) out.append(buf, n);
  return out;
}

// A middle line that is not a record, a record edited into other valid JSON (its checksum no longer
// matches), and one edited with its checksum recomputed (its sum is no longer that of its values): none is
// resumed, each is named on note_out with its window, and the good records are; --journal_strict refuses.
TEST(JournalTest, RecordsThatFailTheirChecksAreScoredAgain) {
  const std::string path = ::testing::TempDir() + "/journal_test_corrupt.jsonl";
  std::remove(path.c_str());
  {
    auto j = Journal::Open(path, Identity("512"));
    ASSERT_TRUE(j.ok()) << j.status();
  }
  JournalRecord halved = Record(2);
  halved.sum_logprob /= 2;
  const std::string line1 = FormatRecordLine(Record(1));
  const std::string edited = Replace(line1, "\"n\":5", "\"n\":5,\"x\":0");  // other valid JSON
  {
    std::ofstream out(path, std::ios::binary | std::ios::app);
    out << "garbage\n"
        << FormatRecordLine(Record(0)) << "\n"
        << edited << "\n"
        << FormatRecordLine(halved) << "\n"
        << FormatRecordLine(Record(3)) << "\n";
  }
  std::FILE* notes = std::tmpfile();
  ASSERT_NE(notes, nullptr);
  auto j = Journal::Open(path, Identity("512"), 1, false, notes);
  ASSERT_TRUE(j.ok()) << j.status();
  EXPECT_EQ((*j)->resumed().size(), 2u);
  EXPECT_EQ((*j)->resumed().count(0), 1u);
  EXPECT_EQ((*j)->resumed().count(3), 1u);
  const std::string said = Notes(notes);
  std::fclose(notes);
  EXPECT_NE(said.find("record at byte"), std::string::npos) << said;
  EXPECT_NE(said.find("record of window 1 at byte"), std::string::npos) << said;
  EXPECT_NE(said.find("checksum does not match"), std::string::npos) << said;
  EXPECT_NE(said.find("record of window 2 at byte"), std::string::npos) << said;
  EXPECT_NE(said.find("is not the sum of its values"), std::string::npos) << said;
  EXPECT_NE(said.find("its window is scored again"), std::string::npos) << said;
  j->reset();
  auto strict = Journal::Open(path, Identity("512"), 1, true);
  ASSERT_FALSE(strict.ok());
  EXPECT_EQ(strict.status().code(), absl::StatusCode::kDataLoss) << strict.status();
  EXPECT_NE(strict.status().message().find("--journal_strict"), std::string::npos) << strict.status();
}

TEST(JournalTest, NotARegularFileOrAnOlderFormatIsRefused) {
  for (const std::string& path : {std::string("/dev/zero"), ::testing::TempDir()}) {
    auto j = Journal::Open(path, Identity("512"));
    ASSERT_FALSE(j.ok()) << path;
    EXPECT_EQ(j.status().code(), absl::StatusCode::kInvalidArgument) << j.status();
    EXPECT_NE(j.status().message().find("is not a regular file"), std::string::npos) << j.status();
  }
  const std::string path = ::testing::TempDir() + "/journal_test_v1.jsonl";
  std::ofstream(path, std::ios::binary) << "{\"journal\": \"scored-ppl/1\", \"method\": \"chunks\"}\n";
  auto j = Journal::Open(path, Identity("512"));
  ASSERT_FALSE(j.ok());
  EXPECT_EQ(j.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(j.status().message().find("is of format scored-ppl/1"), std::string::npos) << j.status();
}

}  // namespace
}  // namespace ppl
}  // namespace scored
