#pragma once

/// @file
/// `Sgd`: stochastic gradient descent with momentum, dampening, Nesterov momentum and (L2)
/// weight decay, as PyTorch's `torch.optim.SGD`, fused over a flat arena.

#include <cohort/memory/memory_resource.hpp>
#include <cohort/optim/optimizer.hpp>
#include <cohort/optim/schedule.hpp>

#include <memory>

namespace cohort {

struct SgdOptions {
  float lr = 1e-2f;
  float momentum = 0.0f;
  float dampening = 0.0f;
  float weight_decay = 0.0f;  ///< added to the gradient: g += weight_decay x p
  bool nesterov = false;      ///< needs momentum > 0 and dampening 0
  LrSchedule schedule = LrSchedule::constant();
  /// Where the state (momentum buffer, master weights) lives; null: a device pool on the
  /// arena's GPU, or plain host memory. Managed memory is prefetched to the GPU before each step.
  std::shared_ptr<MemoryResource> state_resource = nullptr;
};

class Sgd final : public Optimizer {
 public:
  /// @throws InvalidArgument for unsupported dtypes, mismatched arenas, or options out of range.
  explicit Sgd(const OptimizerTarget& target, const SgdOptions& options = {});
};

}  // namespace cohort
