#include "tierkv/logging.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace tierkv {
namespace {

LogLevel InitialLevel() {
  LogLevel level = LogLevel::kWarn;
  if (const char* env = std::getenv("TIERKV_LOG_LEVEL")) ParseLogLevel(env, &level);
  return level;
}

std::atomic<LogLevel>& Level() {
  static std::atomic<LogLevel> level{InitialLevel()};
  return level;
}

}  // namespace

void SetLogLevel(LogLevel level) { Level().store(level, std::memory_order_relaxed); }
LogLevel GetLogLevel() { return Level().load(std::memory_order_relaxed); }

bool ParseLogLevel(std::string_view name, LogLevel* out) {
  static constexpr std::pair<std::string_view, LogLevel> kNames[] = {
      {"debug", LogLevel::kDebug}, {"info", LogLevel::kInfo}, {"warn", LogLevel::kWarn},
      {"error", LogLevel::kError}, {"off", LogLevel::kOff}};
  for (const auto& [n, l] : kNames) {
    if (n == name) {
      *out = l;
      return true;
    }
  }
  return false;
}

namespace internal {

LogMessage::LogMessage(LogLevel level, const char* file, int line) {
  static constexpr const char* kTags[] = {"D", "I", "W", "E", "-"};
  const char* base = std::strrchr(file, '/');
  os_ << "[tierkv " << kTags[static_cast<int>(level)] << " " << (base ? base + 1 : file) << ":"
      << line << "] ";
}

LogMessage::~LogMessage() {
  os_ << '\n';
  const std::string s = os_.str();
  std::fwrite(s.data(), 1, s.size(), stderr);
}

}  // namespace internal
}  // namespace tierkv
