#include "engine/model/fingerprint.h"

#include <string>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "tests/engine/model/st_writer.h"

namespace scored {
namespace {

using testing_util::Bytes;
using testing_util::StTensor;
using testing_util::TempDir;
using testing_util::WriteFile;
using testing_util::WriteSafetensors;

// Golden computed independently with Python's hashlib following fingerprint.h's byte layout
// (stories260K's data section is ~1 MB, so the 64-sample path is the one exercised).
TEST(FingerprintTest, Stories260KGolden) {
  auto fp = ModelFingerprint(std::string(SCORED_DATA_DIR) + "/stories260K-hf");
  ASSERT_TRUE(fp.ok()) << fp.status();
  EXPECT_EQ(*fp, "508d5a3df24b4a1ec6c02f4ea5ea33168e23b8b77eb0eea06d332ce9194b6c00");
}

TEST(FingerprintTest, ShardedAndSensitiveToConfigHeaderAndData) {
  TempDir dir;
  ASSERT_TRUE(WriteFile(dir.path() + "/config.json", "{\"a\": 1}"));
  ASSERT_TRUE(
      WriteSafetensors(dir.path() + "/s1.safetensors", {{"x", "F32", {2}, Bytes(std::vector<float>{1, 2})}}));
  ASSERT_TRUE(
      WriteSafetensors(dir.path() + "/s2.safetensors", {{"y", "F32", {1}, Bytes(std::vector<float>{3})}}));
  ASSERT_TRUE(WriteFile(dir.path() + "/model.safetensors.index.json",
                        R"({"weight_map": {"y": "s2.safetensors", "x": "s1.safetensors"}})"));
  auto base = ModelFingerprint(dir.path());
  ASSERT_TRUE(base.ok()) << base.status();
  EXPECT_EQ(base->size(), 64u);
  EXPECT_EQ(*ModelFingerprint(dir.path()), *base);  // deterministic

  ASSERT_TRUE(
      WriteSafetensors(dir.path() + "/s2.safetensors", {{"y", "F32", {1}, Bytes(std::vector<float>{4})}}));
  auto data = ModelFingerprint(dir.path());
  ASSERT_TRUE(data.ok());
  EXPECT_NE(*data, *base);

  ASSERT_TRUE(WriteFile(dir.path() + "/config.json", "{\"a\": 2}"));
  auto cfg = ModelFingerprint(dir.path());
  ASSERT_TRUE(cfg.ok());
  EXPECT_NE(*cfg, *data);

  ASSERT_TRUE(
      WriteFile(dir.path() + "/model.safetensors.index.json", R"({"weight_map": {"y": "s3.safetensors"}})"));
  auto missing = ModelFingerprint(dir.path());
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(std::string(missing.status().message()).find("s3.safetensors"), std::string::npos);
}

TEST(FingerprintTest, MissingConfig) {
  TempDir dir;
  EXPECT_EQ(ModelFingerprint(dir.path()).status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace scored
