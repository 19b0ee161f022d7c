#pragma once

// Helpers shared by the store implementations (private to src/launch).

#include <cohort/core/error.hpp>
#include <cohort/launch/store.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace cohort::detail {

using Clock = std::chrono::steady_clock;

/// Now + `timeout`, saturating at the clock's maximum (so `Milliseconds::max()` means "never")
/// and clamping negative timeouts to now.
Clock::time_point deadline_after(Milliseconds timeout) noexcept;

/// Runs `attempt(slice)` (a store wait of at most `slice`) until it returns or `timeout` passes,
/// calling `between()` after each slice that timed out (it may throw to end the wait); at the
/// deadline calls `expire()`, which throws the TimeoutError for the whole wait. Slices are at
/// least 1 ms, so a store never sees a zero timeout.
template <typename Attempt, typename Between, typename Expire>
auto in_slices(Milliseconds timeout, Milliseconds slice, Attempt attempt, Between between,
               Expire expire) {
  const auto deadline = deadline_after(timeout);
  for (;;) {
    const auto left = std::chrono::duration_cast<Milliseconds>(deadline - Clock::now());
    try {
      return attempt(std::max(std::min(left, slice), Milliseconds(1)));
    } catch (const TimeoutError&) {
      if (Clock::now() >= deadline) expire();
    }
    between();
  }
}

/// `a + b`, saturating instead of overflowing.
Milliseconds saturating_add(Milliseconds a, Milliseconds b) noexcept;

/// `key` in double quotes, with bytes that are not printable ASCII written as \xNN, cut after
/// `max_bytes` bytes (marked with "...").
std::string quote_bytes(std::string_view bytes, std::size_t max_bytes = 128);

/// "cohort: timed out after ... waiting for keys ... in <store>; check that ..." without the
/// "cohort: " prefix that the error macros add.
std::string timeout_message(std::string_view store, const std::vector<std::string>& missing_keys,
                            Milliseconds waited);

/// @throws InvalidArgument when `key` is empty.
void check_key(std::string_view key);

/// Parses a decimal integer ("-12", "7"); nullopt for anything else (empty, spaces, overflow).
std::optional<std::int64_t> parse_integer(std::string_view text) noexcept;

/// What `add` does to a stored value, shared by every store so that they all fail alike.
/// Returns the new value, or sets `error` (a message without the "cohort: " prefix).
std::optional<std::int64_t> apply_add(std::string_view key, const std::string* current,
                                      std::int64_t delta, std::string& error);

/// The system's text for `errnum` (thread-safe, unlike strerror).
std::string system_error_text(int errnum);

/// An owned file descriptor, closed on destruction.
class UniqueFd {
 public:
  UniqueFd() noexcept = default;
  explicit UniqueFd(int fd) noexcept : fd_(fd) {}
  ~UniqueFd() { reset(); }
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    if (this != &other) reset(other.release());
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;

  int get() const noexcept { return fd_; }
  bool valid() const noexcept { return fd_ >= 0; }
  int release() noexcept {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void reset(int fd = -1) noexcept;

 private:
  int fd_ = -1;
};

}  // namespace cohort::detail
