// The data file checks of scored-ppl (client/ppl/dataset.h): a regular file, at most max_bytes, non-empty,
// valid UTF-8 with the offset of the first bad sequence named. Before them, `--data /dev/zero` read forever
// and `--data /tmp` read as empty text ("no window for 1 tokens"). Gzip files are read as their text (a
// `.jsonl.gz` or C4's `.json.gz` gave "not valid UTF-8 ... byte 0x8b" before); Parquet and other
// containers are refused saying how to convert them.
#include "client/ppl/dataset.h"

#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace scored {
namespace ppl {
namespace {

using ::testing::HasSubstr;

std::string WriteFile(const std::string& name, const std::string& bytes) {
  const std::string path = absl::StrCat(::testing::TempDir(), "/dataset_test_", ::getpid(), "_", name);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
  return path;
}

// `text` as one gzip member (zlib's deflate with the gzip wrapper, as `gzip` writes it).
std::string Gzip(const std::string& text) {
  z_stream z{};
  EXPECT_EQ(deflateInit2(&z, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY), Z_OK);
  std::string out(deflateBound(&z, text.size()) + 64, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(text.data()));
  z.avail_in = static_cast<uInt>(text.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&z, Z_FINISH), Z_STREAM_END);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

TEST(FirstInvalidUtf8Test, ValidTextIsMinusOne) {
  EXPECT_EQ(FirstInvalidUtf8(""), -1);
  EXPECT_EQ(FirstInvalidUtf8("plain ascii\n"), -1);
  // 2, 3 and 4 bytes, the edges of each range: U+0080, U+07FF, U+0800, U+D7FF, U+E000, U+FFFF,
  // U+10000, U+10FFFF; and a BOM.
  EXPECT_EQ(FirstInvalidUtf8("\xc2\x80\xdf\xbf\xe0\xa0\x80\xed\x9f\xbf\xee\x80\x80\xef\xbf\xbf"
                             "\xf0\x90\x80\x80\xf4\x8f\xbf\xbf\xef\xbb\xbf"),
            -1);
  EXPECT_EQ(FirstInvalidUtf8("caf\xc3\xa9 \xe2\x80\x94 \xf0\x9f\x98\x80"), -1);
}

TEST(FirstInvalidUtf8Test, NamesTheOffsetOfTheFirstBadSequence) {
  EXPECT_EQ(FirstInvalidUtf8("ab\x80"), 2);              // stray continuation byte
  EXPECT_EQ(FirstInvalidUtf8("abc\xc3"), 3);             // truncated at the end
  EXPECT_EQ(FirstInvalidUtf8("a\xc3(b"), 1);             // continuation missing
  EXPECT_EQ(FirstInvalidUtf8("\xe2\x82"), 0);            // truncated 3-byte sequence
  EXPECT_EQ(FirstInvalidUtf8("ok \xc0\xaf"), 3);         // overlong '/'
  EXPECT_EQ(FirstInvalidUtf8("\xc1\xbf"), 0);            // overlong
  EXPECT_EQ(FirstInvalidUtf8("x\xe0\x80\xaf"), 1);       // overlong 3-byte
  EXPECT_EQ(FirstInvalidUtf8("xy\xf0\x80\x80\xaf"), 2);  // overlong 4-byte
  EXPECT_EQ(FirstInvalidUtf8("\xed\xa0\x80"), 0);        // surrogate U+D800
  EXPECT_EQ(FirstInvalidUtf8("\xf4\x90\x80\x80"), 0);    // U+110000
  EXPECT_EQ(FirstInvalidUtf8("\xf5\x80\x80\x80"), 0);
  EXPECT_EQ(FirstInvalidUtf8("abc\xff"), 3);
  EXPECT_EQ(FirstInvalidUtf8(std::string("a\0b\xfe", 4)), 3);  // NUL is valid UTF-8
  EXPECT_EQ(FirstInvalidUtf8("\xc3\xa9\xe2\x80\x94\xf0\x9f\x98"), 5);
}

TEST(ReadDataFileTest, ReadsARegularFile) {
  const std::string text = "= Title =\n\ncaf\xc3\xa9\n";
  const std::string path = WriteFile("ok.raw", text);
  absl::StatusOr<std::string> got = ReadDataFile(path, kDefaultMaxDataBytes);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, text);
  // Exactly max_bytes is accepted; one byte less is not.
  EXPECT_TRUE(ReadDataFile(path, static_cast<int64_t>(text.size())).ok());
  absl::StatusOr<std::string> over = ReadDataFile(path, static_cast<int64_t>(text.size()) - 1);
  EXPECT_EQ(over.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(over.status().message(), HasSubstr("more than --max_data_bytes"));
  EXPECT_THAT(over.status().message(), HasSubstr(path));
  // Through a symlink.
  const std::string link = absl::StrCat(::testing::TempDir(), "/dataset_test_", ::getpid(), "_link.raw");
  std::remove(link.c_str());
  ASSERT_EQ(::symlink(path.c_str(), link.c_str()), 0);
  EXPECT_TRUE(ReadDataFile(link, kDefaultMaxDataBytes).ok());
}

TEST(ReadDataFileTest, RefusesDevicesAtOnce) {
  const absl::Time start = absl::Now();
  absl::StatusOr<std::string> zero = ReadDataFile("/dev/zero", kDefaultMaxDataBytes);
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_EQ(zero.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(zero.status().message(), HasSubstr("/dev/zero is a character device"));
  // Through LoadDataset too (what scored-ppl calls).
  absl::StatusOr<Dataset> ds = LoadDataset("/dev/zero", Format::kText, "", "text");
  EXPECT_EQ(ds.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ReadDataFileTest, RefusesADirectory) {
  absl::StatusOr<std::string> dir = ReadDataFile(::testing::TempDir(), kDefaultMaxDataBytes);
  EXPECT_EQ(dir.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(dir.status().message(), HasSubstr("is a directory"));
}

TEST(ReadDataFileTest, RefusesAFifoWithoutBlocking) {
  const std::string fifo = absl::StrCat(::testing::TempDir(), "/dataset_test_", ::getpid(), "_fifo");
  std::remove(fifo.c_str());
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  absl::StatusOr<std::string> got = ReadDataFile(fifo, kDefaultMaxDataBytes);  // no writer: must not wait
  EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(got.status().message(), HasSubstr("is a FIFO"));
  std::remove(fifo.c_str());
}

TEST(ReadDataFileTest, RefusesMissingAndEmptyFiles) {
  absl::StatusOr<std::string> missing =
      ReadDataFile(::testing::TempDir() + "/dataset_test_nonexistent", kDefaultMaxDataBytes);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  absl::StatusOr<std::string> empty = ReadDataFile(WriteFile("empty.txt", ""), kDefaultMaxDataBytes);
  EXPECT_EQ(empty.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(empty.status().message(), HasSubstr("is empty"));
}

TEST(ReadDataFileTest, RefusesInvalidUtf8NamingTheOffset) {
  std::string text(5000, 'a');
  text[4321] = '\xff';
  absl::StatusOr<std::string> got = ReadDataFile(WriteFile("bad.txt", text), kDefaultMaxDataBytes);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(got.status().message(), HasSubstr("not valid UTF-8"));
  EXPECT_THAT(got.status().message(), HasSubstr("byte offset 4321 (byte 0xff)"));
  // Latin-1 text (a common mistake): the first accented letter.
  absl::StatusOr<std::string> latin1 =
      ReadDataFile(WriteFile("latin1.txt", "na\xefve"), kDefaultMaxDataBytes);
  EXPECT_THAT(latin1.status().message(), HasSubstr("byte offset 2 (byte 0xef)"));
}

TEST(ReadDataFileTest, GzipIsReadAsItsText) {
  const std::string jsonl = "{\"text\": \"Once upon a time.\"}\n{\"text\": \"The end.\"}\n";
  const std::string path = WriteFile("c4-train.00000-of-01024.json.gz", Gzip(jsonl));
  EXPECT_EQ(FormatForPath(path), Format::kJsonl);
  EXPECT_EQ(FormatForPath("wiki.test.raw.gz"), Format::kWikiText);
  EXPECT_EQ(FormatForPath("notes.txt.gz"), Format::kText);
  absl::StatusOr<std::string> got = ReadDataFile(path, kDefaultMaxDataBytes);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, jsonl);
  absl::StatusOr<Dataset> dataset = LoadDataset(path, FormatForPath(path), "", "text");
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  EXPECT_THAT(dataset->documents, ::testing::ElementsAre("Once upon a time.", "The end."));
  // Concatenated members (`cat a.gz b.gz`) read as `zcat` reads them: one text after the other.
  got =
      ReadDataFile(WriteFile("two.txt.gz", Gzip("first part, ") + Gzip("second part")), kDefaultMaxDataBytes);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "first part, second part");
}

TEST(ReadDataFileTest, GzipIsBoundedAndChecked) {
  // 4 MiB of one letter compress to a few KiB: --max_data_bytes bounds the text, not the file.
  const std::string bomb = Gzip(std::string(4 << 20, 'a'));
  ASSERT_LT(bomb.size(), 64u << 10);
  absl::StatusOr<std::string> got = ReadDataFile(WriteFile("bomb.txt.gz", bomb), 1 << 20);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(got.status().message(), HasSubstr("decompresses to more than --max_data_bytes 1048576"));
  // A truncated member and corrupt data name the file and say it is not valid gzip.
  const std::string whole = Gzip(std::string(100000, 'b') + "end");
  got = ReadDataFile(WriteFile("cut.txt.gz", whole.substr(0, whole.size() / 2)), kDefaultMaxDataBytes);
  ASSERT_FALSE(got.ok());
  EXPECT_THAT(got.status().message(), HasSubstr("is not valid gzip"));
  std::string corrupt = whole;
  for (size_t i = 20; i < 40; ++i) corrupt[i] = static_cast<char>(~corrupt[i]);
  got = ReadDataFile(WriteFile("corrupt.txt.gz", corrupt), kDefaultMaxDataBytes);
  ASSERT_FALSE(got.ok());
  EXPECT_THAT(got.status().message(), HasSubstr("is not valid gzip"));
  // Invalid UTF-8 inside is found after decompression, at its offset in the text.
  got = ReadDataFile(WriteFile("latin1.txt.gz", Gzip("na\xefve")), kDefaultMaxDataBytes);
  ASSERT_FALSE(got.ok());
  EXPECT_THAT(got.status().message(), HasSubstr("invalid byte sequence at byte offset 2 (byte 0xef)"));
}

TEST(ReadDataFileTest, ContainersItCannotReadAreNamed) {
  const std::pair<std::string, std::string> cases[] = {
      {"train.parquet", std::string("PAR1\x15\x04\x15", 7)},
      {"train.jsonl.zst", std::string("\x28\xb5\x2f\xfd\x04\x58", 6)},
      {"train.txt.bz2", "BZh91AY&SY"},
      {"train.txt.xz", std::string("\xfd"
                                   "7zXZ\0\0",
                                   8)},
  };
  for (const auto& [name, bytes] : cases) {
    absl::StatusOr<std::string> got = ReadDataFile(WriteFile(name, bytes), kDefaultMaxDataBytes);
    ASSERT_FALSE(got.ok()) << name;
    EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument) << name;
    EXPECT_THAT(got.status().message(), HasSubstr("which scored-ppl does not read")) << name;
    EXPECT_THAT(got.status().message(), HasSubstr("and gzip (.gz) of them")) << name;
  }
  // Gzip of Parquet: the container is named after decompression too.
  absl::StatusOr<std::string> got =
      ReadDataFile(WriteFile("train.parquet.gz", Gzip("PAR1xyz")), kDefaultMaxDataBytes);
  ASSERT_FALSE(got.ok());
  EXPECT_THAT(got.status().message(), HasSubstr("is Parquet"));
}

}  // namespace
}  // namespace ppl
}  // namespace scored
