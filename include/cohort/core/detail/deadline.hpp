#pragma once

// Deadlines for blocking calls (not public API): a timeout turned into a point in time without
// overflowing, and a wait cut into slices so that something can be looked at between them.
// Note [Private headers of an area] in docs/design.md says why they live here.

#include <cohort/core/error.hpp>

#include <algorithm>
#include <chrono>

namespace cohort::detail {

/// Now + `timeout`, saturating at the clock's maximum (so `milliseconds::max()` means "never")
/// and clamping negative timeouts to now.
inline std::chrono::steady_clock::time_point deadline_after(
    std::chrono::milliseconds timeout) noexcept {
  using Clock = std::chrono::steady_clock;
  const auto now = Clock::now();
  if (timeout <= std::chrono::milliseconds::zero()) return now;
  // Compare in milliseconds: converting a huge timeout to the clock's nanoseconds would overflow.
  const auto room =
      std::chrono::duration_cast<std::chrono::milliseconds>(Clock::time_point::max() - now);
  if (timeout >= room) return Clock::time_point::max();
  return now + timeout;
}

/// `a + b`, saturating instead of overflowing.
inline std::chrono::milliseconds saturating_add(std::chrono::milliseconds a,
                                                std::chrono::milliseconds b) noexcept {
  std::chrono::milliseconds::rep sum = 0;
  if (__builtin_add_overflow(a.count(), b.count(), &sum)) {
    return b.count() > 0 ? std::chrono::milliseconds::max() : std::chrono::milliseconds::min();
  }
  return std::chrono::milliseconds(sum);
}

/// Runs `attempt(slice)` (a wait of at most `slice` that throws TimeoutError when it ends empty)
/// until it returns or `timeout` passes, calling `between()` after each slice that timed out (it
/// may throw to end the wait); at the deadline calls `expire()`, which throws the TimeoutError
/// for the whole wait. Slices are at least 1 ms, so the waits never see a zero timeout.
template <typename Attempt, typename Between, typename Expire>
auto in_slices(std::chrono::milliseconds timeout, std::chrono::milliseconds slice, Attempt attempt,
               Between between, Expire expire) {
  using Clock = std::chrono::steady_clock;
  using std::chrono::milliseconds;
  const auto deadline = deadline_after(timeout);
  for (;;) {
    const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
    try {
      return attempt(std::max(std::min(left, slice), milliseconds(1)));
    } catch (const TimeoutError&) {
      if (Clock::now() >= deadline) expire();
    }
    between();
  }
}

}  // namespace cohort::detail
