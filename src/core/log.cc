// Leveled logging to stderr; the level comes from MIMO_LOG_LEVEL once, or SetLogLevel.
#include "core/log.h"

#include <atomic>
#include <cstdarg>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace mimo {
namespace {
LogLevel LevelFromEnv() {
  const char* s = std::getenv("MIMO_LOG_LEVEL");
  if (!s) return LogLevel::kInfo;
  if (!std::strcmp(s, "debug")) return LogLevel::kDebug;
  if (!std::strcmp(s, "warn")) return LogLevel::kWarn;
  if (!std::strcmp(s, "error")) return LogLevel::kError;
  return LogLevel::kInfo;
}
std::atomic<int> g_level{static_cast<int>(LevelFromEnv())};
std::mutex g_mu;
}  // namespace

LogLevel CurrentLogLevel() { return static_cast<LogLevel>(g_level.load()); }
void SetLogLevel(LogLevel level) { g_level.store(static_cast<int>(level)); }

void LogMessage(LogLevel level, const char* fmt, ...) {
  if (static_cast<int>(level) < g_level.load()) return;
  static const char* kNames[] = {"debug", "info", "warn", "error"};
  std::lock_guard<std::mutex> lock(g_mu);
  std::fprintf(stderr, "[mimo %s] ", kNames[static_cast<int>(level)]);
  va_list ap;
  va_start(ap, fmt);
  std::vfprintf(stderr, fmt, ap);
  va_end(ap);
  std::fputc('\n', stderr);
}
}  // namespace mimo
