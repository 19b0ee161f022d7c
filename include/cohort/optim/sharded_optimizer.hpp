#pragma once

/// @file
/// `ShardedOptimizer`: ZeRO stage 1. Each rank keeps optimizer state (moments, master weights)
/// for its contiguous shard of the arena only, and steps only that shard.
///
/// Note [ZeRO-1 step]
/// The arena's count must be a multiple of the world size (the data-parallel engine pads it);
/// rank r's shard is elements [r x n, (r + 1) x n), n = count / size. `step()`:
///   1. reduce-scatters (avg) the whole gradient arena into this rank's shard of it, in place
///      (skipped with `reduce_scatter_grads = false`, when the caller has already put the
///      averaged gradients of the shard there, as `DataParallel` with
///      `GradientSync::reduce_scatter` does);
///   2. steps the shard (the same fused step as the unsharded optimizer; gradient statistics are
///      summed across ranks, so norms are global);
///   3. all-gathers the params, in place, so that every rank holds the whole updated arena.
/// The params are then those the unsharded optimizer gives from averaged gradients, with 1/size
/// of the optimizer state per rank. Outside the shard, the gradient arena is left as the
/// reduce-scatter left it (its contents unspecified).

#include <cohort/optim/adamw.hpp>
#include <cohort/optim/optimizer.hpp>
#include <cohort/optim/sgd.hpp>

namespace cohort {

struct ShardedOptions {
  /// Reduce-scatter the gradients in `step()` (Note [ZeRO-1 step]).
  bool reduce_scatter_grads = true;
};

class ShardedOptimizer final : public Optimizer {
 public:
  /// @throws InvalidArgument when the arena's count is not a multiple of the world size, and as
  ///         the unsharded optimizers.
  ShardedOptimizer(const OptimizerTarget& target, const AdamWOptions& options,
                   const ShardedOptions& sharding = {});
  ShardedOptimizer(const OptimizerTarget& target, const SgdOptions& options,
                   const ShardedOptions& sharding = {});
};

}  // namespace cohort
