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

#include <utility>
#include <vector>

namespace cohort {

/// The engine's whole (padded) param and grad arenas, its compute stream and communicator. Its
/// shard of each arena is the one a `ShardedOptimizer` steps (rank r: [r x n, (r + 1) x n)).
/// With ZeRO-2 or ZeRO-3 (`DataParallelOptions::sharding`): this rank's shard of the gradients,
/// the parameters it updates (ZeRO-2: its pieces of the whole arena; ZeRO-3: its shard), and
/// `params_updated()` after every step; any optimizer class then keeps state for the shard only.
inline OptimizerTarget target_of(DataParallel& dp) {
  if (dp.options().sharding == Sharding::none) {
    return OptimizerTarget{dp.param_arena(), dp.grad_arena(), dp.compute_stream(), &dp.comm()};
  }
  const bool zero2 = dp.options().sharding == Sharding::zero2;
  std::vector<OptimizerPiece> pieces;
  if (zero2) {
    for (const ShardPiece& piece : dp.shard_layout().pieces(dp.world().rank())) {
      pieces.push_back({piece.arena_offset, piece.shard_offset, piece.count});
    }
  }
  return OptimizerTarget{zero2 ? dp.param_arena() : dp.param_shard(),
                         dp.grad_shard(),
                         dp.compute_stream(),
                         &dp.comm(),
                         /*grads_sharded=*/true,
                         std::move(pieces),
                         [&dp] { dp.params_updated(); }};
}

/// With `GradientSync::reduce_scatter`, `sync_grads()` has already reduce-scattered (avg) the
/// gradients into this rank's shard, so the optimizer must not do it again.
inline ShardedOptions sharded_options_of(const DataParallel& dp) {
  return ShardedOptions{.reduce_scatter_grads =
                            dp.options().gradient_sync != GradientSync::reduce_scatter &&
                            dp.options().sharding == Sharding::none};
}

}  // namespace cohort
