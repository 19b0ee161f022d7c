#pragma once

// scaling_bench's real convolutions: a workload's convolution layers run at the model's shapes
// (cuDNN on a GPU, the host convolutions of workloads/ on host ranks), their filters read
// from and their filter gradients written into DataParallel's arenas, so that the step's compute
// and its gradient traffic are the model's own. Activations are scratch tensors of the largest
// layer's size, reused by every layer: the benchmark times the work, not the values.

#include <layers/cnn_ops.hpp>
#include <layers/math.hpp>
#include <layers/workloads.hpp>

#include <cohort/ddp/data_parallel.hpp>

#include <cstddef>
#include <optional>
#include <vector>

namespace scaling {

class ConvWork {
 public:
  /// The convolution layers of `workload` at `batch` samples, on `math`'s device and stream, in
  /// `dtype` (f32, or bf16 on a GPU: the dtype of the filters in DataParallel's arenas).
  /// @throws InvalidArgument when the workload has no convolution, a GPU build has no cuDNN, or
  ///         the dtype is neither.
  ConvWork(layers::Math& math, const layers::Workload& workload, int batch,
           cohort::DType dtype = cohort::DType::f32);

  /// Whether `workload` has convolution layers that ConvWork can run.
  static bool applies_to(const layers::Workload& workload);

  /// Whether layer `layer` of the workload is a convolution.
  bool is_conv(std::size_t layer) const { return geometry_.at(layer).has_value(); }

  /// Layer `layer`'s forward convolution; its filter is the parameter `filter` of `dp`.
  void forward(std::size_t layer, const cohort::DataParallel& dp, cohort::ParamHandle filter);
  /// Its backward: the filter's gradient into `dp`'s gradient of `filter`, then the data gradient.
  void backward(std::size_t layer, const cohort::DataParallel& dp, cohort::ParamHandle filter);

  /// Bytes of scratch the activations take (for the memory estimate).
  static std::size_t scratch_bytes(const layers::Workload& workload, int batch);

 private:
  cohort::TensorView scratch(cohort::Buffer& buffer, std::size_t count);

  layers::CnnOps ops_;
  std::vector<std::optional<layers::ConvGeometry>> geometry_;  // per layer, at the batch
  cohort::DType dtype_;
  cohort::Buffer input_, output_;  // the largest input and output of any layer, zeroed
};

}  // namespace scaling
