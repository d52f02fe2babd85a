// Minimal leveled logging to stderr (our abseil predates absl/log).
//
//   SCORED_LOG(INFO) << "loaded " << n << " tensors";
//
// Levels: INFO, WARNING, ERROR. Each statement writes one line "I1122 00:00:00.123 file.cc:42] msg" to
// stderr atomically (one write). Thread-safe. Never aborts: library code reports failures as absl::Status.
// SetMinLogLevel() filters (e.g. tests may silence INFO).
#ifndef SCORED_ENGINE_BASE_LOGGING_H_
#define SCORED_ENGINE_BASE_LOGGING_H_

#include <sstream>

namespace scored {

enum class LogLevel { kInfo = 0, kWarning = 1, kError = 2 };

void SetMinLogLevel(LogLevel level);
LogLevel MinLogLevel();

namespace internal {

class LogMessage {
 public:
  LogMessage(LogLevel level, const char* file, int line);
  ~LogMessage();
  LogMessage(const LogMessage&) = delete;
  LogMessage& operator=(const LogMessage&) = delete;
  std::ostream& stream() { return stream_; }

 private:
  LogLevel level_;
  std::ostringstream stream_;
};

}  // namespace internal
}  // namespace scored

#define SCORED_LOG_LEVEL_INFO ::scored::LogLevel::kInfo
#define SCORED_LOG_LEVEL_WARNING ::scored::LogLevel::kWarning
#define SCORED_LOG_LEVEL_ERROR ::scored::LogLevel::kError

#define SCORED_LOG(severity)                                   \
  if (SCORED_LOG_LEVEL_##severity < ::scored::MinLogLevel()) { \
  } else                                                       \
    ::scored::internal::LogMessage(SCORED_LOG_LEVEL_##severity, __FILE__, __LINE__).stream()

#endif  // SCORED_ENGINE_BASE_LOGGING_H_
