// The scored-ppl journal (client/ppl/journal.h): exact round trip of records, resumption, a torn last
// line, and a header of another run. Real files in the test's temporary folder; no server.
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
  r.sum_logprob = -1234.5678901234567 / 3.0 - static_cast<double>(window);
  r.logprobs = {-0.1f / 3.0f, -7.123456789f, -std::numeric_limits<float>::denorm_min(),
                -std::numeric_limits<float>::max(), -1e-30f * static_cast<float>(window + 1)};
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

TEST(JournalTest, CorruptMiddleRecordIsDataLoss) {
  const std::string path = ::testing::TempDir() + "/journal_test_corrupt.jsonl";
  std::remove(path.c_str());
  {
    auto j = Journal::Open(path, Identity("512"));
    ASSERT_TRUE(j.ok()) << j.status();
  }
  {
    std::ofstream out(path, std::ios::binary | std::ios::app);
    out << "garbage\n" << FormatRecordLine(Record(0)) << "\n";
  }
  auto j = Journal::Open(path, Identity("512"));
  ASSERT_FALSE(j.ok());
  EXPECT_EQ(j.status().code(), absl::StatusCode::kDataLoss) << j.status();
}

}  // namespace
}  // namespace ppl
}  // namespace scored
