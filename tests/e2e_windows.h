// SCORED_E2E_MAX_WINDOWS: how many windows the whole-WikiText end-to-end tests score. Unset (the normal
// build) means all of them; the sanitizer build (scripts/sanitize.sh) sets a small K, and each test then
// checks goldens for exactly its first K windows.
#ifndef SCORED_TESTS_E2E_WINDOWS_H_
#define SCORED_TESTS_E2E_WINDOWS_H_

#include <cstdint>
#include <cstdlib>

namespace scored::testing {

// 0 when unset or empty (all windows), -1 when not a positive integer, else K.
inline int64_t MaxWindowsFromEnv() {
  const char* value = std::getenv("SCORED_E2E_MAX_WINDOWS");
  if (value == nullptr || *value == '\0') return 0;
  char* end = nullptr;
  const long long k = std::strtoll(value, &end, 10);
  return *end == '\0' && k > 0 ? static_cast<int64_t>(k) : -1;
}

}  // namespace scored::testing

#endif  // SCORED_TESTS_E2E_WINDOWS_H_
