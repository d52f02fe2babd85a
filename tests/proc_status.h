// This process's memory counters from /proc/self/status (Linux), for tests and benchmarks that check host
// memory.
#ifndef SCORED_TESTS_PROC_STATUS_H_
#define SCORED_TESTS_PROC_STATUS_H_

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>

namespace scored::testing {

// A "kB" field of /proc/self/status ("RssAnon", "RssFile", "RssShmem", "VmHWM", ...) in bytes; -1 when
// absent.
inline int64_t ProcStatusBytes(const std::string& field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field + ":", 0) == 0) return std::atoll(line.c_str() + field.size() + 1) * 1024;
  }
  return -1;
}

}  // namespace scored::testing

#endif  // SCORED_TESTS_PROC_STATUS_H_
