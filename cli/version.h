// The version every scored binary reports (`--version`, logs, ModelInfo): the project version of the top
// CMakeLists.txt's project(VERSION ...) and the git commit of the source tree when the build was configured.
//
// Thread-safety: all functions are pure (compile-time constants).
#ifndef SCORED_CLI_VERSION_H_
#define SCORED_CLI_VERSION_H_

#include <string>

#include "absl/strings/string_view.h"

namespace scored::cli {

// "MAJOR.MINOR.PATCH", e.g. "0.1.0".
const char* ProjectVersion();

// The abbreviated commit hash of HEAD at configure time, "-dirty" appended when tracked files differed from
// it; "" when unknown (no git, or a source tree without .git such as an sdist or a container build context).
// Reconfigure (cmake -S . -B build) to refresh it.
const char* GitCommit();

// One line, newline-terminated: "<program> 0.1.0 (git 1a2b3c4d5e6f)" or "<program> 0.1.0" when the commit is
// unknown.
std::string VersionLine(absl::string_view program);

}  // namespace scored::cli

#endif  // SCORED_CLI_VERSION_H_
