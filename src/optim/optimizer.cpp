// The machinery of every fused optimizer (Note [Fused optimizer step] in optimizer.hpp): state,
// scalars, gradient statistics, and the order of work on the stream, for both backends.

#include "optimizer_impl.hpp"

#include <cohort/core/detail/current_device.hpp>
#include <cohort/core/error.hpp>
#include <cohort/memory/detail/state_resource.hpp>
#include <cohort/memory/detail/stream_copy.hpp>
#include <cohort/memory/managed.hpp>
#include <cohort/memory/memory_estimate.hpp>
#include <cohort/memory/memory_report.hpp>

#include <cmath>
#include <limits>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace cohort {
namespace detail {
namespace {

void check_schedule(const LrSchedule& schedule) {
  if (schedule.kind == LrSchedule::Kind::warmup_cosine) {
    COHORT_EXPECTS(schedule.warmup_steps >= 0 && schedule.warmup_steps <= schedule.total_steps &&
                       schedule.total_steps >= 1,
                   "a warm-up and cosine schedule needs 0 <= warmup_steps <= total_steps and "
                   "total_steps >= 1, got " +
                       std::to_string(schedule.warmup_steps) + " and " +
                       std::to_string(schedule.total_steps));
    COHORT_EXPECTS(schedule.min_factor >= 0.0f && schedule.min_factor <= 1.0f,
                   "a schedule's min_factor must be in [0, 1]");
  }
}

// Note [Optimizer scalars in device memory]
// The step's scalars (StepScalars, with the gradient statistics that clipping and the loss scaler
// all-reduce) are read by NCCL, and NCCL must never read managed or host memory (docs/memory.md,
// "Memory placement", rule 1). They live with the state when the state is device memory of the
// optimizer's GPU (a device pool, or an adaptor over one), and in the default device pool
// otherwise: managed state (which may even oversubscribe the GPU, Note [Oversubscribed managed
// memory]) or pinned host state keeps only the large arrays, prefetched before each step.

/// Where the scalars of an optimizer on `device` with state from `state` live.
std::shared_ptr<MemoryResource> scalar_resource(const std::shared_ptr<MemoryResource>& state,
                                                Device device) {
  if (device.is_host()) return state;
  const bool device_memory = state->device() == device && !state->host_accessible();
  return device_memory ? state : default_state_resource(device);
}

int world_size(const Communicator* comm) {
  return comm != nullptr ? comm->size() : 1;
}
int world_rank(const Communicator* comm) {
  return comm != nullptr ? comm->rank() : 0;
}

}  // namespace

OptimizerImpl::OptimizerImpl(const OptimizerTarget& target, const OptimizerConfig& config)
    : target_(target), config_(config), params_(target.params), grads_(target.grads) {
  const Device device = target.stream.device();
  if (!target.grads_sharded || target.pieces.empty()) {
    COHORT_EXPECTS_EQ(target.params.count(), target.grads.count(),
                      "an optimizer needs params and grads of the same count");
  }
  COHORT_EXPECTS(target.params.device() == device && target.grads.device() == device,
                 "the params (" + target.params.device().to_string() + "), grads (" +
                     target.grads.device().to_string() + ") and stream (" + device.to_string() +
                     ") of an optimizer must be on the same device");
  COHORT_EXPECTS(config.lr >= 0.0f, "the learning rate must not be negative");
  check_schedule(config.schedule);
  if (target.grads_sharded) {
    // Sharded by the data-parallel engine (ZeRO-2, ZeRO-3): the gradients are the shard already.
    count_ = target.grads.count();
    std::size_t next = 0;
    for (const OptimizerPiece& piece : target.pieces) {
      COHORT_EXPECTS(
          piece.shard_offset == next && piece.param_offset + piece.count <= target.params.count(),
          "an optimizer's pieces must cover the gradient shard in order, each inside "
          "the parameters");
      next += piece.count;
    }
    COHORT_EXPECTS(target.pieces.empty() || next == count_,
                   "an optimizer's pieces must cover the gradient shard exactly");
  } else if (config.sharded) {
    const auto size = static_cast<std::size_t>(world_size(target.comm));
    COHORT_EXPECTS(target.params.count() % size == 0,
                   "ZeRO-1 needs an arena padded to a multiple of the world size: " +
                       std::to_string(target.params.count()) + " elements on " +
                       std::to_string(size) + " ranks");
    count_ = target.params.count() / size;
    offset_ = static_cast<std::size_t>(world_rank(target.comm)) * count_;
  } else {
    count_ = target.params.count();
  }
  params_ = target.pieces.empty() ? target.params.slice(offset_, count_) : target.params;
  grads_ = target.grads.slice(offset_, count_);
  kernels::check_step_dtypes(params_.dtype(), grads_.dtype());

  resource_ = config.state_resource ? config.state_resource : default_state_resource(device);
  COHORT_EXPECTS(resource_->device_accessible() || device.is_host(),
                 "optimizer state for " + device.to_string() + " must be device-accessible, not " +
                     resource_->name());
  COHORT_EXPECTS(resource_->host_accessible() || device.is_cuda(),
                 "optimizer state for the host must be host-accessible, not " + resource_->name());

  const CurrentDevice current(device);
  const Stream& stream = target.stream;
  // Note [Optimizer scalars in device memory]
  scalars_ = Buffer(scalar_resource(resource_, device), sizeof(kernels::StepScalars), stream,
                    MemoryCategory::other);
  const kernels::StepScalars initial{};
  write_now(scalars_.data(), &initial, sizeof(initial), stream);

  const bool adamw = config.hyper.rule == kernels::UpdateRule::adamw;
  const std::size_t state_arrays = (params_.dtype() != DType::f32 ? 1U : 0U) +
                                   (adamw || config.hyper.sgd.momentum != 0.0f ? 1U : 0U) +
                                   (adamw ? 1U : 0U);
  check_memory_fits(*resource_, state_arrays * count_ * sizeof(float),
                    "the optimizer state (" + std::to_string(state_arrays) + " f32 arrays of " +
                        std::to_string(count_) + " parameters)");
  if (params_.dtype() != DType::f32) {
    master_ = allocate_state(count_);
    for (const kernels::StepArrays& piece : piece_arrays()) {
      const TensorView master(piece.master, piece.params.count(), DType::f32, device);
#if COHORT_WITH_CUDA
      if (is_cuda()) {
        kernels::cuda::cast(piece.params, master, stream.native_handle());
      }
#endif
      if (!is_cuda()) {
        stream.enqueue([from = piece.params, master] { kernels::host::cast(from, master); });
      }
    }
  }
  if (adamw || config.hyper.sgd.momentum != 0.0f) {
    state0_ = allocate_state(count_);
    zero_async(state0_.data(), state0_.size_bytes(), stream);
  }
  if (adamw) {
    state1_ = allocate_state(count_);
    zero_async(state1_.data(), state1_.size_bytes(), stream);
  }
  for (const kernels::StepArrays& piece : piece_arrays()) {
    kernels::check_step_arrays(piece, config_.hyper);
  }
}

Buffer OptimizerImpl::allocate_state(std::size_t count) {
  return Buffer(resource_, count * sizeof(float), target_.stream, MemoryCategory::optimizer_state);
}

kernels::LossScalerState* OptimizerImpl::scaler_state() const noexcept {
  return scaler_ != nullptr ? static_cast<kernels::LossScalerState*>(scaler_->state()) : nullptr;
}

kernels::StepArrays OptimizerImpl::arrays() noexcept {
  return kernels::StepArrays{params_, grads_, static_cast<float*>(master_.data()),
                             static_cast<float*>(state0_.data()),
                             static_cast<float*>(state1_.data())};
}

std::vector<kernels::StepArrays> OptimizerImpl::piece_arrays() {
  if (target_.pieces.empty()) {
    return {arrays()};
  }
  auto at = [](Buffer& buffer, std::size_t offset) {
    return buffer.empty() ? nullptr : static_cast<float*>(buffer.data()) + offset;
  };
  std::vector<kernels::StepArrays> pieces;
  pieces.reserve(target_.pieces.size());
  for (const OptimizerPiece& piece : target_.pieces) {
    pieces.push_back(kernels::StepArrays{
        params_.slice(piece.param_offset, piece.count),
        grads_.slice(piece.shard_offset, piece.count), at(master_, piece.shard_offset),
        at(state0_, piece.shard_offset), at(state1_, piece.shard_offset)});
  }
  return pieces;
}

std::size_t OptimizerImpl::state_bytes() const noexcept {
  return master_.size_bytes() + state0_.size_bytes() + state1_.size_bytes();
}

void OptimizerImpl::set_lr(float lr) {
  COHORT_EXPECTS(lr >= 0.0f, "the learning rate must not be negative");
  config_.lr = lr;
}

void OptimizerImpl::set_loss_scaler(LossScaler* scaler) {
  COHORT_EXPECTS(scaler == nullptr || scaler->device() == target_.stream.device(),
                 "a loss scaler on " + (scaler ? scaler->device().to_string() : std::string()) +
                     " cannot serve an optimizer on " + target_.stream.device().to_string());
  scaler_ = scaler;
}

void OptimizerImpl::reduce_grads() {
  if (!config_.sharded || !config_.reduce_scatter_grads || grads_reduced_ ||
      target_.grads_sharded) {
    return;
  }
  if (world_size(target_.comm) > 1) {
    target_.comm->reduce_scatter(target_.grads, grads_, ReduceOp::avg, target_.stream);
  }
  grads_reduced_ = true;
}

void OptimizerImpl::compute_stats() {
  if (stats_ready_) {
    return;
  }
  reduce_grads();
  const Stream& stream = target_.stream;
  kernels::GradStats* stats = &scalars()->stats;
#if COHORT_WITH_CUDA
  if (is_cuda()) {
    zero_async(stats, sizeof(*stats), stream);
    kernels::cuda::grad_stats(grads_, stats, stream.native_handle());
  }
#endif
  if (!is_cuda()) {
    stream.enqueue([grads = grads_, stats] { *stats = kernels::host::grad_stats(grads); });
  }
  // Sharded: each rank holds distinct gradients, so the statistics add up. Replicated: every
  // rank computed the same numbers (or, if they differ, max still makes every rank agree, and
  // an inf on any rank reaches all).
  if (world_size(target_.comm) > 1) {
    target_.comm->all_reduce(TensorView(stats, 2, DType::f64, stream.device()),
                             is_sharded() ? ReduceOp::sum : ReduceOp::max, stream);
  }
  stats_ready_ = true;
}

void OptimizerImpl::request_clip(float max_norm) {
  COHORT_EXPECTS(max_norm > 0.0f && std::isfinite(max_norm),
                 "clip_grad_norm needs a positive max_norm, got " + std::to_string(max_norm));
  const CurrentDevice current(target_.stream.device());
  compute_stats();
  clip_max_norm_ = max_norm;
}

void OptimizerImpl::step() {
  const CurrentDevice current(target_.stream.device());
  const Stream& stream = target_.stream;
  if (!pending_releases_.empty()) {
    const std::vector<std::function<void()>> releases = std::exchange(pending_releases_, {});
    for (const std::function<void()>& release : releases) release();
  }
  if (pending_reader_) {
    stream.wait(*pending_reader_);
    pending_reader_.reset();
  }
  reduce_grads();
  if (scaler_ != nullptr || clip_max_norm_ > 0.0f) {
    compute_stats();
  }
  kernels::PrepareArgs args;
  args.base_lr = config_.lr;
  args.schedule = config_.schedule;
  args.hyper = config_.hyper;
  args.max_grad_norm = clip_max_norm_;
  args.stats_valid = stats_ready_;
  args.use_scaler = scaler_ != nullptr;
  if (scaler_ != nullptr) {
    const LossScalerOptions& o = scaler_->options();
    args.scaler = kernels::LossScalerParams{o.growth_factor, o.backoff_factor, o.growth_interval,
                                            o.min_scale, o.max_scale};
  }
  kernels::StepScalars* scalars_pointer = scalars();
  kernels::LossScalerState* scaler_pointer = scaler_state();
#if COHORT_WITH_CUDA
  if (is_cuda()) {
    if (is_managed(*resource_)) {
      for (const Buffer* buffer : {&master_, &state0_, &state1_}) {
        if (!buffer->empty()) {
          managed::prefetch(*buffer, stream.device(), stream);
        }
      }
    }
    kernels::cuda::prepare_step(scalars_pointer, scaler_pointer, args, stream.native_handle());
    for (const kernels::StepArrays& piece : piece_arrays()) {
      kernels::cuda::optimizer_step(piece, config_.hyper, scalars_pointer, stream.native_handle());
    }
  }
#endif
  if (!is_cuda()) {
    stream.enqueue(
        [pieces = piece_arrays(), hyper = config_.hyper, args, scalars_pointer, scaler_pointer] {
          kernels::prepare_step(*scalars_pointer, scaler_pointer, args);
          for (const kernels::StepArrays& piece : pieces) {
            kernels::host::optimizer_step(piece, hyper, *scalars_pointer);
          }
        });
  }
  if (config_.sharded && !target_.grads_sharded && world_size(target_.comm) > 1) {
    target_.comm->all_gather(params_, target_.params, stream);
  }
  if (target_.after_step) {
    target_.after_step();
  }
  grads_reduced_ = false;
  stats_ready_ = false;
  clip_max_norm_ = 0.0f;
  detail::label_host_work(stream, "the optimizer's step()");  // Note [Unwaited host work]
}

float OptimizerImpl::read_grad_norm() const {
  kernels::StepScalars values;
  read_after(&values, scalars(), sizeof(values), target_.stream);
  if (!stats_ready_) {
    return values.grad_norm;  // prepared by the last step
  }
  // Computed, not yet stepped: unscale here, with the scale the gradients were computed with.
  if (values.stats.nonfinite > 0.0) {
    return std::numeric_limits<float>::quiet_NaN();
  }
  double scale = 1.0;
  if (scaler_ != nullptr) {
    scale = static_cast<double>(scaler_->read(target_.stream).scale);
  }
  return static_cast<float>(std::sqrt(values.stats.sum_of_squares) / scale);
}

std::int64_t OptimizerImpl::steps_taken() const {
  kernels::StepScalars values;
  read_after(&values, scalars(), sizeof(values), target_.stream);
  return values.step;
}

TensorView OptimizerImpl::steps_taken_view() const {
  auto* step = static_cast<std::byte*>(const_cast<void*>(scalars_.data())) +
               offsetof(kernels::StepScalars, step);
  return TensorView(step, 1, DType::i64, target_.stream.device());
}

void OptimizerImpl::restore_steps_taken(std::int64_t steps) {
  COHORT_EXPECTS(steps >= 0, "steps taken cannot be negative: " + std::to_string(steps));
  kernels::StepScalars values;
  read_after(&values, scalars(), sizeof(values), target_.stream);
  values.step = steps;
  write_now(scalars(), &values, sizeof(values), target_.stream);
}

std::vector<OptimizerStateView> OptimizerImpl::state() const {
  const Device device = target_.stream.device();
  auto view = [&](const Buffer& buffer) {
    return TensorView(const_cast<void*>(buffer.data()), count_, DType::f32, device);
  };
  std::vector<OptimizerStateView> views;
  if (!master_.empty()) {
    views.push_back({"master", view(master_)});
  }
  const bool adamw = config_.hyper.rule == kernels::UpdateRule::adamw;
  if (!state0_.empty()) {
    views.push_back({adamw ? "exp_avg" : "momentum_buffer", view(state0_)});
  }
  if (!state1_.empty()) {
    views.push_back({"exp_avg_sq", view(state1_)});
  }
  return views;
}

}  // namespace detail

// ---- Optimizer: the public face ----

namespace {

/// The optimizers that exist, with the parameter arena each steps (optimizers_stepping).
struct LiveOptimizers {
  std::mutex mutex;
  std::vector<std::pair<const void*, const Optimizer*>> entries;
};

LiveOptimizers& live_optimizers() {
  static LiveOptimizers live;  // never destroyed before an optimizer of a static's lifetime
  return live;
}

}  // namespace

Optimizer::Optimizer(std::unique_ptr<detail::OptimizerImpl> impl) : impl_(std::move(impl)) {
  LiveOptimizers& live = live_optimizers();
  const std::lock_guard lock(live.mutex);
  live.entries.emplace_back(impl_->target().params.data(), this);
}

Optimizer::~Optimizer() {
  LiveOptimizers& live = live_optimizers();
  const std::lock_guard lock(live.mutex);
  std::erase_if(live.entries, [this](const auto& entry) { return entry.second == this; });
}

std::vector<const Optimizer*> optimizers_stepping(const void* params) {
  LiveOptimizers& live = live_optimizers();
  const std::lock_guard lock(live.mutex);
  std::vector<const Optimizer*> found;
  for (const auto& [arena, optimizer] : live.entries) {
    if (arena == params) found.push_back(optimizer);
  }
  return found;
}

void Optimizer::step() {
  impl_->step();
}
void Optimizer::write_after(const Event& event) {
  impl_->write_after(event);
}
void Optimizer::call_before_next_write(std::function<void()> release) {
  impl_->call_before_next_write(std::move(release));
}
void Optimizer::set_loss_scaler(LossScaler* scaler) {
  impl_->set_loss_scaler(scaler);
}
GradNorm Optimizer::clip_grad_norm(float max_norm) {
  impl_->request_clip(max_norm);
  return GradNorm(this);
}
float Optimizer::learning_rate() const noexcept {
  return impl_->lr();
}
void Optimizer::set_learning_rate(float lr) {
  impl_->set_lr(lr);
}
std::int64_t Optimizer::steps_taken() const {
  return impl_->steps_taken();
}
TensorView Optimizer::steps_taken_view() const {
  return impl_->steps_taken_view();
}
void Optimizer::restore_steps_taken(std::int64_t steps) {
  impl_->restore_steps_taken(steps);
}
const char* Optimizer::rule_name() const noexcept {
  return impl_->config().hyper.rule == kernels::UpdateRule::adamw ? "adamw" : "sgd";
}
bool Optimizer::is_sharded() const noexcept {
  return impl_->is_sharded();
}
std::size_t Optimizer::shard_offset() const noexcept {
  return impl_->offset();
}
std::size_t Optimizer::shard_count() const noexcept {
  return impl_->count();
}
std::size_t Optimizer::state_bytes() const noexcept {
  return impl_->state_bytes();
}
std::vector<OptimizerStateView> Optimizer::state() const {
  return impl_->state();
}
const OptimizerTarget& Optimizer::target() const noexcept {
  return impl_->target();
}

float GradNorm::value() const {
  return optimizer_->impl_->read_grad_norm();
}

}  // namespace cohort
