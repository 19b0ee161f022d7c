#pragma once

/// @file
/// `AdamW`: Adam with bias correction and decoupled weight decay, as PyTorch's
/// `torch.optim.AdamW`, fused over a flat arena.

#include <cohort/memory/memory_resource.hpp>
#include <cohort/optim/optimizer.hpp>
#include <cohort/optim/schedule.hpp>

#include <memory>

namespace cohort {

struct AdamWOptions {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 1e-2f;  ///< decoupled: p *= 1 - lr x weight_decay
  LrSchedule schedule = LrSchedule::constant();
  /// Where the state (moments, master weights) lives; null: a device pool on the arena's GPU, or
  /// plain host memory. Managed memory is prefetched to the GPU before each step, and may be
  /// larger than the GPU's free memory when made with `allow_oversubscription`. The step's few
  /// scalars stay in device memory whatever this is (NCCL reads them).
  std::shared_ptr<MemoryResource> state_resource = nullptr;
};

class AdamW final : public Optimizer {
 public:
  /// @throws InvalidArgument for unsupported dtypes, mismatched arenas, or options out of range.
  explicit AdamW(const OptimizerTarget& target, const AdamWOptions& options = {});
};

}  // namespace cohort
