#pragma once

/// @file
/// Learning-rate schedules: a factor of the optimizer's base learning rate for each step. The
/// type lives beside the kernels that evaluate it, below the optimizers that take it
/// (`cohort/optim/schedule.hpp` is its public name for users).
///
/// A schedule is a plain value that the optimizer evaluates where the step runs (in the tiny
/// kernel that prepares each step on a GPU), from the step counter kept there, so a captured CUDA
/// graph replays the schedule correctly. Steps count from 1 (the first step taken); steps skipped
/// by the loss scaler do not count.

#include <cohort/core/host_device.hpp>

#include <math.h>  // ::cos, which CUDA also provides in device code
#include <cstdint>

namespace cohort {

struct LrSchedule {
  enum class Kind : std::uint8_t {
    constant,       ///< factor 1
    warmup_cosine,  ///< linear warm-up from 0 to 1, then cosine decay to `min_factor`
  };
  Kind kind = Kind::constant;
  /// Steps of the linear warm-up: step s in [1, warmup_steps] has factor s / warmup_steps.
  std::int64_t warmup_steps = 0;
  /// The step at which the cosine reaches `min_factor` (and stays).
  std::int64_t total_steps = 0;
  /// The final factor of the cosine decay.
  float min_factor = 0.0f;

  /// Factor 1 for every step.
  static constexpr LrSchedule constant() noexcept { return LrSchedule{}; }

  /// Linear warm-up over `warmup_steps`, then a half cosine from 1 down to `min_factor` at
  /// `total_steps`. Requires 0 <= warmup_steps <= total_steps (checked by the optimizer).
  static constexpr LrSchedule warmup_cosine(std::int64_t warmup_steps, std::int64_t total_steps,
                                            float min_factor = 0.0f) noexcept {
    return LrSchedule{Kind::warmup_cosine, warmup_steps, total_steps, min_factor};
  }

  /// The factor of the base learning rate for step `step` (1 for the first step taken).
  COHORT_HOST_DEVICE float factor(std::int64_t step) const {
    if (kind == Kind::constant) {
      return 1.0f;
    }
    if (step <= warmup_steps && warmup_steps > 0) {
      return static_cast<float>(static_cast<double>(step) / static_cast<double>(warmup_steps));
    }
    if (step >= total_steps) {
      return min_factor;
    }
    const double progress =
        static_cast<double>(step - warmup_steps) / static_cast<double>(total_steps - warmup_steps);
    const double cosine = 0.5 * (1.0 + ::cos(3.14159265358979323846 * progress));
    const double floor = static_cast<double>(min_factor);
    return static_cast<float>(floor + (1.0 - floor) * cosine);
  }
};

}  // namespace cohort
