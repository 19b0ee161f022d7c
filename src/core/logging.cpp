#include <cohort/core/logging.hpp>

#include <cohort/core/env.hpp>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <mutex>

namespace cohort {
namespace {

constexpr int kNoRank = -1;

std::atomic<int> process_rank{kNoRank};
thread_local int thread_rank = kNoRank;

LogLevel level_from_environment() noexcept {
  // Logging cannot throw: a bad level is reported and replaced by the default.
  std::optional<std::string> text;
  try {
    text = env::text(env::kLogLevel);
  } catch (...) {
  }
  if (!text) {
    return LogLevel::warn;
  }
  if (auto level = parse_log_level(*text)) {
    return *level;
  }
  std::fprintf(stderr,
               "[cohort] COHORT_LOG_LEVEL='%s' is not a level; use error, warn, info or debug. "
               "Using warn.\n",
               text->c_str());
  return LogLevel::warn;
}

std::atomic<int>& current_level() noexcept {
  static std::atomic<int> level{static_cast<int>(level_from_environment())};
  return level;
}

std::mutex& output_mutex() noexcept {
  static std::mutex mutex;
  return mutex;
}

char lower(char c) noexcept {
  return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
}

bool equals_ignoring_case(std::string_view a, std::string_view b) noexcept {
  if (a.size() != b.size()) {
    return false;
  }
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (lower(a[i]) != lower(b[i])) {
      return false;
    }
  }
  return true;
}

}  // namespace

std::string_view to_string(LogLevel level) noexcept {
  switch (level) {
    case LogLevel::error:
      return "error";
    case LogLevel::warn:
      return "warn";
    case LogLevel::info:
      return "info";
    case LogLevel::debug:
      return "debug";
  }
  return "unknown";
}

std::optional<LogLevel> parse_log_level(std::string_view text) noexcept {
  for (LogLevel level : {LogLevel::error, LogLevel::warn, LogLevel::info, LogLevel::debug}) {
    if (equals_ignoring_case(text, to_string(level))) {
      return level;
    }
  }
  if (equals_ignoring_case(text, "warning")) {
    return LogLevel::warn;
  }
  return std::nullopt;
}

LogLevel log_level() noexcept {
  return static_cast<LogLevel>(current_level().load());
}

void set_log_level(LogLevel level) noexcept {
  current_level().store(static_cast<int>(level));
}

void set_process_log_rank(int rank) noexcept {
  process_rank.store(rank);
}

void set_thread_log_rank(int rank) noexcept {
  thread_rank = rank;
}

int log_rank() noexcept {
  return thread_rank != kNoRank ? thread_rank : process_rank.load();
}

std::string format_log_line(LogLevel level, int rank, std::string_view message) {
  using Clock = std::chrono::system_clock;
  const auto now = Clock::now();
  const std::time_t seconds = Clock::to_time_t(now);
  const auto millis =
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  char time_text[32];
  std::strftime(time_text, sizeof(time_text), "%Y-%m-%dT%H:%M:%S", &utc);

  static constexpr const char* kLevelNames[] = {"ERROR", "WARN", "INFO", "DEBUG"};
  std::string line = "[cohort ";
  line.append(time_text);
  char millis_text[8];
  std::snprintf(millis_text, sizeof(millis_text), ".%03dZ", static_cast<int>(millis));
  line.append(millis_text);
  line.append(" rank ");
  line.append(rank == kNoRank ? std::string("-") : std::to_string(rank));
  line.push_back(' ');
  line.append(kLevelNames[static_cast<int>(level)]);
  line.append("] ");
  line.append(message);
  return line;
}

void log(LogLevel level, std::string_view message) {
  if (!log_enabled(level)) {
    return;
  }
  std::string line = format_log_line(level, log_rank(), message);
  line.push_back('\n');
  const std::lock_guard<std::mutex> lock(output_mutex());
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
}

}  // namespace cohort
