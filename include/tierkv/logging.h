// Leveled logging to stderr. The level comes from TIERKV_LOG_LEVEL
// (debug, info, warn, error; default warn) or SetLogLevel().
// Thread-safe: each message is written with one call.
#pragma once

#include <sstream>
#include <string_view>

namespace tierkv {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3, kOff = 4 };

void SetLogLevel(LogLevel level);
LogLevel GetLogLevel();
// Parses "debug", "info", "warn", "error", "off"; returns false if unknown.
bool ParseLogLevel(std::string_view name, LogLevel* out);

namespace internal {
class LogMessage {
 public:
  LogMessage(LogLevel level, const char* file, int line);
  ~LogMessage();
  std::ostream& stream() { return os_; }

 private:
  std::ostringstream os_;
};
}  // namespace internal

}  // namespace tierkv

#define TIERKV_LOG(level)                                                   \
  if (::tierkv::LogLevel::level < ::tierkv::GetLogLevel()) {                \
  } else                                                                    \
    ::tierkv::internal::LogMessage(::tierkv::LogLevel::level, __FILE__, __LINE__).stream()
