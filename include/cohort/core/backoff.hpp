#pragma once

/// @file
/// `Backoff`: the pauses of a polling loop, doubling from a short first pause up to a cap, so a
/// wait that ends soon is noticed soon and a long one does not burn a core.

#include <algorithm>
#include <chrono>
#include <thread>

namespace cohort {

class Backoff {
 public:
  constexpr Backoff(std::chrono::microseconds first, std::chrono::microseconds cap) noexcept
      : pause_(first), cap_(std::max(first, cap)) {}

  /// The pause to take now; the next one is twice as long, up to the cap.
  std::chrono::microseconds next() noexcept {
    const auto now = pause_;
    pause_ = std::min(pause_ * 2, cap_);
    return now;
  }

  /// Sleeps for `next()`.
  void sleep() { std::this_thread::sleep_for(next()); }

  /// Sleeps for `next()` or until `deadline`, whichever comes first (not at all once it passed),
  /// so a loop polling until a deadline never oversleeps it.
  void sleep(std::chrono::steady_clock::time_point deadline) {
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) return;
    const auto pause = next();
    std::this_thread::sleep_until(deadline - now < pause ? deadline : now + pause);
  }

 private:
  std::chrono::microseconds pause_;
  std::chrono::microseconds cap_;
};

}  // namespace cohort
