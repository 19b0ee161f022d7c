#include <layers/cnn.hpp>

#include "random.hpp"

#include <cohort/core/error.hpp>

#include <cmath>
#include <string>

namespace layers {

Cnn::Cnn(const CnnConfig& config, cohort::ParamRegistry& registry) : config_(config) {
  COHORT_EXPECTS(config.image_size >= 4 && config.channels > 0 && config.width > 0 &&
                     config.classes > 1 && config.bn_group > 0,
                 "a CNN needs image_size >= 4, channels, width and bn_group > 0 and classes > 1");
  COHORT_EXPECTS(config.dtype == cohort::DType::f32 || config.dtype == cohort::DType::bf16,
                 "CNN parameters are f32 or bf16");
  const int s = config.image_size, w = config.width;
  const ConvGeometry stem{.input = {1, config.channels, s, s}, .filters = w};
  const ConvGeometry same{.input = {1, w, s, s}, .filters = w};
  const ConvGeometry down{.input = {1, w, s, s}, .filters = 2 * w, .stride = 2};
  const std::pair<const char*, ConvGeometry> units[] = {
      {"stem", stem}, {"block1", same}, {"block2", same}, {"down", down}};
  units_.resize(std::size(units));
  for (std::size_t u = 0; u < units_.size(); ++u) {
    Unit& unit = units_[u];
    unit.conv = units[u].second;
    const std::string name = units[u].first;
    const auto f = static_cast<std::size_t>(unit.conv.filters);
    const auto c = static_cast<std::size_t>(unit.conv.input.c);
    const auto k = static_cast<std::size_t>(unit.conv.kernel);
    unit.weight.handle =
        registry.add(name + ".conv.weight",
                     config.layout == Layout::nchw ? std::vector<std::size_t>{f, c, k, k}
                                                   : std::vector<std::size_t>{f, k, k, c},
                     config.dtype);
    unit.gamma.handle = registry.add(name + ".bn.weight", {f}, config.dtype);
    unit.beta.handle = registry.add(name + ".bn.bias", {f}, config.dtype);
  }
  units_[2].residual_from = 0;  // block2's output adds the stem's
  const auto features = static_cast<std::size_t>(2 * w);
  fc_weight_.handle =
      registry.add("fc.weight", {static_cast<std::size_t>(config.classes), features}, config.dtype);
  fc_bias_.handle =
      registry.add("fc.bias", {static_cast<std::size_t>(config.classes)}, config.dtype);
}

std::size_t Cnn::parameter_count() const noexcept {
  std::size_t total = 0;
  for (const Unit& unit : units_) {
    total += unit.conv.weight_count() + 2 * static_cast<std::size_t>(unit.conv.filters);
  }
  return total + static_cast<std::size_t>(config_.classes) *
                     static_cast<std::size_t>(2 * config_.width + 1);
}

double Cnn::forward_flops() const noexcept {
  double total = 2.0 * config_.classes * 2 * config_.width;
  for (const Unit& unit : units_) total += unit.conv.forward_flops();
  return total;
}

void Cnn::initialise(cohort::DataParallel& dp, Math& math, std::uint64_t seed) const {
  std::uint64_t stream = 0;
  auto fill_uniform = [&](const Param& param, double fan_in) {
    const cohort::TensorView view = dp.param(param.handle);
    detail::Generator generator(seed * 1000003ULL + stream++);
    const double bound = std::sqrt(6.0 / fan_in);
    std::vector<float> values(view.count());
    for (float& value : values)
      value = static_cast<float>(bound * (2.0 * generator.uniform() - 1.0));
    math.upload_values(view, values);
  };
  auto fill = [&](const Param& param, float constant) {
    const cohort::TensorView view = dp.param(param.handle);
    math.upload_values(view, std::vector<float>(view.count(), constant));
  };
  for (const Unit& unit : units_) {
    fill_uniform(unit.weight, unit.conv.input.c * unit.conv.kernel * unit.conv.kernel);
    fill(unit.gamma, 1.0f);
    fill(unit.beta, 0.0f);
  }
  fill_uniform(fc_weight_, 2.0 * config_.width);
  fill(fc_bias_, 0.0f);
}

void Cnn::bind(cohort::DataParallel& dp, Math& math, int max_batch) {
  COHORT_EXPECTS(max_batch > 0, "bind a CNN to batches of at least one image");
  dp_ = &dp;
  math_ = &math;
  max_batch_ = max_batch;
  ops_ = std::make_unique<CnnOps>(math, config_.layout);
  auto mirror = [&](Param& param) {
    if (config_.dtype == cohort::DType::f32) return;
    const std::size_t count = dp.param(param.handle).count();
    param.value32 = math.allocate_floats(count, cohort::MemoryCategory::parameters);
    param.grad32 = math.allocate_floats(count, cohort::MemoryCategory::gradients);
  };
  std::size_t widest = 0;
  for (Unit& unit : units_) {
    const ConvGeometry g = at_batch(unit, max_batch);
    const std::size_t count = g.output().count();
    widest = std::max(widest, count);
    unit.conv_out = math.allocate_floats(count);
    unit.activation = math.allocate_floats(count);
    unit.grad = math.allocate_floats(count);
    const auto stats =
        static_cast<std::size_t>(max_batch) * static_cast<std::size_t>(unit.conv.filters);
    unit.saved_mean = math.allocate_floats(stats);
    unit.saved_inv_std = math.allocate_floats(stats);
    for (Param* param : {&unit.weight, &unit.gamma, &unit.beta}) mirror(*param);
  }
  mirror(fc_weight_);
  mirror(fc_bias_);
  const auto rows = static_cast<std::size_t>(max_batch);
  pooled_ = math.allocate_floats(rows * static_cast<std::size_t>(2 * config_.width));
  grad_pooled_ = math.allocate_floats(rows * static_cast<std::size_t>(2 * config_.width));
  logits_ = math.allocate_floats(rows * static_cast<std::size_t>(config_.classes));
  grad_logits_ = math.allocate_floats(rows * static_cast<std::size_t>(config_.classes));
  grad_conv_ = math.allocate_floats(widest);
}

ConvGeometry Cnn::at_batch(const Unit& unit, int batch) const {
  ConvGeometry g = unit.conv;
  g.input.n = batch;
  return g;
}

cohort::TensorView Cnn::f32_view(const void* data, std::size_t count) const {
  return cohort::TensorView(const_cast<void*>(data), count, cohort::DType::f32, math_->device());
}

const float* Cnn::value(const Param& param) const {
  return config_.dtype == cohort::DType::f32
             ? static_cast<const float*>(dp_->param(param.handle).data())
             : static_cast<const float*>(param.value32.data());
}

float* Cnn::grad(Param& param, cohort::DataParallel& dp) const {
  return config_.dtype == cohort::DType::f32 ? static_cast<float*>(dp.grad(param.handle).data())
                                             : static_cast<float*>(param.grad32.data());
}

void Cnn::param_in(Param& param) {
  if (config_.dtype == cohort::DType::f32) return;
  const cohort::TensorView stored = dp_->param(param.handle);
  math_->cast(stored, f32_view(param.value32.data(), stored.count()));
}

void Cnn::grad_out(Param& param, cohort::DataParallel& dp) {
  if (config_.dtype != cohort::DType::f32) {
    const cohort::TensorView stored = dp.grad(param.handle);
    math_->cast(f32_view(param.grad32.data(), stored.count()), stored);
  }
  dp.grad_ready(param.handle);
}

void Cnn::forward(const float* images, int batch) {
  COHORT_EXPECTS(dp_ != nullptr, "bind the CNN before running it");
  COHORT_EXPECTS(batch > 0 && batch <= max_batch_, "batch of " + std::to_string(batch) +
                                                       " images; bound for up to " +
                                                       std::to_string(max_batch_));
  images_ = images;
  batch_ = batch;
  const int group = batch % config_.bn_group == 0 ? config_.bn_group : batch;
  const float* x = images;
  for (Unit& unit : units_) {
    for (Param* param : {&unit.weight, &unit.gamma, &unit.beta}) param_in(*param);
    const ConvGeometry g = at_batch(unit, batch);
    const std::size_t count = g.output().count();
    auto* conv_out = static_cast<float*>(unit.conv_out.data());
    auto* activation = static_cast<float*>(unit.activation.data());
    ops_->conv_forward(g, f32_view(x, g.input.count()),
                       f32_view(value(unit.weight), g.weight_count()), f32_view(conv_out, count));
    ops_->batch_norm_forward(g.output(), group, conv_out, value(unit.gamma), value(unit.beta),
                             activation, static_cast<float*>(unit.saved_mean.data()),
                             static_cast<float*>(unit.saved_inv_std.data()));
    if (unit.residual_from >= 0) {
      ops_->add_into(static_cast<const float*>(
                         units_[static_cast<std::size_t>(unit.residual_from)].activation.data()),
                     activation, count);
    }
    ops_->relu(activation, activation, count);
    x = activation;
  }
  param_in(fc_weight_);
  param_in(fc_bias_);
  const int features = 2 * config_.width;
  auto* pooled = static_cast<float*>(pooled_.data());
  auto* logits = static_cast<float*>(logits_.data());
  ops_->global_average_pool(at_batch(units_.back(), batch).output(), x, pooled);
  math_->gemm(Transpose::no, Transpose::yes, batch, config_.classes, features, 1.0f, pooled,
              value(fc_weight_), 0.0f, logits);
  math_->bias_activation(logits, value(fc_bias_), batch, config_.classes, false);
}

void Cnn::loss_and_backward(const std::int32_t* labels, int batch, float grad_scale, double* stats,
                            cohort::DataParallel* dp) {
  COHORT_EXPECTS(images_ != nullptr && batch == batch_,
                 "run forward on this batch before the loss");
  auto* grad_logits = static_cast<float*>(grad_logits_.data());
  math_->softmax_cross_entropy(static_cast<const float*>(logits_.data()), labels, batch,
                               config_.classes, grad_scale, dp != nullptr ? grad_logits : nullptr,
                               stats);
  if (dp == nullptr) return;
  const int features = 2 * config_.width;
  const int group = batch % config_.bn_group == 0 ? config_.bn_group : batch;
  // The head: dW = grad^T . pooled, db = column sums, d pooled = grad . W.
  math_->gemm(Transpose::yes, Transpose::no, config_.classes, features, batch, 1.0f, grad_logits,
              static_cast<const float*>(pooled_.data()), 0.0f, grad(fc_weight_, *dp));
  math_->column_sums(grad_logits, batch, config_.classes, grad(fc_bias_, *dp));
  grad_out(fc_bias_, *dp);
  grad_out(fc_weight_, *dp);
  auto* grad_pooled = static_cast<float*>(grad_pooled_.data());
  math_->gemm(Transpose::no, Transpose::no, batch, features, config_.classes, 1.0f, grad_logits,
              value(fc_weight_), 0.0f, grad_pooled);
  ops_->global_average_pool_backward(at_batch(units_.back(), batch).output(), grad_pooled,
                                     static_cast<float*>(units_.back().grad.data()));
  auto* grad_conv = static_cast<float*>(grad_conv_.data());
  for (std::size_t u = units_.size(); u-- > 0;) {
    Unit& unit = units_[u];
    const ConvGeometry g = at_batch(unit, batch);
    const std::size_t count = g.output().count();
    auto* grad_activation = static_cast<float*>(unit.grad.data());
    // Through the ReLU: now the gradient of the sum of batch norm and residual.
    math_->relu_backward(grad_activation, static_cast<const float*>(unit.activation.data()), count);
    ops_->batch_norm_backward(g.output(), group, static_cast<const float*>(unit.conv_out.data()),
                              grad_activation, value(unit.gamma),
                              static_cast<const float*>(unit.saved_mean.data()),
                              static_cast<const float*>(unit.saved_inv_std.data()), grad_conv,
                              grad(unit.gamma, *dp), grad(unit.beta, *dp));
    grad_out(unit.gamma, *dp);
    grad_out(unit.beta, *dp);
    const float* input =
        u == 0 ? images_ : static_cast<const float*>(units_[u - 1].activation.data());
    ops_->conv_backward_filter(g, f32_view(input, g.input.count()), f32_view(grad_conv, count),
                               f32_view(grad(unit.weight, *dp), g.weight_count()));
    grad_out(unit.weight, *dp);
    if (u == 0) break;
    auto* grad_input = static_cast<float*>(units_[u - 1].grad.data());
    ops_->conv_backward_data(g, f32_view(grad_conv, count),
                             f32_view(value(unit.weight), g.weight_count()),
                             f32_view(grad_input, g.input.count()));
    // A residual connection from unit u - 1 passes its sum's gradient back too.
    for (const Unit& later : units_) {
      if (later.residual_from == static_cast<int>(u - 1)) {
        ops_->add_into(static_cast<const float*>(later.grad.data()), grad_input, g.input.count());
      }
    }
  }
}

std::vector<float> Cnn::download_parameters() const {
  COHORT_EXPECTS(dp_ != nullptr, "bind the CNN before reading its parameters");
  std::vector<float> values;
  auto append = [&](const Param& param) {
    const std::vector<float> mine = math_->download_values(dp_->param(param.handle));
    values.insert(values.end(), mine.begin(), mine.end());
  };
  for (const Unit& unit : units_) {
    append(unit.weight);
    append(unit.gamma);
    append(unit.beta);
  }
  append(fc_weight_);
  append(fc_bias_);
  return values;
}

}  // namespace layers
