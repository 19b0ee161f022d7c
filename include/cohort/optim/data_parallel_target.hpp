#pragma once

/// @file
/// The one-line adapters from a `DataParallel` engine to its optimizer:
///
///     cohort::AdamW opt(cohort::target_of(dp), {.lr = 1e-3f});
///     cohort::ShardedOptimizer zero(cohort::target_of(dp), cohort::AdamWOptions{.lr = 1e-3f},
///                                   cohort::sharded_options_of(dp));

#include <cohort/ddp/data_parallel.hpp>
#include <cohort/optim/optimizer.hpp>
#include <cohort/optim/sharded_optimizer.hpp>

namespace cohort {

/// The engine's whole (padded) param and grad arenas, its compute stream and communicator. Its
/// shard of each arena is the one a `ShardedOptimizer` steps (rank r: [r x n, (r + 1) x n)).
inline OptimizerTarget target_of(DataParallel& dp) {
  return OptimizerTarget{dp.param_arena(), dp.grad_arena(), dp.compute_stream(), &dp.comm()};
}

/// With `GradientSync::reduce_scatter`, `sync_grads()` has already reduce-scattered (avg) the
/// gradients into this rank's shard, so the optimizer must not do it again.
inline ShardedOptions sharded_options_of(const DataParallel& dp) {
  return ShardedOptions{.reduce_scatter_grads =
                            dp.options().gradient_sync != GradientSync::reduce_scatter};
}

}  // namespace cohort
