#pragma once

/// @file
/// Thread-safe logging to standard error, filtered by `COHORT_LOG_LEVEL`.
///
/// Each line reads `[cohort <UTC time> rank <r> <LEVEL>] <message>`. The level comes from the
/// environment variable `COHORT_LOG_LEVEL` (`error`, `warn`, `info` or `debug`; default `warn`),
/// read on first use, or from `set_log_level`. The rank is the calling thread's if it set one
/// (ranks as threads, `run_local`), else the process's, else `-`.
///
///     COHORT_LOG(info) << "bucket " << index << " ready";

#include <optional>
#include <sstream>
#include <string>
#include <string_view>

namespace cohort {

enum class LogLevel : int { error = 0, warn = 1, info = 2, debug = 3 };

/// "error", "warn", "info" or "debug".
std::string_view to_string(LogLevel level) noexcept;

/// Parses a level name (case-insensitive; "warning" is accepted for "warn"). Returns nullopt for
/// anything else.
std::optional<LogLevel> parse_log_level(std::string_view text) noexcept;

/// The current level: messages above it are dropped.
LogLevel log_level() noexcept;

/// Overrides `COHORT_LOG_LEVEL` for the whole process.
void set_log_level(LogLevel level) noexcept;

/// Whether a message at `level` would be written.
inline bool log_enabled(LogLevel level) noexcept {
  return static_cast<int>(level) <= static_cast<int>(log_level());
}

/// Sets the rank shown in this process's log lines (-1: none).
void set_process_log_rank(int rank) noexcept;

/// Sets the rank shown in the calling thread's log lines, over the process's (-1: none).
void set_thread_log_rank(int rank) noexcept;

/// The rank the calling thread's lines show, or -1.
int log_rank() noexcept;

/// Formats one log line (without the trailing newline), as `log` writes it.
std::string format_log_line(LogLevel level, int rank, std::string_view message);

/// Writes one line at `level`, whole, even when many threads log at once.
void log(LogLevel level, std::string_view message);

namespace detail {

/// Collects one message and writes it when destroyed.
class LogLine {
 public:
  explicit LogLine(LogLevel level) : level_(level) {}
  LogLine(const LogLine&) = delete;
  LogLine& operator=(const LogLine&) = delete;
  ~LogLine() { log(level_, stream_.str()); }
  std::ostringstream& stream() { return stream_; }

 private:
  LogLevel level_;
  std::ostringstream stream_;
};

}  // namespace detail
}  // namespace cohort

/// `COHORT_LOG(info) << ...;` The stream expression is not evaluated when the level is off.
#define COHORT_LOG(level)                                  \
  if (!::cohort::log_enabled(::cohort::LogLevel::level)) { \
  } else                                                   \
    ::cohort::detail::LogLine(::cohort::LogLevel::level).stream()
