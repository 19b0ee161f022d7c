// Optimizers across ranks (threads over Gloo): ZeRO-1 against the unsharded optimizer over world
// sizes 1 to 8; an overflow on one rank skips the step on every rank; the clipping norm is global.

#include "optim_test_util.hpp"

#include <cohort/comm/world.hpp>
#include <cohort/core/stream.hpp>
#include <cohort/optim/adamw.hpp>
#include <cohort/optim/clip.hpp>
#include <cohort/optim/loss_scaler.hpp>
#include <cohort/optim/sgd.hpp>
#include <cohort/optim/sharded_optimizer.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <limits>
#include <span>
#include <vector>

namespace cohort_test {
namespace {

using cohort::bfloat16;

cohort::WorldOptions host_options() {
  cohort::WorldOptions options;
  options.backend = cohort::BackendChoice::host;
  options.timeout = std::chrono::seconds(60);
  return options;
}

constexpr std::size_t kPerRank = 257;  // odd: shards start at unaligned offsets
constexpr int kSteps = 3;

struct RankResult {
  std::vector<double> unsharded;
  std::vector<double> sharded;
  std::size_t state_bytes = 0;
  std::size_t shard_offset = 0;
  std::size_t shard_count = 0;
};

/// Each rank draws its own gradients. Unsharded: all-reduce (avg) then step. ZeRO-1: step (which
/// reduce-scatters, steps the shard and all-gathers), or with `pre_reduced` the caller
/// reduce-scatters into the shard first, as DataParallel does.
template <typename Param, typename Options>
std::vector<RankResult> run_zero_one(int ranks, const Options& options, bool pre_reduced = false) {
  std::vector<RankResult> results(static_cast<std::size_t>(ranks));
  cohort::run_local(
      ranks,
      [&](cohort::World& world) {
        const auto rank = static_cast<std::size_t>(world.rank());
        const std::size_t count = kPerRank * static_cast<std::size_t>(world.size());
        const auto stream = cohort::Stream::create(cohort::Device::host());
        const std::vector<Param> initial = random_values<Param>(count, 7);
        std::vector<Param> plain_params = initial;
        std::vector<Param> sharded_params = initial;
        std::vector<Param> plain_grads(count);
        std::vector<Param> sharded_grads(count);
        using Optimizer = std::conditional_t<std::is_same_v<Options, cohort::SgdOptions>,
                                             cohort::Sgd, cohort::AdamW>;
        Optimizer plain(
            {std::span<Param>(plain_params), std::span<Param>(plain_grads), stream, &world.comm()},
            options);
        cohort::ShardedOptimizer sharded({std::span<Param>(sharded_params),
                                          std::span<Param>(sharded_grads), stream, &world.comm()},
                                         options, {.reduce_scatter_grads = !pre_reduced});
        for (int step = 0; step < kSteps; ++step) {
          stream.synchronize();
          const auto grads = random_values<Param>(count, static_cast<std::uint32_t>(1000 * rank) +
                                                             17 + static_cast<std::uint32_t>(step));
          std::copy(grads.begin(), grads.end(), plain_grads.begin());
          std::copy(grads.begin(), grads.end(), sharded_grads.begin());
          world.comm().all_reduce(std::span<Param>(plain_grads), cohort::ReduceOp::avg, stream);
          plain.step();
          if (pre_reduced) {
            const cohort::TensorView all = std::span<Param>(sharded_grads);
            world.comm().reduce_scatter(all,
                                        all.slice(sharded.shard_offset(), sharded.shard_count()),
                                        cohort::ReduceOp::avg, stream);
          }
          sharded.step();
        }
        stream.synchronize();
        RankResult& result = results[rank];
        result.unsharded = to_doubles(plain_params);
        result.sharded = to_doubles(sharded_params);
        result.state_bytes = sharded.state_bytes();
        result.shard_offset = sharded.shard_offset();
        result.shard_count = sharded.shard_count();
      },
      host_options());
  return results;
}

template <typename Param, typename Options>
void expect_zero_one_matches(const Options& options, std::size_t state_floats_per_element,
                             bool pre_reduced = false) {
  for (int ranks = 1; ranks <= 8; ++ranks) {
    SCOPED_TRACE(testing::Message() << ranks << " ranks");
    const auto results = run_zero_one<Param>(ranks, options, pre_reduced);
    for (std::size_t r = 0; r < results.size(); ++r) {
      const RankResult& result = results[r];
      EXPECT_EQ(result.shard_count, kPerRank);
      EXPECT_EQ(result.shard_offset, r * kPerRank);
      EXPECT_EQ(result.state_bytes, state_floats_per_element * kPerRank * sizeof(float))
          << "rank " << r << " keeps state for its shard only";
      ASSERT_EQ(result.sharded.size(), results[0].unsharded.size());
      for (std::size_t i = 0; i < result.sharded.size(); ++i) {
        const double expected = results[0].unsharded[i];
        const double tolerance = std::is_same_v<Param, float>
                                     ? f32_tolerance(expected)
                                     : unit_roundoff<Param>() * std::fabs(expected);
        ASSERT_NEAR(result.sharded[i], expected, tolerance) << "rank " << r << ", element " << i;
        ASSERT_EQ(result.unsharded[i], expected) << "unsharded ranks disagree at " << i;
      }
    }
  }
}

TEST(ZeroOne, AdamWMatchesTheUnshardedOptimizerOnOneToEightRanks) {
  expect_zero_one_matches<float>(cohort::AdamWOptions{.lr = 1e-2f, .weight_decay = 0.1f}, 2);
}

TEST(ZeroOne, SgdMatchesTheUnshardedOptimizerOnOneToEightRanks) {
  expect_zero_one_matches<float>(
      cohort::SgdOptions{.lr = 0.1f, .momentum = 0.9f, .weight_decay = 0.01f}, 1);
}

TEST(ZeroOne, Bf16AdamWWithMasterWeightsMatchesTheUnshardedOptimizer) {
  expect_zero_one_matches<bfloat16>(cohort::AdamWOptions{.lr = 1e-2f}, 3);
}

TEST(ZeroOne, WorksOnGradientsTheCallerReduceScattered) {
  expect_zero_one_matches<float>(cohort::AdamWOptions{.lr = 1e-2f}, 2, /*pre_reduced=*/true);
}

TEST(ZeroOne, RejectsAnArenaThatIsNotAMultipleOfTheWorldSize) {
  EXPECT_THROW(cohort::run_local(
                   2,
                   [](cohort::World& world) {
                     const auto stream = cohort::Stream::create(cohort::Device::host());
                     std::vector<float> params(5, 1.0f);
                     std::vector<float> grads(5, 1.0f);
                     cohort::ShardedOptimizer optimizer(
                         {std::span<float>(params), std::span<float>(grads), stream, &world.comm()},
                         cohort::AdamWOptions{});
                   },
                   host_options()),
               cohort::InvalidArgument);
}

// ---- an overflow on one rank ----

template <bool kSharded>
void expect_every_rank_skips(int ranks) {
  cohort::run_local(
      ranks,
      [&](cohort::World& world) {
        const std::size_t count = kPerRank * static_cast<std::size_t>(world.size());
        const auto stream = cohort::Stream::create(cohort::Device::host());
        std::vector<float> params = random_values<float>(count, 3);
        std::vector<float> grads(count);
        const cohort::OptimizerTarget target{std::span<float>(params), std::span<float>(grads),
                                             stream, &world.comm()};
        const cohort::AdamWOptions options{.lr = 1e-2f};
        std::unique_ptr<cohort::Optimizer> optimizer;
        if constexpr (kSharded) {
          optimizer = std::make_unique<cohort::ShardedOptimizer>(target, options);
        } else {
          optimizer = std::make_unique<cohort::AdamW>(target, options);
        }
        cohort::LossScaler scaler(cohort::Device::host());
        optimizer->set_loss_scaler(&scaler);
        auto fill = [&](std::uint32_t seed, bool poison) {
          stream.synchronize();
          const float scale = scaler.read(stream).scale;
          const auto fresh = random_values<float>(count, seed);  // the same on every rank
          for (std::size_t i = 0; i < count; ++i) {
            grads[i] = fresh[i] * scale;
          }
          if (poison) {  // on the last rank only, in the first rank's shard
            grads[1] = std::numeric_limits<float>::infinity();
          }
        };
        fill(1, false);
        optimizer->step();
        stream.synchronize();
        const std::vector<float> before = params;
        fill(2, world.rank() == world.size() - 1);
        optimizer->step();
        const auto state = scaler.read(stream);
        EXPECT_TRUE(state.last_step_skipped) << "rank " << world.rank();
        EXPECT_EQ(state.scale, 32768.0f) << "rank " << world.rank();
        EXPECT_EQ(state.skipped_steps, 1);
        EXPECT_EQ(optimizer->steps_taken(), 1);
        EXPECT_EQ(params, before) << "rank " << world.rank() << " stepped";
        fill(3, false);
        optimizer->step();
        EXPECT_EQ(optimizer->steps_taken(), 2) << "rank " << world.rank();
        EXPECT_FALSE(scaler.read(stream).last_step_skipped);
      },
      host_options());
}

TEST(LossScalerAcrossRanks, OverflowOnOneRankSkipsAndHalvesOnEveryRank) {
  for (int ranks : {1, 2, 3, 5}) {
    SCOPED_TRACE(testing::Message() << ranks << " ranks");
    expect_every_rank_skips<false>(ranks);
  }
}

TEST(LossScalerAcrossRanks, OverflowOnOneRankSkipsEveryShardOfAShardedOptimizer) {
  for (int ranks : {1, 2, 4}) {
    SCOPED_TRACE(testing::Message() << ranks << " ranks");
    expect_every_rank_skips<true>(ranks);
  }
}

// ---- clipping across ranks ----

template <bool kSharded>
void expect_global_norm(int ranks) {
  cohort::run_local(
      ranks,
      [&](cohort::World& world) {
        const std::size_t count = kPerRank * static_cast<std::size_t>(world.size());
        const auto stream = cohort::Stream::create(cohort::Device::host());
        std::vector<float> params = random_values<float>(count, 5);
        const cohort::SgdOptions options{.lr = 0.1f, .momentum = 0.5f};
        ReferenceSgd reference(to_doubles(params), options);
        // The reference gradient: the average of every rank's.
        std::vector<double> average(count, 0.0);
        std::vector<float> grads;
        for (int r = 0; r < world.size(); ++r) {
          const auto mine = random_values<float>(count, 50 + static_cast<std::uint32_t>(r));
          for (std::size_t i = 0; i < count; ++i) {
            average[i] += static_cast<double>(mine[i]) / world.size();
          }
          if (r == world.rank()) {
            grads = mine;
          }
        }
        const cohort::OptimizerTarget target{std::span<float>(params), std::span<float>(grads),
                                             stream, &world.comm()};
        std::unique_ptr<cohort::Optimizer> optimizer;
        if constexpr (kSharded) {
          optimizer = std::make_unique<cohort::ShardedOptimizer>(target, options);
        } else {
          optimizer = std::make_unique<cohort::Sgd>(target, options);
          world.comm().all_reduce(std::span<float>(grads), cohort::ReduceOp::avg, stream);
        }
        const double norm = l2_norm(average);
        const auto max_norm = static_cast<float>(norm / 3);
        const cohort::GradNorm measured = cohort::clip_grad_norm(*optimizer, max_norm);
        EXPECT_NEAR(measured.value(), norm, 1e-5 * norm) << "rank " << world.rank();
        optimizer->step();
        stream.synchronize();
        reference.step(average, static_cast<double>(max_norm) / (norm + 1e-6));
        for (std::size_t i = 0; i < count; ++i) {
          ASSERT_NEAR(params[i], reference.params()[i], f32_tolerance(reference.params()[i]))
              << "rank " << world.rank() << ", element " << i;
        }
      },
      host_options());
}

TEST(ClipAcrossRanks, NormOfAllReducedGradientsIsGlobal) {
  for (int ranks : {1, 2, 3, 4}) {
    SCOPED_TRACE(testing::Message() << ranks << " ranks");
    expect_global_norm<false>(ranks);
  }
}

TEST(ClipAcrossRanks, NormOfShardsIsSummedAcrossRanks) {
  for (int ranks : {1, 2, 3, 4, 8}) {
    SCOPED_TRACE(testing::Message() << ranks << " ranks");
    expect_global_norm<true>(ranks);
  }
}

}  // namespace
}  // namespace cohort_test
