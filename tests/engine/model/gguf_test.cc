// The GGUF reader (engine/model/gguf.h) on tests/fixtures/gguf-blocks/tiny.gguf, which the gguf package's own
// GGUFWriter wrote (scripts/fixtures/make_gguf_blocks.py): every metadata value type, a custom alignment, and
// F32 / Q8_0 / Q4_K tensors whose bytes decode to what was written; then truncated and corrupted copies, each
// refused with a message naming what is wrong, never a read past the file.
#include "engine/model/gguf.h"

#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "engine/model/gguf_quants.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace scored {
namespace {

using ::testing::HasSubstr;

const std::string kTiny = std::string(SCORED_FIXTURES_DIR) + "/gguf-blocks/tiny.gguf";

std::vector<char> ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<char>(std::istreambuf_iterator<char>(in), {});
}

std::string WriteTemp(const std::vector<char>& bytes, const std::string& tag) {
  const std::string path = ::testing::TempDir() + "/gguf_test_" + tag + ".gguf";
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return path;
}

TEST(Gguf, ReadsTheGgufWritersFile) {
  absl::StatusOr<std::unique_ptr<GgufFile>> f = GgufFile::Open(kTiny);
  ASSERT_TRUE(f.ok()) << f.status();
  const GgufFile& g = **f;
  EXPECT_EQ(g.version(), 3u);
  EXPECT_EQ(*g.GetString("general.architecture"), "llama");
  EXPECT_EQ(*g.GetInt("test.u8"), 200);
  EXPECT_EQ(*g.GetInt("test.i8"), -100);
  EXPECT_EQ(*g.GetInt("test.u16"), 60000);
  EXPECT_EQ(*g.GetInt("test.i16"), -30000);
  EXPECT_EQ(*g.GetInt("test.u32"), 4000000000);
  EXPECT_EQ(*g.GetInt("test.i32"), -2000000000);
  EXPECT_EQ(*g.GetInt("test.u64"), (int64_t{1} << 40) + 3);
  EXPECT_EQ(*g.GetInt("test.i64"), -(int64_t{1} << 40) - 3);
  EXPECT_EQ(*g.GetFloat("test.f32"), static_cast<double>(0.1f));
  EXPECT_EQ(*g.GetFloat("test.f64"), 0.1);
  ASSERT_NE(g.Find("test.bool"), nullptr);
  EXPECT_EQ(g.Find("test.bool")->kind, GgufValue::Kind::kBool);
  EXPECT_EQ(g.Find("test.bool")->u, 1u);
  EXPECT_EQ(*g.GetString("test.string"), "Grüße, GGUF");
  const GgufValue* ints = g.Find("test.ints");
  ASSERT_NE(ints, nullptr);
  ASSERT_EQ(ints->array.size(), 3u);
  EXPECT_EQ(ints->array[1].i, -2);
  const GgufValue* strings = g.Find("test.strings");
  ASSERT_NE(strings, nullptr);
  ASSERT_EQ(strings->array.size(), 3u);
  EXPECT_EQ(strings->array[2].s, "ccc");
  EXPECT_EQ(strings->array[1].s, "");
  EXPECT_EQ(*g.GetInt("absent", 7), 7);
  EXPECT_EQ(g.GetInt("absent").status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(g.GetInt("test.string").status().message(), HasSubstr("'test.string' is a string"));

  ASSERT_EQ(g.tensors().size(), 3u);
  const GgufTensor* f32 = g.FindTensor("f32.matrix");
  ASSERT_NE(f32, nullptr);
  EXPECT_EQ(f32->dims, (std::vector<int64_t>{64, 3}));  // ggml order: a [3, 64] matrix
  EXPECT_EQ(f32->nbytes, 3 * 64 * 4);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(f32->data) % 64,
            reinterpret_cast<uintptr_t>(g.tensors()[0].data) % 64);
  std::vector<float> v(3 * 64);
  ASSERT_TRUE(DequantizeGgmlBlocks(f32->type, f32->data, 3 * 64, v.data()).ok());
  for (int i = 0; i < 3 * 64; ++i) EXPECT_EQ(v[i], static_cast<float>(i));
  const GgufTensor* q8 = g.FindTensor("q8_0.matrix");
  ASSERT_NE(q8, nullptr);
  EXPECT_EQ(GgufTypeName(q8->type), "Q8_0");
  EXPECT_EQ(q8->nbytes, 4 * 34);
  ASSERT_TRUE(DequantizeGgmlBlocks(q8->type, q8->data, 4, v.data()).ok());
  // Q8_0 of 0 .. 127: each block of 32 rounds to half its step (its max / 127) plus its fp16 scale's rounding
  // (2^-11 relative) times the value.
  for (int i = 0; i < 128; ++i) {
    const float step = static_cast<float>(i / 32 * 32 + 31) / 127.0f;
    EXPECT_NEAR(v[i], static_cast<float>(i), 0.5f * step + i * 0x1p-11f + 1e-4f) << i;
  }
  const GgufTensor* q4k = g.FindTensor("q4_k.matrix");
  ASSERT_NE(q4k, nullptr);
  EXPECT_EQ(q4k->dims, (std::vector<int64_t>{256, 1}));
  EXPECT_EQ(q4k->nbytes, 144);
  EXPECT_EQ(g.FindTensor("nope"), nullptr);
}

TEST(Gguf, TruncatedAndCorruptFilesAreRefused) {
  const std::vector<char> good = ReadAll(kTiny);
  ASSERT_GT(good.size(), 1000u);
  // Every truncation point: an error, never a crash or a read past the end (ASan checks the latter).
  for (size_t n : {size_t{0}, size_t{3}, size_t{8}, size_t{23}, size_t{100}, size_t{400}, size_t{700},
                   good.size() - 50}) {  // the last: into the last tensor's data (the file ends in padding)
    SCOPED_TRACE(n);
    const std::vector<char> cut(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(n));
    absl::StatusOr<std::unique_ptr<GgufFile>> f = GgufFile::Open(WriteTemp(cut, "cut"));
    ASSERT_FALSE(f.ok());
    EXPECT_EQ(f.status().code(), absl::StatusCode::kInvalidArgument) << f.status();
  }
  std::vector<char> bad = good;
  bad[0] = 'X';
  EXPECT_THAT(GgufFile::Open(WriteTemp(bad, "magic")).status().message(), HasSubstr("no GGUF magic"));
  bad = good;
  bad[4] = 9;  // version 9
  EXPECT_THAT(GgufFile::Open(WriteTemp(bad, "version")).status().message(), HasSubstr("version 9"));
  bad = good;
  bad[16] = static_cast<char>(0xFF);  // a huge metadata count
  bad[22] = 0x7F;
  EXPECT_THAT(GgufFile::Open(WriteTemp(bad, "count")).status().message(), HasSubstr("metadata entries"));
  EXPECT_EQ(GgufFile::Open(::testing::TempDir() + "/no-such.gguf").status().code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace scored
