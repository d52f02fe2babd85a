#include "engine/base/logging.h"

#include <sys/time.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <string>

namespace scored {
namespace {
std::atomic<int> g_min_level{static_cast<int>(LogLevel::kInfo)};
}  // namespace

void SetMinLogLevel(LogLevel level) { g_min_level.store(static_cast<int>(level)); }
LogLevel MinLogLevel() { return static_cast<LogLevel>(g_min_level.load()); }

namespace internal {

LogMessage::LogMessage(LogLevel level, const char* file, int line) : level_(level) {
  timeval tv;
  gettimeofday(&tv, nullptr);
  tm t;
  localtime_r(&tv.tv_sec, &t);
  const char* base = std::strrchr(file, '/');
  char prefix[96];
  std::snprintf(prefix, sizeof(prefix), "%c%02d%02d %02d:%02d:%02d.%03d %s:%d] ",
                "IWE"[static_cast<int>(level_)], t.tm_mon + 1, t.tm_mday, t.tm_hour, t.tm_min, t.tm_sec,
                static_cast<int>(tv.tv_usec / 1000), base != nullptr ? base + 1 : file, line);
  stream_ << prefix;
}

LogMessage::~LogMessage() {
  stream_ << '\n';
  const std::string line = stream_.str();
  // One write() per line keeps concurrent log lines from interleaving.
  ssize_t unused = ::write(STDERR_FILENO, line.data(), line.size());
  (void)unused;
}

}  // namespace internal
}  // namespace scored
