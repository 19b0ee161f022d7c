#pragma once

/// @file
/// The arithmetic of one optimizer step, written once for host and device: the per-element
/// updates (SGD, AdamW), the scalars a step reads, and `prepare_step`, which turns the gradient
/// statistics, the loss scaler's state and the schedule into those scalars.
///
/// Note [Step scalars]
/// Everything that changes from step to step (the step counter, this step's learning rate, bias
/// corrections, the gradient multiplier 1/loss_scale x clip coefficient, whether the step is
/// skipped) lives in a `StepScalars` block in the memory the step runs on: device memory on a GPU,
/// host memory on the host. Each step, `prepare_step` (one CUDA thread, or a host task) updates
/// the block from the all-reduced `GradStats`, and the fused update reads it. Kernel arguments
/// are then the same every step, so a captured CUDA graph replays the step, the schedule and the
/// loss scaler correctly, and the host never waits for the device.

#include <cohort/core/float16.hpp>
#include <cohort/core/host_device.hpp>
#include <cohort/kernels/lr_schedule.hpp>

#include <math.h>  // ::sqrt, ::sqrtf: the same names in host and device code
#include <cstdint>
#include <cstring>

namespace cohort::kernels {

/// Statistics of the gradients one rank owns, all-reduced across ranks as two doubles.
struct GradStats {
  double sum_of_squares = 0.0;  ///< of the finite gradient values, as they are (still scaled)
  double nonfinite = 0.0;       ///< how many values are inf or NaN
};
static_assert(sizeof(GradStats) == 2 * sizeof(double));

/// The dynamic loss scaler's state (Note [Step scalars]).
struct LossScalerState {
  float scale = 65536.0f;
  std::int32_t growth_tracker = 0;  ///< clean steps since the scale last changed
  std::int64_t skipped_steps = 0;   ///< steps skipped for overflow, in total
  std::int32_t last_found_inf = 0;  ///< whether the last step found inf or NaN
  std::int32_t padding = 0;
};

/// How the loss scale moves (plain values, kernel arguments).
struct LossScalerParams {
  float growth_factor = 2.0f;
  float backoff_factor = 0.5f;
  std::int32_t growth_interval = 2000;
  float min_scale = 1.0f;
  float max_scale = 16777216.0f;
};

/// The scalars of one step (Note [Step scalars]).
struct StepScalars {
  GradStats stats;                         ///< first, so that it can be all-reduced in place
  std::int64_t step = 0;                   ///< steps taken (skipped ones excluded)
  float lr = 0.0f;                         ///< this step's learning rate
  float grad_multiplier = 1.0f;            ///< 1 / loss scale x clip coefficient
  float grad_norm = 0.0f;                  ///< global L2 norm of the unscaled gradients
  float step_size = 0.0f;                  ///< AdamW: lr / (1 - beta1^t)
  float inv_sqrt_bias_correction2 = 1.0f;  ///< AdamW: 1 / sqrt(1 - beta2^t)
  float decay = 1.0f;                      ///< AdamW: 1 - lr x weight_decay
  std::int32_t skip = 0;                   ///< 1: found inf or NaN, leave everything as it is
  std::int32_t first_step = 0;             ///< SGD: the momentum buffer starts as the gradient
};

enum class UpdateRule : std::uint8_t { sgd, adamw };

struct SgdHyper {
  float momentum = 0.0f;
  float dampening = 0.0f;
  float weight_decay = 0.0f;  ///< L2, added to the gradient (as PyTorch's SGD)
  bool nesterov = false;
};

struct AdamWHyper {
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 1e-2f;  ///< decoupled: p *= 1 - lr x weight_decay
};

struct UpdateHyper {
  UpdateRule rule = UpdateRule::adamw;
  SgdHyper sgd = {};
  AdamWHyper adamw = {};
};

/// What `prepare_step` needs besides the block (plain values, kernel arguments).
struct PrepareArgs {
  float base_lr = 0.0f;
  LrSchedule schedule = {};
  UpdateHyper hyper = {};
  float max_grad_norm = 0.0f;  ///< > 0: scale the gradients down to this global norm
  bool stats_valid = false;    ///< `stats` hold this step's all-reduced statistics
  bool use_scaler = false;     ///< a loss scaler is attached (its state pointer is not null)
  LossScalerParams scaler = {};
};

COHORT_HOST_DEVICE inline bool is_finite(double value) {
  std::uint64_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return (bits & 0x7FF0000000000000ull) != 0x7FF0000000000000ull;
}

COHORT_HOST_DEVICE inline bool is_finite(float value) {
  return (cohort::detail::float_bits(value) & 0x7F800000u) != 0x7F800000u;
}

/// Updates the step scalars and the loss scaler's state for one step, from `s.stats` (when
/// valid). The gradient multiplier uses the scale the gradients were computed with; the scale
/// then moves for the next step.
COHORT_HOST_DEVICE inline void prepare_step(StepScalars& s, LossScalerState* scaler,
                                            const PrepareArgs& args) {
  const float inv_scale = scaler != nullptr ? 1.0f / scaler->scale : 1.0f;
  const bool found_inf = args.stats_valid && s.stats.nonfinite > 0.0;
  float clip = 1.0f;
  if (args.stats_valid) {
    const double norm = ::sqrt(s.stats.sum_of_squares) * static_cast<double>(inv_scale);
    // With inf or NaN among the gradients there is no norm: report NaN.
    s.grad_norm = found_inf ? cohort::detail::bits_float(0x7FC00000u) : static_cast<float>(norm);
    const double max_norm = static_cast<double>(args.max_grad_norm);
    if (!found_inf && max_norm > 0.0 && norm > max_norm) {
      clip = static_cast<float>(max_norm / (norm + 1e-6));  // PyTorch's clip_grad_norm_
    }
  }
  s.grad_multiplier = inv_scale * clip;
  if (args.use_scaler && scaler != nullptr) {
    const LossScalerParams& p = args.scaler;
    scaler->last_found_inf = found_inf ? 1 : 0;
    if (found_inf) {
      const float lowered = scaler->scale * p.backoff_factor;
      scaler->scale = lowered < p.min_scale ? p.min_scale : lowered;
      scaler->growth_tracker = 0;
      scaler->skipped_steps += 1;
    } else if (++scaler->growth_tracker >= p.growth_interval) {
      const float raised = scaler->scale * p.growth_factor;
      scaler->scale = raised > p.max_scale ? p.max_scale : raised;
      scaler->growth_tracker = 0;
    }
  }
  s.skip = found_inf && args.use_scaler ? 1 : 0;
  if (s.skip != 0) {
    return;
  }
  s.step += 1;
  s.first_step = s.step == 1 ? 1 : 0;
  s.lr = args.base_lr * args.schedule.factor(s.step);
  if (args.hyper.rule == UpdateRule::adamw) {
    const AdamWHyper& h = args.hyper.adamw;
    const double t = static_cast<double>(s.step);
    const double correction1 = 1.0 - ::pow(static_cast<double>(h.beta1), t);
    const double correction2 = 1.0 - ::pow(static_cast<double>(h.beta2), t);
    s.step_size = static_cast<float>(static_cast<double>(s.lr) / correction1);
    s.inv_sqrt_bias_correction2 = static_cast<float>(1.0 / ::sqrt(correction2));
    s.decay = 1.0f - s.lr * h.weight_decay;
  }
}

/// One element of an SGD step (PyTorch's rule): g += wd p; with momentum, buf = g on the first
/// step, else momentum buf + (1 - dampening) g, and g = buf (or g + momentum buf, Nesterov);
/// p -= lr g. `g` is already multiplied by `grad_multiplier`.
struct SgdUpdate {
  SgdHyper hyper;
  COHORT_HOST_DEVICE void operator()(float& param, float grad, float& buffer, float& /*unused*/,
                                     const StepScalars& s) const {
    float g = grad + hyper.weight_decay * param;
    if (hyper.momentum != 0.0f) {
      buffer = s.first_step != 0 ? g : hyper.momentum * buffer + (1.0f - hyper.dampening) * g;
      g = hyper.nesterov ? g + hyper.momentum * buffer : buffer;
    }
    param -= s.lr * g;
  }
};

/// One element of an AdamW step: m and v move toward g and g^2; p decays by 1 - lr wd and moves
/// by step_size m / (sqrt(v) / sqrt(1 - beta2^t) + eps), as PyTorch's AdamW.
struct AdamWUpdate {
  AdamWHyper hyper;
  COHORT_HOST_DEVICE void operator()(float& param, float grad, float& m, float& v,
                                     const StepScalars& s) const {
    m = hyper.beta1 * m + (1.0f - hyper.beta1) * grad;
    v = hyper.beta2 * v + (1.0f - hyper.beta2) * grad * grad;
    const float denominator = ::sqrtf(v) * s.inv_sqrt_bias_correction2 + hyper.eps;
    param = param * s.decay - s.step_size * m / denominator;
  }
};

}  // namespace cohort::kernels
