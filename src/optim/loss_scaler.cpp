#include <cohort/core/detail/current_device.hpp>
#include <cohort/core/error.hpp>
#include <cohort/kernels/optimizer_math.hpp>
#include <cohort/memory/detail/state_resource.hpp>
#include <cohort/memory/detail/stream_copy.hpp>
#include <cohort/optim/loss_scaler.hpp>

#include <cmath>
#include <cstring>

namespace cohort {

LossScaler::LossScaler(Device device, const LossScalerOptions& options)
    : device_(device), options_(options) {
  COHORT_EXPECTS(options.initial_scale > 0.0f && std::isfinite(options.initial_scale),
                 "a loss scale must be positive and finite");
  COHORT_EXPECTS(options.growth_factor >= 1.0f, "the growth factor must be at least 1");
  COHORT_EXPECTS(options.backoff_factor > 0.0f && options.backoff_factor < 1.0f,
                 "the backoff factor must be in (0, 1)");
  COHORT_EXPECTS(options.growth_interval >= 1, "the growth interval must be at least 1 step");
  COHORT_EXPECTS(options.min_scale > 0.0f && options.min_scale <= options.max_scale,
                 "loss scale bounds must satisfy 0 < min_scale <= max_scale");
  const Stream stream = Stream::create(device);
  const detail::CurrentDevice current(device);
  state_ = Buffer(detail::default_state_resource(device), sizeof(kernels::LossScalerState),
                  MemoryCategory::other);
  kernels::LossScalerState initial;
  initial.scale = options.initial_scale;
  detail::write_now(state_.data(), &initial, sizeof(initial), stream);
}

LossScaler::~LossScaler() = default;

TensorView LossScaler::scale_view() const {
  // `scale` is the first member of LossScalerState.
  return TensorView(state(), 1, DType::f32, device_);
}

LossScalerSnapshot LossScaler::read(const Stream& stream) const {
  kernels::LossScalerState values;
  detail::read_after(&values, state_.data(), sizeof(values), stream);
  return decode(&values);
}

TensorView LossScaler::state_view() const {
  return TensorView(state(), sizeof(kernels::LossScalerState), DType::u8, device_);
}

LossScalerSnapshot LossScaler::decode(const void* state_copy) {
  kernels::LossScalerState values;
  std::memcpy(&values, state_copy, sizeof(values));
  return LossScalerSnapshot{values.scale, values.growth_tracker, values.skipped_steps,
                            values.last_found_inf != 0};
}

void LossScaler::restore(const LossScalerSnapshot& snapshot, const Stream& stream) {
  COHORT_EXPECTS(snapshot.scale > 0.0f && std::isfinite(snapshot.scale),
                 "a restored loss scale must be positive and finite");
  COHORT_EXPECTS(snapshot.growth_tracker >= 0 && snapshot.skipped_steps >= 0,
                 "a restored loss scaler cannot have negative step counts");
  kernels::LossScalerState values;
  values.scale = snapshot.scale;
  values.growth_tracker = snapshot.growth_tracker;
  values.skipped_steps = snapshot.skipped_steps;
  values.last_found_inf = snapshot.last_step_skipped ? 1 : 0;
  stream.synchronize();
  detail::write_now(state(), &values, sizeof(values), stream);
}

}  // namespace cohort
