#pragma once

/// @file
/// `Optimizer`: what every fused optimizer (SGD, AdamW, and their ZeRO-1 sharded form) shares,
/// and `OptimizerTarget`, the flat arenas it steps.
///
/// Note [Fused optimizer step]
/// An optimizer steps a flat parameter arena from a gradient arena of the same layout, in one
/// fused pass (one CUDA kernel, or one host loop): each gradient is multiplied by 1/loss scale x
/// clip coefficient, the update runs in fp32 (on fp32 master weights for bf16 or f16 params),
/// and the params are written back. Before it, when a loss scaler is attached or clipping is
/// asked for, one reduction pass computes the gradients' sum of squares and count of inf/NaN,
/// all-reduced across ranks in one collective of two doubles (sum when each rank holds a distinct
/// shard, max when the gradients are replicated; either way every rank sees an inf found on any
/// rank, and all of them skip that step). A tiny kernel then turns the statistics, the loss
/// scaler's state and the schedule into the step's scalars, in device memory (Note [Step
/// scalars]). Nothing waits for the device: `step()` only enqueues.
///
/// Stream contract: every call that takes effect on the arenas (`step`, `clip_grad_norm`,
/// construction) runs in stream order on `target.stream`, after the work enqueued there before
/// the call. The arenas must stay alive and untouched by other streams until that work is done.
/// Calls that return a value from the device (`steps_taken`, `GradNorm::value`) wait for the
/// stream. An optimizer is used from one thread at a time.

#include <cohort/comm/communicator.hpp>
#include <cohort/core/stream.hpp>
#include <cohort/core/tensor_view.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace cohort {

class LossScaler;
class Optimizer;

namespace detail {
class OptimizerImpl;
}

/// What an optimizer steps.
struct OptimizerTarget {
  /// The whole flat parameter arena: f32, or bf16/f16 with fp32 master weights kept by the
  /// optimizer (initialised from these values at construction).
  TensorView params;
  /// The gradient arena: the same count and layout, in the params' dtype or f32.
  TensorView grads;
  /// Where the step runs (the compute stream), on the arenas' device.
  Stream stream;
  /// For the gradient statistics across ranks and for ZeRO-1; may be null for one rank.
  Communicator* comm = nullptr;
};

/// The global L2 norm of the unscaled gradients of one step, computed on the device; `value()`
/// waits for it. Valid while its optimizer lives, until the next step's norm replaces it.
class GradNorm {
 public:
  /// Waits for the optimizer's stream and returns the norm: NaN when a gradient was inf or NaN.
  float value() const;

 private:
  friend class Optimizer;
  explicit GradNorm(const Optimizer* optimizer) : optimizer_(optimizer) {}
  const Optimizer* optimizer_;
};

/// One named array of optimizer state ("momentum_buffer", "exp_avg", "exp_avg_sq", "master").
struct OptimizerStateView {
  std::string name;
  TensorView view;
};

class Optimizer {
 public:
  virtual ~Optimizer();
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  /// One step over the arena (Note [Fused optimizer step]). With a loss scaler attached, the
  /// gradients are taken as scaled by it: they are unscaled in the step, a step with inf or NaN
  /// on any rank is skipped, and the scale is updated. The gradient arena is read, not changed
  /// (except its shard by the ZeRO-1 reduce-scatter).
  void step();

  /// Makes the next `step()` wait for `event` before it writes the parameters or the state: for
  /// a reader of them on another stream (a checkpoint's host copy, Note [Checkpoint copy] in
  /// checkpoint.hpp), which then overlaps the next step's forward and backward. On a host stream
  /// that runs tasks on the caller, `step()` blocks until the event completes.
  void write_after(const Event& event);

  /// Makes the next `step()` call `release` on its calling thread, once, before it writes the
  /// parameters or the state: for a reader of them in place that must finish with them or copy
  /// them away first (a host checkpoint's writer, Note [Checkpoint in place] in snapshot.cpp).
  /// Several calls before that step: each is called, in order (two Checkpointers saving).
  void call_before_next_write(std::function<void()> release);

  /// Attaches a loss scaler (on the same device), or detaches it with nullptr. The scaler must
  /// outlive its use by this optimizer; one scaler serves one optimizer.
  void set_loss_scaler(LossScaler* scaler);

  /// Computes the global gradient norm now (in stream order) and makes the next `step()` scale
  /// the gradients down to `max_norm` when the norm is larger. Prefer the free function
  /// `cohort::clip_grad_norm` (clip.hpp).
  GradNorm clip_grad_norm(float max_norm);

  /// The base learning rate (the schedule's factor multiplies it). Setting it affects the next
  /// step (and changes the step's kernel arguments: recapture a CUDA graph).
  float learning_rate() const noexcept;
  void set_learning_rate(float lr);

  /// Steps taken so far (skipped steps excluded). Waits for the stream.
  std::int64_t steps_taken() const;

  /// The steps-taken counter itself: one i64 in the optimizer's memory (device memory on a GPU),
  /// written by `step()` in stream order. For a copy on another stream after an event on the
  /// optimizer's stream (a checkpoint's asynchronous save), where `steps_taken()` would block;
  /// the next `step()` must wait for that copy (`write_after`).
  TensorView steps_taken_view() const;

  /// Sets the steps taken, as a checkpoint restores them: the schedule's position and AdamW's
  /// bias correction follow it. Waits for the stream, then writes.
  void restore_steps_taken(std::int64_t steps);

  /// The update rule, "sgd" or "adamw" (what a checkpoint checks before loading state).
  const char* rule_name() const noexcept;
  /// Whether this is a ZeRO-1 optimizer (its state covers its shard only).
  bool is_sharded() const noexcept;

  /// The range of the arena this rank steps and keeps state for: all of it, or its ZeRO-1 shard.
  std::size_t shard_offset() const noexcept;
  std::size_t shard_count() const noexcept;

  /// Bytes of optimizer state this rank holds (moments, master weights), all accounted as
  /// `MemoryCategory::optimizer_state` in the memory report.
  std::size_t state_bytes() const noexcept;

  /// The state arrays of this rank's range (views of its memory; read after the stream).
  std::vector<OptimizerStateView> state() const;

  const OptimizerTarget& target() const noexcept;

 protected:
  explicit Optimizer(std::unique_ptr<detail::OptimizerImpl> impl);

 private:
  friend class GradNorm;
  std::unique_ptr<detail::OptimizerImpl> impl_;
};

/// The optimizers that exist now and step the parameter arena starting at `params` (its first
/// element), oldest first; valid while they live. A Checkpointer built `without_optimizer` asks,
/// so that no optimizer's state is left out of a checkpoint unseen (Note [Checkpoint optimizer
/// state] in checkpoint.hpp). Thread-safe.
std::vector<const Optimizer*> optimizers_stepping(const void* params);

}  // namespace cohort
