// Test keys and certificates made with the openssl command line: a fresh folder per (test binary, prefix),
// made once by a shell script the test supplies, kept for the process's life. Tests skip without openssl.
#ifndef SCORED_TESTS_SERVER_TEST_CERTS_H_
#define SCORED_TESTS_SERVER_TEST_CERTS_H_

#include <string>

namespace scored::testing {

// Whether `openssl version` runs.
bool HaveOpenssl();

// The EC P-256 key options every test certificate uses (for `openssl req`).
inline constexpr char kOpensslEcKey[] = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";

class TestCerts {
 public:
  // Runs `script` (bash, `set -e`, from inside a new /tmp/<prefix>_XXXXXX folder) the first time a prefix is
  // asked for; later calls return the same folder. Null when the script failed; `*error` (if given) then
  // holds its output. Not thread-safe (call from the test thread).
  static const TestCerts* Get(const std::string& prefix, const std::string& script,
                              std::string* error = nullptr);

  std::string path(const std::string& name) const { return dir_ + "/" + name; }

 private:
  explicit TestCerts(std::string dir) : dir_(std::move(dir)) {}
  std::string dir_;
};

}  // namespace scored::testing

#endif  // SCORED_TESTS_SERVER_TEST_CERTS_H_
