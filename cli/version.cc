#include "cli/version.h"

#include "absl/strings/str_cat.h"

#ifndef SCORED_PROJECT_VERSION
#error "SCORED_PROJECT_VERSION must be defined by the build (cli/CMakeLists.txt)"
#endif
#ifndef SCORED_GIT_COMMIT
#error "SCORED_GIT_COMMIT must be defined by the build (cli/CMakeLists.txt)"
#endif

namespace scored::cli {

const char* ProjectVersion() { return SCORED_PROJECT_VERSION; }

const char* GitCommit() { return SCORED_GIT_COMMIT; }

std::string VersionLine(absl::string_view program) {
  const absl::string_view commit = GitCommit();
  if (commit.empty()) return absl::StrCat(program, " ", ProjectVersion(), "\n");
  return absl::StrCat(program, " ", ProjectVersion(), " (git ", commit, ")\n");
}

}  // namespace scored::cli
