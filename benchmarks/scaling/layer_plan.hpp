#pragma once

// The work scaling_bench's step runs on one rank, layer by layer, as JSON (`--layers-json`): what
// a peer needs to run the same shapes in the same math (scripts/gpu/torch_workload_step.py runs
// them in PyTorch on the same card, and the GPU check puts the two steps side by side).

#include <layers/math.hpp>
#include <layers/workloads.hpp>

#include <nlohmann/json.hpp>

namespace scaling {

/// The step of `workload` at `batch` samples per rank in `mode`, as measure() runs it with real
/// compute: the MLP's own layers (inputs, widths, classes, softmax cross-entropy), or each
/// layer's convolution at the model's shape (forward, then backward filter and data) or GEMMs
/// sized to its FLOPs (layers::gemm_work_shape, forward and backward); then plain SGD over every
/// parameter. Parameter names and shapes are those DataParallel registers.
nlohmann::json layer_plan(const layers::Workload& workload, const layers::MlpConfig& mlp, int batch,
                          layers::MathMode mode, float lr);

}  // namespace scaling
