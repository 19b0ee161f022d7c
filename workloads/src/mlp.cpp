#include <layers/mlp.hpp>

#include <cohort/core/error.hpp>
#include <cohort/core/float16.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>

namespace layers {
Mlp::Mlp(const MlpConfig& config, cohort::ParamRegistry& registry) : config_(config) {
  COHORT_EXPECTS(config.layers >= 1 && config.inputs > 0 && config.hidden > 0 && config.classes > 1,
                 "an MLP needs layers >= 1, inputs > 0, hidden > 0 and classes > 1");
  COHORT_EXPECTS(config.dtype == cohort::DType::f32 || config.dtype == cohort::DType::bf16,
                 "MLP parameters are f32 or bf16");
  layers_.resize(static_cast<std::size_t>(config.layers));
  for (int l = 0; l < config.layers; ++l) {
    const std::string name = "fc" + std::to_string(l);
    const auto out = static_cast<std::size_t>(fan_out(l));
    const auto in = static_cast<std::size_t>(fan_in(l));
    Layer& layer = layers_[static_cast<std::size_t>(l)];
    layer.weight = registry.add(name + ".weight", {out, in}, config.dtype);
    layer.bias = registry.add(name + ".bias", {out}, config.dtype);
    layer.unit = registry.add_unit(name, {layer.weight, layer.bias});
  }
}

int Mlp::fan_in(int layer) const noexcept {
  return layer == 0 ? config_.inputs : config_.hidden;
}
int Mlp::fan_out(int layer) const noexcept {
  return layer == config_.layers - 1 ? config_.classes : config_.hidden;
}
double Mlp::forward_flops(int layer) const noexcept {
  return 2.0 * fan_in(layer) * fan_out(layer) + 2.0 * fan_out(layer);
}
std::size_t Mlp::parameter_count() const noexcept {
  std::size_t total = 0;
  for (int l = 0; l < config_.layers; ++l) {
    total += static_cast<std::size_t>(fan_out(l)) * static_cast<std::size_t>(fan_in(l) + 1);
  }
  return total;
}

void Mlp::initialise(cohort::DataParallel& dp, Math& math, std::uint64_t seed) const {
  for (std::size_t l = 0; l < layers_.size(); ++l) {
    const int layer = static_cast<int>(l);
    std::mt19937_64 generator(seed * 1000003ULL + l);
    const auto bound = static_cast<float>(std::sqrt(6.0 / fan_in(layer)));
    std::uniform_real_distribution<float> uniform(-bound, bound);
    dp.gather(layers_[l].unit);  // ZeRO-3: released inside init, the values are kept
    const cohort::TensorView w = dp.param(layers_[l].weight);
    const cohort::TensorView b = dp.param(layers_[l].bias);
    std::vector<float> weights(w.count());
    for (float& value : weights) value = uniform(generator);
    std::vector<float> biases(b.count(), 0.0f);
    math.upload_values(w, weights);
    math.upload_values(b, biases);
    dp.release(layers_[l].unit);
  }
}

void Mlp::bind(cohort::DataParallel& dp, Math& math, int max_batch) {
  COHORT_EXPECTS(max_batch > 0, "bind an MLP to batches of at least one row");
  dp_ = &dp;
  math_ = &math;
  max_batch_ = max_batch;
  const auto rows = static_cast<std::size_t>(max_batch);
  int widest = config_.inputs;
  std::size_t largest_weight = 0, largest_bias = 0;
  for (std::size_t l = 0; l < layers_.size(); ++l) {
    const int layer = static_cast<int>(l);
    widest = std::max(widest, fan_out(layer));
    layers_[l].activation = math.allocate_floats(rows * static_cast<std::size_t>(fan_out(layer)));
    largest_weight = std::max(largest_weight, static_cast<std::size_t>(fan_out(layer)) *
                                                  static_cast<std::size_t>(fan_in(layer)));
    largest_bias = std::max(largest_bias, static_cast<std::size_t>(fan_out(layer)));
  }
  if (config_.dtype != cohort::DType::f32) {
    weight32_ = math.allocate_floats(largest_weight);
    bias32_ = math.allocate_floats(largest_bias);
    grad_weight32_ = math.allocate_floats(largest_weight);
    grad_bias32_ = math.allocate_floats(largest_bias);
  }
  grad_a_ = math.allocate_floats(rows * static_cast<std::size_t>(widest));
  grad_b_ = math.allocate_floats(rows * static_cast<std::size_t>(widest));
}

const float* Mlp::weight(std::size_t layer) {
  const cohort::TensorView w = dp_->param(layers_[layer].weight);
  if (config_.dtype == cohort::DType::f32) return static_cast<const float*>(w.data());
  math_->cast(w, cohort::TensorView(weight32_.data(), w.count(), cohort::DType::f32, w.device()));
  return static_cast<const float*>(weight32_.data());
}

const float* Mlp::bias(std::size_t layer) {
  const cohort::TensorView b = dp_->param(layers_[layer].bias);
  if (config_.dtype == cohort::DType::f32) return static_cast<const float*>(b.data());
  math_->cast(b, cohort::TensorView(bias32_.data(), b.count(), cohort::DType::f32, b.device()));
  return static_cast<const float*>(bias32_.data());
}

void Mlp::forward(const float* inputs, int batch) {
  COHORT_EXPECTS(dp_ != nullptr, "bind the MLP before running it");
  COHORT_EXPECTS(
      batch > 0 && batch <= max_batch_,
      "batch of " + std::to_string(batch) + " rows; bound for up to " + std::to_string(max_batch_));
  inputs_ = inputs;
  const float* x = inputs;
  for (std::size_t l = 0; l < layers_.size(); ++l) {
    const int layer = static_cast<int>(l);
    Layer& slot = layers_[l];
    dp_->gather(slot.unit);  // ZeRO-3: the next layer is prefetched meanwhile
    auto* y = static_cast<float*>(slot.activation.data());
    // y [batch, out] = x [batch, in] . W^T, W [out, in]
    math_->gemm(Transpose::no, Transpose::yes, batch, fan_out(layer), fan_in(layer), 1.0f, x,
                weight(l), 0.0f, y);
    math_->bias_activation(y, bias(l), batch, fan_out(layer), l + 1 < layers_.size());
    // The last layer stays gathered for backward, which begins with it.
    if (l + 1 < layers_.size()) dp_->release(slot.unit);
    x = y;
  }
}

void Mlp::loss_and_backward(const std::int32_t* labels, int batch, float grad_scale, double* stats,
                            cohort::DataParallel* dp) {
  COHORT_EXPECTS(inputs_ != nullptr, "run forward before the loss");
  const std::size_t last = layers_.size() - 1;
  auto* grad = static_cast<float*>(grad_a_.data());
  auto* next = static_cast<float*>(grad_b_.data());
  math_->softmax_cross_entropy(static_cast<const float*>(layers_[last].activation.data()), labels,
                               batch, config_.classes, grad_scale, dp != nullptr ? grad : nullptr,
                               stats);
  if (dp == nullptr) {
    dp_->release(layers_[last].unit);  // no backward: forward's last unit is done with
    return;
  }
  const auto rows = static_cast<std::size_t>(batch);
  for (std::size_t l = layers_.size(); l-- > 0;) {
    const int layer = static_cast<int>(l);
    Layer& slot = layers_[l];
    const float* x = l == 0 ? inputs_ : static_cast<const float*>(layers_[l - 1].activation.data());
    dp->gather(slot.unit, cohort::Pass::backward);  // the last: taken over from forward
    const cohort::TensorView grad_w = dp->grad(slot.weight);
    const cohort::TensorView grad_b = dp->grad(slot.bias);
    const bool f32 = config_.dtype == cohort::DType::f32;
    auto* dw =
        f32 ? static_cast<float*>(grad_w.data()) : static_cast<float*>(grad_weight32_.data());
    auto* db = f32 ? static_cast<float*>(grad_b.data()) : static_cast<float*>(grad_bias32_.data());
    // dW [out, in] = grad^T [out, batch] . x [batch, in]; db = column sums of grad
    math_->gemm(Transpose::yes, Transpose::no, fan_out(layer), fan_in(layer), batch, 1.0f, grad, x,
                0.0f, dw);
    math_->column_sums(grad, batch, fan_out(layer), db);
    if (!f32) {
      math_->cast(cohort::TensorView(dw, grad_w.count(), cohort::DType::f32, grad_w.device()),
                  grad_w);
      math_->cast(cohort::TensorView(db, grad_b.count(), cohort::DType::f32, grad_b.device()),
                  grad_b);
    }
    dp->grad_ready(slot.bias);
    dp->grad_ready(slot.weight);
    if (l == 0) {
      dp->release(slot.unit);
      break;
    }
    // grad_in [batch, in] = grad [batch, out] . W [out, in], through the previous ReLU
    math_->gemm(Transpose::no, Transpose::no, batch, fan_in(layer), fan_out(layer), 1.0f, grad,
                weight(l), 0.0f, next);
    dp->release(slot.unit);
    math_->relu_backward(next, static_cast<const float*>(layers_[l - 1].activation.data()),
                         rows * static_cast<std::size_t>(fan_in(layer)));
    std::swap(grad, next);
  }
}

std::vector<float> Mlp::download_parameters() const {
  std::vector<float> values;
  values.reserve(parameter_count());  // one allocation, not a doubling vector
  visit_parameters([&](const std::vector<float>& mine) {
    values.insert(values.end(), mine.begin(), mine.end());
  });
  return values;
}

void Mlp::visit_parameters(const std::function<void(const std::vector<float>&)>& visit) const {
  COHORT_EXPECTS(dp_ != nullptr, "bind the MLP before reading its parameters");
  for (const Layer& slot : layers_) {
    dp_->gather(slot.unit);
    for (const cohort::ParamHandle handle : {slot.weight, slot.bias}) {
      visit(math_->download_values(dp_->param(handle)));
    }
    dp_->release(slot.unit);
  }
}

}  // namespace layers
