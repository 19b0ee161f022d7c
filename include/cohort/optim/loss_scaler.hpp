#pragma once

/// @file
/// `LossScaler`: dynamic loss scaling for f16 training, with its state where the step runs.
///
///     cohort::LossScaler scaler(device);            // scale 2^16
///     optimizer.set_loss_scaler(&scaler);
///     // each step: loss x scaler.scale_view() (in stream order), backward, sync grads, then
///     optimizer.step();   // unscale, skip on inf/NaN on any rank, update the scale
///
/// The scale starts at `initial_scale`, doubles after `growth_interval` clean steps in a row and
/// halves on a step whose gradients hold inf or NaN on any rank; that step is skipped on every
/// rank. The state (scale, clean-step count, skipped steps) lives in device memory on a GPU (host
/// memory on the host) and is updated by the optimizer's step in stream order, with no host sync
/// (Note [Step scalars] in kernels/optimizer_math.hpp), so a CUDA graph can replay the step.

#include <cohort/core/device.hpp>
#include <cohort/core/stream.hpp>
#include <cohort/core/tensor_view.hpp>
#include <cohort/memory/buffer.hpp>

#include <cstdint>

namespace cohort {

namespace detail {
class OptimizerImpl;
}

struct LossScalerOptions {
  float initial_scale = 65536.0f;  ///< 2^16
  float growth_factor = 2.0f;
  float backoff_factor = 0.5f;
  int growth_interval = 2000;  ///< clean steps before the scale grows
  float min_scale = 1.0f;
  float max_scale = 16777216.0f;  ///< 2^24
};

/// The scaler's state as read on the host.
struct LossScalerSnapshot {
  float scale = 0.0f;
  int growth_tracker = 0;          ///< clean steps since the scale last changed
  std::int64_t skipped_steps = 0;  ///< steps skipped for inf or NaN, in total
  bool last_step_skipped = false;
};

class LossScaler {
 public:
  /// A scaler whose state lives on `device` (device memory on a GPU, host memory on the host).
  /// @throws InvalidArgument for options out of range (factors, interval, bounds).
  explicit LossScaler(Device device, const LossScalerOptions& options = {});
  ~LossScaler();
  LossScaler(const LossScaler&) = delete;
  LossScaler& operator=(const LossScaler&) = delete;

  Device device() const noexcept { return device_; }
  const LossScalerOptions& options() const noexcept { return options_; }

  /// The current scale: one f32 in the state's memory, for a loss kernel to multiply by. Read it
  /// in stream order on the optimizer's stream: a step changes it for the next step.
  TensorView scale_view() const;

  /// Waits for the work on `stream` (the optimizer's stream), then reads the state.
  LossScalerSnapshot read(const Stream& stream) const;

  /// The whole state as bytes (u8, in the state's memory), for a copy on another stream after an
  /// event on the optimizer's stream (a checkpoint's asynchronous save), where `read` would
  /// block; the optimizer's next `step()` must wait for that copy (`Optimizer::write_after`).
  TensorView state_view() const;
  /// What a host copy of `state_view()` holds.
  static LossScalerSnapshot decode(const void* state_copy);

  /// Sets the state, as a checkpoint restores it: waits for the work on `stream`, then writes.
  /// @throws InvalidArgument for a scale that is not positive and finite, or negative counts.
  void restore(const LossScalerSnapshot& snapshot, const Stream& stream);

 private:
  friend class detail::OptimizerImpl;
  void* state() const noexcept { return const_cast<void*>(state_.data()); }

  Device device_;
  LossScalerOptions options_;
  Buffer state_;
};

}  // namespace cohort
