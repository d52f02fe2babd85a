#include "engine/model/safetensors.h"

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/engine/model/st_writer.h"
#include "tests/proc_status.h"

namespace scored {
namespace {

using ::testing::HasSubstr;
using testing_util::Bytes;
using testing_util::RawFile;
using testing_util::StTensor;
using testing_util::TempDir;
using testing_util::WriteFile;
using testing_util::WriteSafetensors;

const std::string kData = SCORED_DATA_DIR;

float FloatAt(const TensorView& t, int64_t i) {
  float f;
  std::memcpy(&f, t.data + 4 * i, 4);
  return f;
}

TEST(SafetensorsTest, RealStories260K) {
  const std::string path = kData + "/stories260K-hf/model.safetensors";
  auto f = SafetensorsFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ((*f)->tensors().size(), 47u);
  EXPECT_EQ((*f)->metadata().at("format"), "pt");
  const TensorView& e = (*f)->tensors().at("model.embed_tokens.weight");
  EXPECT_EQ(e.dtype, DType::kF32);
  EXPECT_EQ(e.shape, (std::vector<int64_t>{512, 64}));
  EXPECT_EQ(e.nbytes, 512 * 64 * 4);
  EXPECT_EQ(e.NumElements(), 512 * 64);
  EXPECT_EQ(e.file, path);
  // Values read with Python's struct module from the same file.
  EXPECT_EQ(FloatAt(e, 0), -0.29474878311157227f);
  EXPECT_EQ(FloatAt(e, 3), 0.34057360887527466f);
  EXPECT_EQ(FloatAt(e, 512 * 64 - 1), -0.424032598733902f);
  const TensorView& q = (*f)->tensors().at("model.layers.0.self_attn.q_proj.weight");
  EXPECT_EQ(q.shape, (std::vector<int64_t>{64, 64}));
  EXPECT_EQ(FloatAt(q, 1), 0.07974770665168762f);

  auto store = TensorStore::Open(kData + "/stories260K-hf");
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_EQ((*store)->Names().size(), 47u);
  EXPECT_TRUE((*store)->Has("model.norm.weight"));
  EXPECT_FALSE((*store)->Has("lm_head.weight"));
  auto missing = (*store)->Get("lm_head.weight");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("lm_head.weight"));
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("stories260K-hf"));
}

TEST(SafetensorsTest, AllDtypesAndEmptyTensor) {
  TempDir dir;
  const std::string path = dir.path() + "/model.safetensors";
  ASSERT_TRUE(
      WriteSafetensors(path, {
                                 {"f32", "F32", {2}, Bytes(std::vector<float>{1.5f, -2.0f})},
                                 {"f16", "F16", {1, 2}, Bytes(std::vector<uint16_t>{0x3c00, 0xc000})},
                                 {"bf16", "BF16", {2}, Bytes(std::vector<uint16_t>{0x3f80, 0x4000})},
                                 {"f8", "F8_E4M3", {3}, Bytes(std::vector<uint8_t>{0x38, 0x40, 0x7e})},
                                 {"i8", "I8", {1}, Bytes(std::vector<int8_t>{-5})},
                                 {"u8", "U8", {1}, Bytes(std::vector<uint8_t>{200})},
                                 {"i32", "I32", {2, 1}, Bytes(std::vector<int32_t>{7, -7})},
                                 {"i64", "I64", {2}, Bytes(std::vector<int64_t>{4096, 11008})},
                                 {"empty", "F32", {0, 4}, ""},
                                 {"scalar", "F32", {}, Bytes(std::vector<float>{3.0f})},
                             }));
  auto f = SafetensorsFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status();
  const auto& t = (*f)->tensors();
  EXPECT_EQ(t.at("f16").dtype, DType::kF16);
  EXPECT_EQ(t.at("bf16").dtype, DType::kBF16);
  EXPECT_EQ(t.at("f8").dtype, DType::kF8E4M3);
  EXPECT_EQ(t.at("f8").data[2], 0x7e);
  EXPECT_EQ(t.at("i8").dtype, DType::kI8);
  EXPECT_EQ(t.at("u8").dtype, DType::kU8);
  EXPECT_EQ(t.at("i32").dtype, DType::kI32);
  EXPECT_EQ(t.at("i64").dtype, DType::kI64);
  EXPECT_EQ(t.at("i64").nbytes, 16);
  EXPECT_EQ(t.at("empty").NumElements(), 0);
  EXPECT_EQ(t.at("empty").nbytes, 0);
  EXPECT_EQ(t.at("scalar").NumElements(), 1);
  EXPECT_EQ(FloatAt(t.at("scalar"), 0), 3.0f);
  EXPECT_STREQ(DTypeName(DType::kF8E4M3), "F8_E4M3");
  EXPECT_EQ(DTypeSize(DType::kI64), 8);
  EXPECT_EQ(DTypeSize(DType::kBF16), 2);
}

TEST(SafetensorsTest, ShardedIndex) {
  TempDir dir;
  ASSERT_TRUE(WriteSafetensors(dir.path() + "/model-00001-of-00002.safetensors",
                               {{"a", "F32", {2}, Bytes(std::vector<float>{1, 2})},
                                {"b", "I32", {1}, Bytes(std::vector<int32_t>{9})}}));
  ASSERT_TRUE(WriteSafetensors(dir.path() + "/model-00002-of-00002.safetensors",
                               {{"c", "BF16", {3}, Bytes(std::vector<uint16_t>{1, 2, 3})}}));
  ASSERT_TRUE(WriteFile(dir.path() + "/model.safetensors.index.json", R"({
    "metadata": {"total_size": 18},
    "weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00001-of-00002.safetensors",
                   "c": "model-00002-of-00002.safetensors"}})"));
  auto store = TensorStore::Open(dir.path());
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_EQ((*store)->Names(), (std::vector<std::string>{"a", "b", "c"}));
  auto c = (*store)->Get("c");
  ASSERT_TRUE(c.ok());
  EXPECT_THAT(c->file, HasSubstr("model-00002-of-00002.safetensors"));
  EXPECT_EQ(c->shape, (std::vector<int64_t>{3}));

  // The index names a tensor its shard does not hold.
  ASSERT_TRUE(WriteFile(dir.path() + "/model.safetensors.index.json", R"({
    "weight_map": {"a": "model-00002-of-00002.safetensors"}})"));
  auto bad = TensorStore::Open(dir.path());
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("'a'"));
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("model-00002-of-00002.safetensors"));

  // The index names a shard that does not exist.
  ASSERT_TRUE(WriteFile(dir.path() + "/model.safetensors.index.json", R"({
    "weight_map": {"a": "model-00003-of-00002.safetensors"}})"));
  bad = TensorStore::Open(dir.path());
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("model-00003-of-00002.safetensors"));

  // A shard name that escapes the folder.
  ASSERT_TRUE(WriteFile(dir.path() + "/model.safetensors.index.json", R"({
    "weight_map": {"a": "../x.safetensors"}})"));
  bad = TensorStore::Open(dir.path());
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("bad shard"));

  // A tensor stored in two shards.
  ASSERT_TRUE(WriteSafetensors(dir.path() + "/model-00002-of-00002.safetensors",
                               {{"a", "F32", {1}, Bytes(std::vector<float>{1})}}));
  ASSERT_TRUE(WriteFile(dir.path() + "/model.safetensors.index.json", R"({
    "weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}})"));
  bad = TensorStore::Open(dir.path());
  ASSERT_FALSE(bad.ok());
}

// This process's resident file-backed bytes (a file on tmpfs counts as shmem), -1 where unreadable.
int64_t RssFileBytes() {
  const int64_t file = testing::ProcStatusBytes("RssFile"), shmem = testing::ProcStatusBytes("RssShmem");
  return file < 0 || shmem < 0 ? -1 : file + shmem;
}

uint64_t Checksum(const uint8_t* data, int64_t n) {
  uint64_t h = 1469598103934665603ull;
  for (int64_t i = 0; i < n; ++i) h = (h ^ data[i]) * 1099511628211ull;
  return h;
}

// A loader that copied a tensor to the GPU drops its mmapped pages from RSS; the bytes stay readable and
// equal.
TEST(SafetensorsTest, ReleaseResidentPagesDropsRssKeepsBytes) {
  TempDir dir;
  constexpr int64_t kFloats = 8 << 20;  // 32 MiB per tensor
  std::vector<float> values(kFloats);
  for (int64_t i = 0; i < kFloats; ++i) values[i] = static_cast<float>((i * 2654435761u) % 1000003);
  ASSERT_TRUE(WriteSafetensors(dir.path() + "/model.safetensors", {{"a", "F32", {kFloats}, Bytes(values)},
                                                                   {"b", "F32", {kFloats}, Bytes(values)}}));
  auto store = TensorStore::Open(dir.path());
  ASSERT_TRUE(store.ok()) << store.status();
  auto a = (*store)->Get("a");
  auto b = (*store)->Get("b");
  ASSERT_TRUE(a.ok() && b.ok());
  const uint64_t want = Checksum(reinterpret_cast<const uint8_t*>(values.data()), 4 * kFloats);
  const int64_t before = RssFileBytes();
  if (before < 0) GTEST_SKIP() << "no RssFile in /proc/self/status";
  ASSERT_EQ(Checksum(a->data, a->nbytes), want);  // faults every page of a in
  ASSERT_EQ(Checksum(b->data, b->nbytes), want);
  const int64_t touched = RssFileBytes();
  EXPECT_GE(touched - before, 48 << 20) << "reading 64 MiB of the mapping should count in RssFile";

  (*store)->ReleaseResidentPages(*a);
  const int64_t released = RssFileBytes();
  EXPECT_LE(released, touched - (30 << 20)) << "a's 32 MiB should leave RssFile";
  EXPECT_EQ(Checksum(a->data, a->nbytes), want) << "released pages read back the file's bytes";
  EXPECT_EQ(Checksum(b->data, b->nbytes), want) << "the neighbour's shared edge page is intact";

  // A view of memory the store does not map (a host copy) is left alone: never zeroed.
  std::vector<uint8_t> copy(a->data, a->data + a->nbytes);
  TensorView heap = *a;
  heap.data = copy.data();
  (*store)->ReleaseResidentPages(heap);
  EXPECT_EQ(Checksum(copy.data(), static_cast<int64_t>(copy.size())), want);
  (*store)->ReleaseResidentPages(TensorView{});  // absent: a no-op
}

TEST(SafetensorsTest, EmptyFolder) {
  TempDir dir;
  auto store = TensorStore::Open(dir.path());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kNotFound);
}

struct Malformed {
  const char* name;
  std::string bytes;
  const char* expect;  // substring of the message besides the file name
  const char* tensor;  // tensor the message must name ("" when none)
};

std::string Header(const std::string& entries) { return "{" + entries + "}"; }

std::vector<Malformed> MalformedCases() {
  const std::string four_floats = Bytes(std::vector<float>{1, 2, 3, 4});
  std::string truncated_len("\x10\x00\x00", 3);
  std::string huge_len =
      RawFile(Header(R"("w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]})"), four_floats);
  huge_len[5] = '\x01';  // header length now ~2^40
  std::string truncated_data =
      RawFile(Header(R"("w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]})"), four_floats);
  truncated_data.resize(truncated_data.size() - 3);
  return {
      {"truncated_header_length", truncated_len, "8-byte header length", ""},
      {"header_length_past_end", huge_len, "header length", ""},
      {"truncated_data", truncated_data, "outside", "w"},
      {"malformed_json", RawFile(R"({"w": {"dtype": "F32", "shape": [4], )", four_floats), "malformed", ""},
      {"json_not_object", RawFile("[1, 2]", four_floats), "not an object", ""},
      {"offsets_outside_file",
       RawFile(Header(R"("w": {"dtype": "F32", "shape": [4], "data_offsets": [16, 32]})"), four_floats),
       "outside", "w"},
      {"offsets_reversed",
       RawFile(Header(R"("w": {"dtype": "F32", "shape": [0], "data_offsets": [8, 4]})"), four_floats),
       "data_offsets", "w"},
      {"negative_offset",
       RawFile(Header(R"("w": {"dtype": "F32", "shape": [1], "data_offsets": [-4, 0]})"), four_floats),
       "data_offsets", "w"},
      {"size_not_shape_times_dtype",
       RawFile(Header(R"("w": {"dtype": "F32", "shape": [3], "data_offsets": [0, 16]})"), four_floats),
       "needs 12", "w"},
      {"overlapping_tensors",
       RawFile(Header(R"("w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                       "v": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]})"),
               four_floats),
       "overlaps", "v"},
      {"unknown_dtype",
       RawFile(Header(R"("w": {"dtype": "C64", "shape": [2], "data_offsets": [0, 16]})"), four_floats), "C64",
       "w"},
      {"overflowing_shape",
       RawFile(Header(R"("w": {"dtype": "F32", "shape": [4294967296, 4294967296], "data_offsets": [0, 16]})"),
               four_floats),
       "overflow", "w"},
      {"overflowing_bytes",
       RawFile(Header(R"("w": {"dtype": "I64", "shape": [2305843009213693952], "data_offsets": [0, 16]})"),
               four_floats),
       "overflow", "w"},
      {"negative_dim",
       RawFile(Header(R"("w": {"dtype": "F32", "shape": [-4], "data_offsets": [0, 16]})"), four_floats),
       "shape", "w"},
      {"missing_dtype", RawFile(Header(R"("w": {"shape": [4], "data_offsets": [0, 16]})"), four_floats),
       "dtype", "w"},
      {"missing_offsets", RawFile(Header(R"("w": {"dtype": "F32", "shape": [4]})"), four_floats),
       "data_offsets", "w"},
      {"entry_not_object", RawFile(Header(R"("w": 5)"), four_floats), "not an object", "w"},
      {"empty_file", "", "8-byte header length", ""},
  };
}

TEST(SafetensorsTest, MalformedFilesFailNamingFileAndTensor) {
  TempDir dir;
  for (const Malformed& m : MalformedCases()) {
    const std::string path = dir.path() + "/" + m.name + ".safetensors";
    ASSERT_TRUE(WriteFile(path, m.bytes));
    auto f = SafetensorsFile::Open(path);
    ASSERT_FALSE(f.ok()) << m.name;
    const absl::StatusCode code = f.status().code();
    EXPECT_TRUE(code == absl::StatusCode::kInvalidArgument || code == absl::StatusCode::kDataLoss)
        << m.name << ": " << f.status();
    const std::string msg(f.status().message());
    EXPECT_THAT(msg, HasSubstr(path)) << m.name;
    EXPECT_THAT(msg, HasSubstr(m.expect)) << m.name;
    if (std::string(m.tensor) != "") {
      EXPECT_THAT(msg, HasSubstr(std::string("'") + m.tensor + "'")) << m.name;
    }
  }
}

// Every truncation of a real file, and byte flips in its header, give either a valid file or an error;
// never a crash (run under -DSCORED_SANITIZE=ON to check for out-of-bounds reads as well).
TEST(SafetensorsTest, TruncationsAndHeaderCorruptionNeverCrash) {
  std::string real;
  {
    FILE* f = fopen((kData + "/stories260K-hf/model.safetensors").c_str(), "rb");
    ASSERT_NE(f, nullptr);
    char buf[65536];
    size_t n;
    while ((n = fread(buf, 1, sizeof(buf), f)) > 0) real.append(buf, n);
    fclose(f);
  }
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | static_cast<uint8_t>(real[i]);
  const size_t data_start = 8 + header_len;
  TempDir dir;
  const std::string path = dir.path() + "/m.safetensors";
  int failures = 0;
  // Truncations through the length field, the header and the start and end of the data section.
  std::vector<size_t> lengths;
  for (size_t n = 0; n < 64; ++n) lengths.push_back(n);
  for (size_t n = 64; n < data_start + 64; n += 13) lengths.push_back(n);
  for (size_t n = real.size() - 64; n < real.size(); ++n) lengths.push_back(n);
  for (size_t n : lengths) {
    ASSERT_TRUE(WriteFile(path, real.substr(0, n)));
    auto f = SafetensorsFile::Open(path);
    if (!f.ok()) ++failures;
    EXPECT_FALSE(f.ok()) << "truncated to " << n;
  }
  EXPECT_EQ(failures, static_cast<int>(lengths.size()));
  // Deterministic pseudo-random byte replacements inside the header.
  uint32_t state = 12345;
  for (int iter = 0; iter < 400; ++iter) {
    std::string mutated = real;
    for (int k = 0; k < 3; ++k) {
      state = state * 1664525u + 1013904223u;
      const size_t pos = 8 + (state >> 8) % header_len;
      state = state * 1664525u + 1013904223u;
      mutated[pos] = "0123456789[]{},:\"-e.FIU8_ x"[(state >> 8) % 28];
    }
    ASSERT_TRUE(WriteFile(path, mutated));
    auto f = SafetensorsFile::Open(path);
    if (f.ok()) {  // touch every byte a valid-looking header maps: must stay inside the file
      unsigned sum = 0;
      for (const auto& [name, t] : (*f)->tensors()) {
        for (int64_t i = 0; i < t.nbytes; ++i) sum += t.data[i];
      }
      EXPECT_GE(sum, 0u);
    }
  }
}

TEST(SafetensorsTest, MissingFile) {
  auto f = SafetensorsFile::Open("/nonexistent/model.safetensors");
  EXPECT_EQ(f.status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace scored
