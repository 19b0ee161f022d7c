#include "scaling/conv_work.hpp"

#include <cohort/core/error.hpp>

#include <algorithm>
#include <cmath>

namespace scaling {
namespace {

struct ScratchSizes {
  std::size_t input = 0, output = 0;  // elements
};

ScratchSizes largest(const std::vector<std::optional<layers::ConvGeometry>>& geometry) {
  ScratchSizes sizes;
  for (const auto& g : geometry) {
    if (!g) continue;
    sizes.input = std::max(sizes.input, g->input.count());
    sizes.output = std::max(sizes.output, g->output().count());
  }
  return sizes;
}

std::vector<std::optional<layers::ConvGeometry>> batched(const layers::Workload& workload,
                                                         int batch) {
  COHORT_EXPECTS(batch > 0, "ConvWork needs a batch of at least one sample");
  std::vector<std::optional<layers::ConvGeometry>> geometry;
  for (const layers::WorkloadLayer& layer : workload.layers) {
    std::optional<layers::ConvGeometry> g = layer.conv;
    if (g) {
      COHORT_EXPECTS(!layer.params.empty() && layer.params[0].shape.size() == 4,
                     "workload layer '" + layer.name + "' is a convolution without a 4-d filter");
      g->input.n = batch;
    }
    geometry.push_back(g);
  }
  return geometry;
}

}  // namespace

bool ConvWork::applies_to(const layers::Workload& workload) {
  return std::any_of(workload.layers.begin(), workload.layers.end(),
                     [](const layers::WorkloadLayer& layer) { return layer.conv.has_value(); });
}

std::size_t ConvWork::scratch_bytes(const layers::Workload& workload, int batch) {
  const ScratchSizes sizes = largest(batched(workload, batch));
  return (2 * sizes.input + sizes.output) * sizeof(float);
}

ConvWork::ConvWork(layers::Math& math, const layers::Workload& workload, int batch,
                   cohort::DType dtype)
    : ops_(math, layers::Layout::nchw), geometry_(batched(workload, batch)), dtype_(dtype) {
  COHORT_EXPECTS(applies_to(workload),
                 "workload '" + workload.name + "' has no convolution layers to run");
  COHORT_EXPECTS(dtype == cohort::DType::f32 || dtype == cohort::DType::bf16,
                 "the convolutions run in f32 or bf16 (layers::CnnOps), not " +
                     std::string(cohort::to_string(dtype)));
  const ScratchSizes sizes = largest(geometry_);
  input_ = math.allocate_bytes(sizes.input * cohort::size_of(dtype));
  output_ = math.allocate_bytes(sizes.output * cohort::size_of(dtype));
  input_grad_ = math.allocate_bytes(sizes.input * cohort::size_of(dtype));
  math.fill_uniform(scratch(input_, sizes.input), 1.0f, 11);
  math.fill_uniform(scratch(output_, sizes.output), 1.0f, 12);
  filled_.assign(geometry_.size(), false);
}

cohort::TensorView ConvWork::scratch(cohort::Buffer& buffer, std::size_t count) {
  return cohort::TensorView(buffer.data(), count, dtype_, ops_.math().device());
}

void ConvWork::forward(std::size_t layer, const cohort::DataParallel& dp,
                       cohort::ParamHandle filter) {
  const layers::ConvGeometry& g = geometry_.at(layer).value();
  if (!filled_[layer]) {
    // Every rank writes the same values (the seed is the layer's), before the first use.
    const double fan_in = static_cast<double>(g.input.c) * g.kernel * g.kernel;
    ops_.math().fill_uniform(dp.param(filter), static_cast<float>(std::sqrt(3.0 / fan_in)),
                             100 + layer);
    filled_[layer] = true;
  }
  ops_.conv_forward(g, scratch(input_, g.input.count()), dp.param(filter),
                    scratch(output_, g.output().count()));
}

void ConvWork::backward(std::size_t layer, const cohort::DataParallel& dp,
                        cohort::ParamHandle filter) {
  const layers::ConvGeometry& g = geometry_.at(layer).value();
  ops_.conv_backward_filter(g, scratch(input_, g.input.count()),
                            scratch(output_, g.output().count()), dp.grad(filter));
  ops_.conv_backward_data(g, scratch(output_, g.output().count()), dp.param(filter),
                          scratch(input_grad_, g.input.count()));
}

}  // namespace scaling
