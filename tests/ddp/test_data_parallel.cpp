// DataParallel on the host backend (each transport), ranks as threads: data-parallel SGD against
// one rank with the whole batch (world sizes 1 to 8), bucket issue order, accumulation, consistency
// checks, unused parameters, wire compression bounds, the reduce-scatter mode and step statistics.
#include "mlp_model.hpp"
#include "support/test_helpers.hpp"

#include <cohort/comm/world.hpp>
#include <cohort/ddp/data_parallel.hpp>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <mutex>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

using cohort::test::host_data;
using ::testing::HasSubstr;

cohort::WorldOptions host_options() {
  cohort::WorldOptions options;
  options.backend = cohort::BackendChoice::host;
  options.timeout = std::chrono::seconds(30);
  return options;
}

/// Small caps so that the tiny model spans several buckets and buckets cut through parameters.
cohort::DataParallelOptions small_buckets() {
  return {.bucket_bytes = 512, .first_bucket_bytes = 256};
}

constexpr std::size_t kBatch = 840;  // divisible by every world size 1..8
constexpr int kSteps = 5;
constexpr float kLr = 0.2f;

class DataParallelSgd : public ::testing::TestWithParam<int> {};

TEST_P(DataParallelSgd, MatchesOneRankWithTheWholeBatchAndRanksAgreeBitwise) {
  const int n = GetParam();
  std::vector<std::vector<float>> arenas(static_cast<std::size_t>(n));
  std::vector<std::string> plans(static_cast<std::size_t>(n));
  std::vector<cohort::test::MlpTensors> unpacked(static_cast<std::size_t>(n));
  std::vector<cohort::StepStats> stats(static_cast<std::size_t>(n));
  cohort::run_local(
      n,
      [&](cohort::World& world) {
        cohort::ParamRegistry registry;
        const cohort::test::Mlp mlp(registry);
        cohort::DataParallelOptions options = small_buckets();
        // Every rank initialises differently; the broadcast must leave rank 0's values.
        options.init = [&](cohort::DataParallel& dp) {
          cohort::test::mlp_init(dp, mlp, static_cast<float>(world.rank()));
        };
        cohort::DataParallel dp(world, registry, options);
        const auto r = static_cast<std::size_t>(world.rank());
        arenas[r] = cohort::test::mlp_train(dp, mlp, kBatch, kSteps, kLr);
        plans[r] = dp.plan().describe();
        unpacked[r] = cohort::test::mlp_unpack(dp, mlp);
        stats[r] = dp.last_step_stats();
        EXPECT_EQ(stats[r].step, static_cast<std::uint64_t>(kSteps));
        EXPECT_EQ(stats[r].collectives, dp.plan().buckets.size());
        EXPECT_EQ(stats[r].bytes, dp.plan().arena_bytes());
      },
      host_options());

  const cohort::test::MlpTensors reference = cohort::test::mlp_reference(kBatch, kSteps, kLr);
  auto expect_close = [&](const std::vector<float>& got, const std::vector<float>& want,
                          const char* what) {
    ASSERT_EQ(got.size(), want.size());
    for (std::size_t i = 0; i < got.size(); ++i) {
      if (n == 1) {  // averaging over one rank is exact: the same floats as the reference
        ASSERT_EQ(got[i], want[i]) << what << "[" << i << "]";
      } else {
        ASSERT_NEAR(got[i], want[i], 2e-6f * (1.0f + std::abs(want[i]))) << what << "[" << i << "]";
      }
    }
  };
  expect_close(unpacked[0].w1, reference.w1, "fc1.weight");
  expect_close(unpacked[0].b1, reference.b1, "fc1.bias");
  expect_close(unpacked[0].w2, reference.w2, "fc2.weight");
  expect_close(unpacked[0].b2, reference.b2, "fc2.bias");
  // The model actually moved (the test would pass trivially with a zero learning rate otherwise).
  EXPECT_GT(std::abs(reference.b2[0] - cohort::test::mlp_initial(0.0f).b2[0]), 1e-3f);
  for (int r = 1; r < n; ++r) {
    const auto& arena = arenas[static_cast<std::size_t>(r)];
    ASSERT_EQ(arena.size(), arenas[0].size());
    EXPECT_EQ(std::memcmp(arena.data(), arenas[0].data(), arena.size() * sizeof(float)), 0)
        << "rank " << r << " differs from rank 0";
    EXPECT_EQ(plans[static_cast<std::size_t>(r)], plans[0]) << "rank " << r;
  }
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, DataParallelSgd, ::testing::Range(1, 9));

/// A registry of 12 parameters of assorted sizes (some cut by buckets, some sharing one).
std::vector<cohort::ParamHandle> assorted(cohort::ParamRegistry& registry) {
  const std::size_t sizes[] = {300, 7, 64, 129, 1, 500, 33, 200, 65, 90, 3, 257};
  std::vector<cohort::ParamHandle> handles;
  for (std::size_t i = 0; i < std::size(sizes); ++i) {
    std::string name = "p";
    name.append(std::to_string(i));
    handles.push_back(registry.add(name, {sizes[i]}));
  }
  return handles;
}

TEST(DataParallel, ShuffledReadyMarksStillIssueBucketsInOrder) {
  for (const int n : {2, 3}) {
    cohort::run_local(
        n,
        [&](cohort::World& world) {
          cohort::ParamRegistry registry;
          const auto handles = assorted(registry);
          cohort::DataParallel dp(world, registry, small_buckets());
          const cohort::BucketPlan& plan = dp.plan();
          ASSERT_GE(plan.buckets.size(), 8u);
          const int r = world.rank();
          for (std::size_t i = 0; i < plan.arena_count; ++i) {
            host_data(dp.grad_arena())[i] =
                static_cast<float>((r + 1) * static_cast<int>(1 + i % 5));
          }
          std::vector<cohort::ParamHandle> order = handles;
          std::mt19937 random(static_cast<unsigned>(100 + r));
          std::shuffle(order.begin(), order.end(), random);
          std::vector<bool> marked(handles.size(), false);
          for (const cohort::ParamHandle h : order) {
            dp.grad_ready(h);
            marked[h.index] = true;
            // Expected: the leading buckets all of whose parameters are marked.
            std::size_t ready = 0;
            while (ready < plan.buckets.size() &&
                   std::all_of(plan.buckets[ready].params.begin(), plan.buckets[ready].params.end(),
                               [&](std::uint32_t p) { return marked[p]; })) {
              ++ready;
            }
            ASSERT_EQ(dp.buckets_issued(), ready)
                << "rank " << r << " after marking " << registry.info(h).name;
          }
          EXPECT_EQ(dp.buckets_issued(), plan.buckets.size());
          dp.sync_grads();
          dp.compute_stream().synchronize();
          // The communicator saw the buckets' all-reduces in bucket order.
          const auto records = world.comm().recent_collectives();
          ASSERT_GE(records.size(), plan.buckets.size());
          const std::size_t first = records.size() - plan.buckets.size();
          for (std::size_t b = 0; b < plan.buckets.size(); ++b) {
            EXPECT_EQ(records[first + b].op, cohort::CollectiveOp::all_reduce);
            EXPECT_EQ(records[first + b].count, plan.buckets[b].slice.count) << "bucket " << b;
            EXPECT_EQ(records[first + b].reduce, cohort::ReduceOp::avg);
          }
          const float mean_rank = static_cast<float>(n + 1) / 2.0f;
          for (std::size_t i = 0; i < plan.arena_count; ++i) {
            ASSERT_FLOAT_EQ(host_data(dp.grad_arena())[i],
                            mean_rank * static_cast<float>(1 + i % 5))
                << i;
          }
        },
        host_options());
  }
}

TEST(DataParallel, NoSyncAccumulatesLocallyAndTheNextStepReducesTheSum) {
  const int n = 3;
  cohort::run_local(
      n,
      [&](cohort::World& world) {
        cohort::ParamRegistry registry;
        const auto handles = assorted(registry);
        cohort::DataParallel dp(world, registry, small_buckets());
        const auto r = static_cast<float>(world.rank() + 1);
        const std::size_t count = dp.grad_arena().count();
        float* grads = host_data(dp.grad_arena());
        const std::size_t collectives_before = world.comm().recent_collectives().size();
        const auto micro_step = [&](float m, bool mark_last) {
          dp.compute_stream().enqueue([=] {
            for (std::size_t i = 0; i < count; ++i) {
              grads[i] += r * m * static_cast<float>(1 + i % 7);
            }
          });
          for (std::size_t k = 0; k < handles.size(); ++k) {
            if (mark_last || k + 1 < handles.size()) {
              dp.grad_ready(handles[k]);
            }
          }
        };
        dp.zero_grads();
        {
          auto guard = dp.no_sync();
          EXPECT_FALSE(dp.syncing());
          micro_step(1.0f, true);
          dp.sync_grads();  // does nothing inside no_sync
          micro_step(2.0f, true);
          EXPECT_EQ(dp.buckets_issued(), 0u);
        }
        EXPECT_TRUE(dp.syncing());
        dp.compute_stream().synchronize();
        EXPECT_EQ(world.comm().recent_collectives().size(), collectives_before)
            << "no_sync communicated";
        // The last parameter is not marked in the synchronized micro-step: it was marked in the
        // window, so it is reduced with its accumulated gradient, without an error.
        micro_step(3.0f, false);
        dp.sync_grads();
        dp.compute_stream().synchronize();
        const float mean_rank = static_cast<float>(n + 1) / 2.0f;
        for (std::size_t i = 0; i < dp.plan().used_count; ++i) {
          ASSERT_FLOAT_EQ(grads[i], mean_rank * 6.0f * static_cast<float>(1 + i % 7)) << i;
        }
        dp.zero_grads();
        dp.compute_stream().synchronize();
        EXPECT_TRUE(std::all_of(grads, grads + count, [](float g) { return g == 0.0f; }));
      },
      host_options());
}

TEST(DataParallel, AMismatchedRegistryNamesTheParameterAndTheRanks) {
  const int n = 4;
  std::vector<std::string> messages(static_cast<std::size_t>(n));
  cohort::run_local(
      n,
      [&](cohort::World& world) {
        cohort::ParamRegistry registry;
        registry.add("fc1.weight", {8, 4});
        registry.add("fc2.weight", world.rank() == 2 ? std::vector<std::size_t>{4, 8}
                                                     : std::vector<std::size_t>{8, 8});
        registry.add("fc2.bias", {8});
        try {
          cohort::DataParallel dp(world, registry);
        } catch (const cohort::InvalidArgument& error) {
          messages[static_cast<std::size_t>(world.rank())] = error.what();
        }
      },
      host_options());
  for (const std::string& message : messages) {
    EXPECT_THAT(message, HasSubstr("'parameter #1 fc2.weight [8, 8] f32'"));
    EXPECT_THAT(message, HasSubstr("'parameter #1 fc2.weight [4, 8] f32'"));
    EXPECT_THAT(message, HasSubstr("ranks 0, 1, 3 have"));
    EXPECT_THAT(message, HasSubstr("where rank 2 has"));
  }
}

TEST(DataParallel, AMissingParameterOrADifferentOptionIsNamed) {
  std::vector<std::string> messages(3);
  cohort::run_local(
      3,
      [&](cohort::World& world) {
        cohort::ParamRegistry registry;
        registry.add("a", {8});
        if (world.rank() != 1) {
          registry.add("b", {8});
        }
        try {
          cohort::DataParallel dp(world, registry);
        } catch (const cohort::InvalidArgument& error) {
          messages[static_cast<std::size_t>(world.rank())] = error.what();
        }
        // Same parameters, different bucket caps.
        cohort::ParamRegistry same;
        same.add("a", {8});
        try {
          cohort::DataParallel dp(world, same, {.bucket_bytes = world.rank() == 0 ? 4096u : 8192u});
          ADD_FAILURE() << "different bucket_bytes were accepted";
        } catch (const cohort::InvalidArgument& error) {
          EXPECT_THAT(error.what(), HasSubstr("option bucket_bytes = 4096"));
          EXPECT_THAT(error.what(), HasSubstr("ranks 1, 2 have 'option bucket_bytes = 8192'"));
        }
      },
      host_options());
  for (const std::string& message : messages) {
    EXPECT_THAT(message, HasSubstr("ranks 0, 2 have 'parameter #1 b [8] f32'"));
    EXPECT_THAT(message, HasSubstr("rank 1 has 'option bucket_bytes"));
  }
}

TEST(DataParallel, AnUnmarkedParameterIsAnErrorNamingIt) {
  cohort::run_local(
      2,
      [&](cohort::World& world) {
        cohort::ParamRegistry registry;
        const auto a = registry.add("layer.a", {100});
        const auto b = registry.add("layer.b", {50});
        registry.add("layer.unused", {10});
        cohort::DataParallel dp(world, registry, small_buckets());
        dp.grad_ready(a);
        dp.grad_ready(b);
        try {
          dp.sync_grads();
          ADD_FAILURE() << "an unmarked parameter was accepted";
        } catch (const cohort::InvalidArgument& error) {
          // The likeliest cause is a gradient written but not marked: the first remedy is the
          // mark. UnusedParams::zero would discard that gradient, so it comes second, for a
          // parameter the step did not use, saying what it does.
          const std::string what = error.what();
          EXPECT_THAT(what, HasSubstr("parameter 'layer.unused' was never marked ready in this "
                                      "step. Call dp.grad_ready(handle) after writing its "
                                      "gradient."));
          EXPECT_THAT(what, HasSubstr("Only if this step did not use it at all, set "
                                      "DataParallelOptions::unused_params = "
                                      "cohort::UnusedParams::zero, which zeroes the gradient of "
                                      "every unmarked parameter (a gradient written but not "
                                      "marked is lost)"));
          EXPECT_LT(what.find("grad_ready"), what.find("UnusedParams::zero")) << what;
        }
        // A second mark in one step is an error too.
        dp.grad_ready(a);
        EXPECT_THROW(dp.grad_ready(a), cohort::InvalidArgument);
      },
      host_options());
}

TEST(DataParallel, UnusedParamsZeroReducesThemAsZeroGradients) {
  const int n = 2;
  cohort::run_local(
      n,
      [&](cohort::World& world) {
        cohort::ParamRegistry registry;
        const auto a = registry.add("a", {100});
        const auto b = registry.add("b", {70});
        const auto c = registry.add("c", {10});
        cohort::DataParallelOptions options = small_buckets();
        options.unused_params = cohort::UnusedParams::zero;
        cohort::DataParallel dp(world, registry, options);
        const int r = world.rank();
        for (const auto h : {a, b, c}) {
          std::fill_n(host_data(dp.grad(h)), dp.grad(h).count(), 8.0f * static_cast<float>(r + 1));
        }
        dp.grad_ready(a);
        if (r == 0) {
          dp.grad_ready(b);  // rank 1 does not use b; nobody uses c
        }
        dp.sync_grads();
        dp.compute_stream().synchronize();
        EXPECT_EQ(host_data(dp.grad(a))[0], 12.0f);  // (8 + 16) / 2
        EXPECT_EQ(host_data(dp.grad(b))[69], 4.0f);  // (8 + 0) / 2
        EXPECT_EQ(host_data(dp.grad(c))[9], 0.0f);
      },
      host_options());
}

/// Random gradients in [-1, 1] (seeded by rank), all-reduced with compression; every element is
/// checked against the exact mean of the f32 inputs with the documented bound.
void check_compression(cohort::Compression compression, double unit_roundoff,
                       double subnormal_spacing) {
  for (const int n : {1, 3, 4}) {
    std::vector<std::vector<float>> inputs(static_cast<std::size_t>(n));
    std::vector<std::vector<float>> outputs(static_cast<std::size_t>(n));
    std::size_t used = 0;
    std::size_t wire_bytes = 0;
    cohort::run_local(
        n,
        [&](cohort::World& world) {
          cohort::ParamRegistry registry;
          assorted(registry);
          cohort::DataParallelOptions options = small_buckets();
          options.bucket_bytes = 2048;
          options.compression = compression;
          cohort::DataParallel dp(world, registry, options);
          const auto r = static_cast<std::size_t>(world.rank());
          std::mt19937 random(static_cast<unsigned>(7 + r));
          std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
          float* grads = host_data(dp.grad_arena());
          for (std::size_t i = 0; i < dp.plan().used_count; ++i) {
            grads[i] = uniform(random);
          }
          inputs[r].assign(grads, grads + dp.plan().used_count);
          for (std::uint32_t p = 0; p < registry.size(); ++p) {
            dp.grad_ready(cohort::ParamHandle{p});
          }
          dp.sync_grads();
          dp.compute_stream().synchronize();
          outputs[r].assign(grads, grads + dp.plan().used_count);
          const auto rank_wire_bytes = dp.last_step_stats().bytes;
          EXPECT_EQ(rank_wire_bytes, dp.plan().arena_count * 2);
          if (world.rank() == 0) {  // one writer: every rank running this is a data race
            used = dp.plan().used_count;
            wire_bytes = rank_wire_bytes;
          }
        },
        host_options());
    double worst = 0.0;
    for (std::size_t i = 0; i < used; ++i) {
      double sum = 0.0;
      double magnitude = 0.0;
      for (int r = 0; r < n; ++r) {
        sum += static_cast<double>(inputs[static_cast<std::size_t>(r)][i]);
        magnitude += std::abs(static_cast<double>(inputs[static_cast<std::size_t>(r)][i]));
      }
      const double exact = sum / n;
      const double bound = (n + 2) * unit_roundoff * magnitude / n + n * subnormal_spacing;
      for (int r = 0; r < n; ++r) {
        const double got = static_cast<double>(outputs[static_cast<std::size_t>(r)][i]);
        ASSERT_LE(std::abs(got - exact), bound) << "n " << n << " element " << i;
        worst = std::max(worst, std::abs(got - exact) / (magnitude / n));
      }
    }
    // The wire really was 16-bit: some error is visible (a bound that could never fail would be
    // a defect), but within the documented one.
    EXPECT_GT(worst, unit_roundoff / 64) << "n " << n;
  }
}

TEST(DataParallel, Bf16CompressionStaysWithinItsErrorBound) {
  check_compression(cohort::Compression::bf16, std::ldexp(1.0, -8), 0.0);
}

TEST(DataParallel, F16CompressionStaysWithinItsErrorBound) {
  check_compression(cohort::Compression::f16, std::ldexp(1.0, -11), std::ldexp(1.0, -24));
}

TEST(DataParallel, ReduceScatterModeLeavesTheAveragedShard) {
  for (const int n : {1, 2, 3, 5}) {
    cohort::run_local(
        n,
        [&](cohort::World& world) {
          cohort::ParamRegistry registry;
          const auto handles = assorted(registry);
          cohort::DataParallelOptions options;
          options.gradient_sync = cohort::GradientSync::reduce_scatter;
          cohort::DataParallel dp(world, registry, options);
          const int r = world.rank();
          const std::size_t arena = dp.grad_arena().count();
          ASSERT_EQ(dp.shard_count() * static_cast<std::size_t>(n), arena);
          ASSERT_EQ(dp.shard_offset(), static_cast<std::size_t>(r) * dp.shard_count());
          ASSERT_EQ(dp.shard_count() % 64, 0u);  // 256-byte aligned shards
          ASSERT_EQ(dp.grad_shard().data(), host_data(dp.grad_arena()) + dp.shard_offset());
          float* grads = host_data(dp.grad_arena());
          for (std::size_t i = 0; i < arena; ++i) {
            grads[i] = static_cast<float>((r + 1) * static_cast<int>(i % 11));
          }
          for (const auto h : handles) {
            dp.grad_ready(h);
            EXPECT_EQ(dp.buckets_issued(), 0u);
          }
          dp.sync_grads();
          dp.compute_stream().synchronize();
          const float mean_rank = static_cast<float>(n + 1) / 2.0f;
          for (std::size_t k = 0; k < dp.shard_count(); ++k) {
            const std::size_t i = dp.shard_offset() + k;
            ASSERT_FLOAT_EQ(host_data(dp.grad_shard())[k], mean_rank * static_cast<float>(i % 11))
                << "rank " << r << " shard element " << k;
          }
          const cohort::StepStats stats = dp.last_step_stats();
          EXPECT_EQ(stats.collectives, 1u);
          EXPECT_EQ(stats.bytes, dp.plan().arena_bytes());
          const auto last = world.comm().recent_collectives().back();
          EXPECT_EQ(last.op, cohort::CollectiveOp::reduce_scatter);
        },
        host_options());
  }
}

TEST(DataParallel, StatisticsCountBytesAndTimeTheCollectives) {
  cohort::run_local(
      2,
      [&](cohort::World& world) {
        cohort::ParamRegistry registry;
        const auto a = registry.add("a", {1 << 10});
        const auto b = registry.add("b", {1 << 18});
        cohort::DataParallel dp(world, registry,
                                {.bucket_bytes = 1 << 17, .first_bucket_bytes = 1 << 17});
        EXPECT_EQ(dp.last_step_stats().step, 0u);
        // b's gradients are ready first (reverse registration order: its buckets come first) and
        // its eight buckets are reduced while "backward" of a runs on the compute stream; that
        // backward ends only once the eight reductions have completed (a handshake, not a
        // sleep), so only a's one small bucket remains after it: the exposed time is a's bucket
        // alone, less than the total.
        const auto records = world.comm().recent_collectives();
        const std::uint64_t before = records.empty() ? 0 : records.back().sequence;
        dp.grad_ready(b);
        dp.compute_stream().enqueue([&world, before] {
          EXPECT_TRUE(cohort_test::wait_until(
              [&] {
                std::size_t completed = 0;
                for (const auto& record : world.comm().recent_collectives()) {
                  completed += record.sequence > before &&
                               record.state == cohort::CollectiveRecord::State::completed;
                }
                return completed >= 8;
              },
              "the eight buckets of b being reduced"));
        });
        dp.grad_ready(a);
        dp.sync_grads();
        const cohort::StepStats stats = dp.last_step_stats();
        EXPECT_EQ(stats.step, 1u);
        EXPECT_EQ(stats.collectives, dp.plan().buckets.size());
        EXPECT_EQ(stats.collectives, 9u);  // 1 MiB of b in 128 KiB buckets, then 4 KiB of a
        EXPECT_EQ(stats.bytes, 4u * ((1u << 18) + (1u << 10)));
        EXPECT_GT(stats.comm_ms, 0.0);
        EXPECT_GE(stats.exposed_ms, 0.0);
        EXPECT_LT(stats.exposed_ms, stats.comm_ms) << "the reduction of b was not overlapped";
      },
      host_options());
}

// The default caps come from a link measurement that every rank shares, so every rank plans the
// same buckets; fixed caps stay as given.
TEST(DataParallel, AutomaticBucketCapsAreMeasuredOnceAndAgreedByEveryRank) {
  constexpr int kRanks = 3;
  std::vector<cohort::BucketSizing> sizings(kRanks);
  std::vector<std::string> plans(kRanks);
  cohort::run_local(
      kRanks,
      [&](cohort::World& world) {
        cohort::ParamRegistry registry;
        registry.add("a", {1 << 18});
        registry.add("b", {1 << 10});
        const cohort::DataParallel automatic(world, registry);
        const auto r = static_cast<std::size_t>(world.rank());
        sizings[r] = automatic.bucket_sizing();
        plans[r] = automatic.plan().describe();
        const cohort::DataParallel fixed(world, registry, small_buckets());
        EXPECT_FALSE(fixed.bucket_sizing().automatic);
        EXPECT_EQ(fixed.bucket_sizing().middle_bytes, 512u);
        EXPECT_EQ(fixed.bucket_sizing().first_bytes, 256u);
      },
      host_options());
  for (int r = 0; r < kRanks; ++r) {
    const cohort::BucketSizing& sizing = sizings[static_cast<std::size_t>(r)];
    EXPECT_TRUE(sizing.automatic);
    EXPECT_GT(sizing.link.bytes_per_us, 0.0);
    EXPECT_GE(sizing.link.alpha_us, 0.0);
    EXPECT_EQ(sizing.describe(), sizings[0].describe()) << "rank " << r;
    EXPECT_EQ(plans[static_cast<std::size_t>(r)], plans[0]) << "rank " << r;
    const cohort::BucketSizing expected = cohort::choose_bucket_sizes(sizing.link);
    EXPECT_EQ(sizing.first_bytes, expected.first_bytes);
    EXPECT_EQ(sizing.middle_bytes, expected.middle_bytes);
  }
}

TEST(DataParallel, RejectsMixedDtypesAndCompressionOfA16BitArena) {
  cohort::run_local(
      1,
      [&](cohort::World& world) {
        cohort::ParamRegistry mixed;
        mixed.add("w", {4});
        mixed.add("w16", {4}, cohort::DType::bf16);
        try {
          cohort::DataParallel dp(world, mixed);
          ADD_FAILURE() << "mixed dtypes were accepted";
        } catch (const cohort::InvalidArgument& error) {
          EXPECT_THAT(error.what(),
                      HasSubstr("'w16' is bf16 but the first parameter, 'w', is f32"));
        }
        cohort::ParamRegistry half;
        half.add("w", {4}, cohort::DType::bf16);
        EXPECT_THROW(cohort::DataParallel(world, half, {.compression = cohort::Compression::f16}),
                     cohort::InvalidArgument);
        cohort::DataParallel dp(world, half);  // a bf16 arena by itself is fine
        EXPECT_EQ(dp.dtype(), cohort::DType::bf16);
        EXPECT_EQ(dp.grad_arena().count() % 128, 0u);
      },
      host_options());
}

}  // namespace
