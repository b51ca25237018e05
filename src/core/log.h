// Minimal leveled logging to stderr. MIMO_LOG_LEVEL (env) = debug|info|warn|error; default info.
#pragma once

#include <cstdio>

namespace mimo {
enum class LogLevel { kDebug, kInfo, kWarn, kError, kCount };
LogLevel CurrentLogLevel();
void SetLogLevel(LogLevel level);
void LogMessage(LogLevel level, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
}  // namespace mimo

#define MIMO_LOG_DEBUG(...) ::mimo::LogMessage(::mimo::LogLevel::kDebug, __VA_ARGS__)
#define MIMO_LOG_INFO(...) ::mimo::LogMessage(::mimo::LogLevel::kInfo, __VA_ARGS__)
#define MIMO_LOG_WARN(...) ::mimo::LogMessage(::mimo::LogLevel::kWarn, __VA_ARGS__)
#define MIMO_LOG_ERROR(...) ::mimo::LogMessage(::mimo::LogLevel::kError, __VA_ARGS__)
