#pragma once

// Private to the optimizers: the machinery behind `Optimizer` (Note [Fused optimizer step]),
// shared by SGD, AdamW and their ZeRO-1 form, which differ only in their `OptimizerConfig`.

#include <cohort/kernels/launch.hpp>
#include <cohort/memory/buffer.hpp>
#include <cohort/optim/loss_scaler.hpp>
#include <cohort/optim/optimizer.hpp>
#include <cohort/optim/schedule.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

namespace cohort::detail {

struct OptimizerConfig {
  kernels::UpdateHyper hyper = {};
  float lr = 0.0f;
  LrSchedule schedule = {};
  std::shared_ptr<MemoryResource> state_resource = nullptr;
  bool sharded = false;               ///< ZeRO-1 (Note [ZeRO-1 step])
  bool reduce_scatter_grads = false;  ///< ZeRO-1: reduce-scatter in step()
};

class OptimizerImpl {
 public:
  OptimizerImpl(const OptimizerTarget& target, const OptimizerConfig& config);

  void step();
  void write_after(const Event& event) { pending_reader_ = event; }
  void call_before_next_write(std::function<void()> release) {
    pending_releases_.push_back(std::move(release));
  }
  void set_loss_scaler(LossScaler* scaler);
  void request_clip(float max_norm);
  float read_grad_norm() const;
  std::int64_t steps_taken() const;
  TensorView steps_taken_view() const;
  void restore_steps_taken(std::int64_t steps);
  const OptimizerConfig& config() const noexcept { return config_; }
  /// ZeRO-1, or a shard from the data-parallel engine (ZeRO-2, ZeRO-3).
  bool is_sharded() const noexcept { return config_.sharded || target_.grads_sharded; }
  std::vector<OptimizerStateView> state() const;

  const OptimizerTarget& target() const noexcept { return target_; }
  std::size_t offset() const noexcept { return offset_; }
  std::size_t count() const noexcept { return count_; }
  std::size_t state_bytes() const noexcept;
  float lr() const noexcept { return config_.lr; }
  void set_lr(float lr);

 private:
  kernels::StepScalars* scalars() noexcept {
    return static_cast<kernels::StepScalars*>(scalars_.data());
  }
  const kernels::StepScalars* scalars() const noexcept {
    return static_cast<const kernels::StepScalars*>(scalars_.data());
  }
  kernels::LossScalerState* scaler_state() const noexcept;
  kernels::StepArrays arrays() noexcept;
  /// The arrays of each piece of a sharded target (`OptimizerTarget::pieces`); `arrays()` alone
  /// otherwise.
  std::vector<kernels::StepArrays> piece_arrays();
  Buffer allocate_state(std::size_t count);
  /// ZeRO-1: the averaged gradients of this rank's shard, once per step.
  void reduce_grads();
  /// The gradient statistics of this step, all-reduced, once per step.
  void compute_stats();
  bool is_cuda() const noexcept { return target_.stream.device().is_cuda(); }

  OptimizerTarget target_;
  OptimizerConfig config_;
  std::size_t offset_ = 0;
  std::size_t count_ = 0;
  TensorView params_;  // this rank's range
  TensorView grads_;
  std::shared_ptr<MemoryResource> resource_;
  Buffer scalars_;
  Buffer master_;
  Buffer state0_;
  Buffer state1_;
  LossScaler* scaler_ = nullptr;
  std::optional<Event> pending_reader_;  ///< the next step's writes wait for it (write_after)
  std::vector<std::function<void()>> pending_releases_;  ///< the next step calls them first
  // What this step has done so far (host-side; reset by step()).
  bool grads_reduced_ = false;
  bool stats_ready_ = false;
  float clip_max_norm_ = 0.0f;
};

}  // namespace cohort::detail
