// Helpers shared by the libFuzzer targets of tests/fuzz (test code, never linked into the product).
//
// A target reports a broken contract with FUZZ_CHECK: it prints the condition and where, then traps, which
// libFuzzer records as a crash (with the input saved as crash-<sha1>) exactly like a sanitizer report.
#ifndef SCORED_TESTS_FUZZ_FUZZ_UTIL_H_
#define SCORED_TESTS_FUZZ_FUZZ_UTIL_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"

#define FUZZ_CHECK(cond, what)                                            \
  do {                                                                    \
    if (!(cond)) ::scored::fuzz::Fail(__FILE__, __LINE__, #cond, (what)); \
  } while (0)

namespace scored {
namespace fuzz {

// Prints "file:line: contract broken: cond (what)" to stderr and traps.
[[noreturn]] void Fail(const char* file, int line, const char* cond, std::string_view what);

// SCORED_DATA_DIR + "/" + relative: the offline test assets.
std::string DataPath(std::string_view relative);

// A private scratch folder (mkdtemp under $TMPDIR, else /dev/shm where it exists, else /tmp), created on
// first use and removed with its files when the process exits normally.
const std::string& ScratchDir();

// Replaces the file at `path` with `size` bytes of `data`. False on any I/O error.
bool WriteFile(const std::string& path, const uint8_t* data, size_t size);
bool WriteFile(const std::string& path, std::string_view text);

// A memory-backed regular file (memfd) that can be opened by path: /proc/self/fd/<fd>.
class MemFile {
 public:
  MemFile();
  ~MemFile();
  MemFile(const MemFile&) = delete;
  MemFile& operator=(const MemFile&) = delete;
  // Replaces the contents. False on an I/O error.
  bool Set(const uint8_t* data, size_t size);
  const std::string& path() const { return path_; }

 private:
  int fd_ = -1;
  std::string path_;
};

// Strict UTF-8 (RFC 3629): no overlong forms, no surrogates, nothing above U+10FFFF.
bool IsValidUtf8(std::string_view s);

// The status code is one of `allowed` (up to four) and the message is not empty.
bool CodeIsOneOf(const absl::Status& s, absl::StatusCode a, absl::StatusCode b = absl::StatusCode::kOk,
                 absl::StatusCode c = absl::StatusCode::kOk, absl::StatusCode d = absl::StatusCode::kOk);

}  // namespace fuzz
}  // namespace scored

#endif  // SCORED_TESTS_FUZZ_FUZZ_UTIL_H_
