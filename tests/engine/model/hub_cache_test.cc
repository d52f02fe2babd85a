// `--model org/name[@revision]` resolved offline through the local hub cache (engine/model/hub_cache.h):
// the snapshot a ref names, a commit hash directly, HF_HUB_CACHE before HF_HOME, and a NOT_FOUND that says
// where it looked and how to fill the cache. Before, a hub id was only "no such folder".
#include "engine/model/hub_cache.h"

#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace scored {
namespace {

using ::testing::HasSubstr;

class HubCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    home_ = absl::StrCat(::testing::TempDir(), "/hub_cache_test.", ::getpid());
    std::filesystem::remove_all(home_);
    repo_ = home_ + "/hub/models--acme--tiny-llama";
    std::filesystem::create_directories(repo_ + "/refs");
    std::filesystem::create_directories(repo_ + "/snapshots/aaaa1111");
    std::filesystem::create_directories(repo_ + "/snapshots/bbbb2222");
    std::ofstream(repo_ + "/refs/main") << "aaaa1111";  // as huggingface_hub writes it: no newline
    std::ofstream(repo_ + "/refs/v2") << "bbbb2222\n";
    ::unsetenv("HF_HUB_CACHE");
    ::setenv("HF_HOME", home_.c_str(), 1);
  }
  void TearDown() override {
    ::unsetenv("HF_HOME");
    ::unsetenv("HF_HUB_CACHE");
    std::filesystem::remove_all(home_);
  }
  std::string home_, repo_;
};

TEST_F(HubCacheTest, HubIdsResolveToTheirSnapshot) {
  EXPECT_EQ(HubCacheDir(), home_ + "/hub");
  EXPECT_EQ(ResolveModelPath("acme/tiny-llama").value(), repo_ + "/snapshots/aaaa1111");
  EXPECT_EQ(ResolveModelPath("acme/tiny-llama@v2").value(), repo_ + "/snapshots/bbbb2222");
  EXPECT_EQ(ResolveModelPath("acme/tiny-llama@bbbb2222").value(), repo_ + "/snapshots/bbbb2222");
  // HF_HUB_CACHE names the hub folder itself and comes first.
  ::setenv("HF_HUB_CACHE", (home_ + "/hub").c_str(), 1);
  ::setenv("HF_HOME", "/nonexistent", 1);
  EXPECT_EQ(ResolveModelPath("acme/tiny-llama").value(), repo_ + "/snapshots/aaaa1111");
}

TEST_F(HubCacheTest, PathsStayPathsAndMissingIdsSayWhatToDo) {
  // An existing path is a path even when it looks like an id; other non-ids go to the loader unchanged.
  const std::string cwd = std::filesystem::current_path().string();
  std::filesystem::current_path(home_);
  std::filesystem::create_directories("acme/tiny-llama");
  EXPECT_EQ(ResolveModelPath("acme/tiny-llama").value(), "acme/tiny-llama");
  std::filesystem::current_path(cwd);
  for (const char* path : {"/models/llama", "a/b/c", "./acme", "acme/tiny llama", "", "acme/.."}) {
    EXPECT_EQ(ResolveModelPath(path).value(), path) << path;
  }
  const absl::StatusOr<std::string> missing = ResolveModelPath("acme/other-model");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("not in the local hub cache " + home_ + "/hub"));
  EXPECT_THAT(missing.status().message(), HasSubstr("`huggingface-cli download acme/other-model`"));
  EXPECT_THAT(ResolveModelPath("acme/tiny-llama@v9").status().message(),
              HasSubstr("(revision v9) is not in the local hub cache"));
}

}  // namespace
}  // namespace scored
