// What a newcomer's plain host loop meets: reading parameters and writing gradients directly with
// no synchronize (Note [Host compute runs on the caller]), the same loop on an asynchronous
// compute stream under COHORT_DEBUG_STREAMS (Note [Debugging streams]), typed views, arenas in
// the program's own memory (Note [Your own arenas]) and the world-size-dependent padding they
// must respect.
#include "mlp_model.hpp"
#include "support/test_helpers.hpp"

#include <cohort/comm/world.hpp>
#include <cohort/ddp/data_parallel.hpp>
#include <cohort/optim/data_parallel_target.hpp>
#include <cohort/optim/sgd.hpp>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>

namespace {

using cohort::test::Mlp;
using cohort::test::MlpTensors;
using ::testing::HasSubstr;

constexpr std::size_t kBatch = 120;
constexpr int kSteps = 6;
constexpr float kLr = 0.2f;

cohort::WorldOptions host_options() {
  cohort::WorldOptions options;
  options.backend = cohort::BackendChoice::host;
  options.timeout = std::chrono::seconds(30);
  return options;
}

void copy_into(const std::vector<float>& from, const cohort::TensorView& to) {
  std::ranges::copy(from, to.span<float>().begin());
}

/// What a variant of the loop does at the start and at the end of each step.
struct LoopHooks {
  std::function<void(cohort::DataParallel&)> before_step = nullptr;
  std::function<void(cohort::DataParallel&)> after_step = nullptr;
};

/// The loop a newcomer writes: host code reads the parameters and writes the gradients through
/// typed views, cohort's optimizer steps, and nothing synchronizes a stream (unless a hook does).
std::vector<float> plain_loop(cohort::DataParallel& dp, const Mlp& mlp,
                              const LoopHooks& hooks = {}) {
  const auto n = static_cast<std::size_t>(dp.world().size());
  const auto r = static_cast<std::size_t>(dp.world().rank());
  cohort::Sgd sgd(cohort::target_of(dp), {.lr = kLr});
  for (int step = 0; step < kSteps; ++step) {
    if (hooks.before_step) {
      hooks.before_step(dp);
    }
    const MlpTensors g = cohort::test::mlp_gradients(
        dp.param(mlp.w1).span<const float>().data(), dp.param(mlp.b1).span<const float>().data(),
        dp.param(mlp.w2).span<const float>().data(), dp.param(mlp.b2).span<const float>().data(),
        r * kBatch / n, (r + 1) * kBatch / n);
    copy_into(g.b2, dp.grad(mlp.b2));
    dp.grad_ready(mlp.b2);
    copy_into(g.w2, dp.grad(mlp.w2));
    dp.grad_ready(mlp.w2);
    copy_into(g.b1, dp.grad(mlp.b1));
    dp.grad_ready(mlp.b1);
    copy_into(g.w1, dp.grad(mlp.w1));
    dp.grad_ready(mlp.w1);
    dp.sync_grads();
    sgd.step();
    if (hooks.after_step) {
      hooks.after_step(dp);
    }
  }
  dp.compute_stream().synchronize();
  const std::span<const float> arena = dp.param_arena().span<const float>();
  return {arena.begin(), arena.end()};
}

void expect_near_reference(const std::vector<float>& arena, cohort::DataParallel& dp,
                           const Mlp& mlp) {
  const MlpTensors expected = cohort::test::mlp_reference(kBatch, kSteps, kLr);
  const auto check = [&](cohort::ParamHandle h, const std::vector<float>& want) {
    const std::size_t offset = dp.plan().slots[h.index].offset;
    for (std::size_t i = 0; i < want.size(); ++i) {
      ASSERT_NEAR(arena[offset + i], want[i], 1e-4f)
          << dp.registry().info(h).name << "[" << i << "]";
    }
  };
  check(mlp.w1, expected.w1);
  check(mlp.b1, expected.b1);
  check(mlp.w2, expected.w2);
  check(mlp.b2, expected.b2);
}

class PlainHostLoop : public ::testing::TestWithParam<int> {};

// The newcomer's loop of issue 19, which trained silently wrong with an asynchronous host
// compute stream: it must now match one rank training on the whole batch, on every rank.
TEST_P(PlainHostLoop, NeedsNoSynchronizeAndMatchesOneRankWithTheWholeBatch) {
  const int n = GetParam();
  std::vector<std::vector<float>> arenas(static_cast<std::size_t>(n));
  cohort::run_local(
      n,
      [&](cohort::World& world) {
        cohort::ParamRegistry registry;
        const Mlp mlp(registry);
        cohort::DataParallel dp(
            world, registry,
            {.bucket_bytes = 512, .first_bucket_bytes = 256, .init = [&](cohort::DataParallel& d) {
               cohort::test::mlp_init(d, mlp, static_cast<float>(world.rank()));
             }});
        std::vector<float> arena = plain_loop(dp, mlp);
        expect_near_reference(arena, dp, mlp);
        arenas[static_cast<std::size_t>(world.rank())] = std::move(arena);
      },
      host_options());
  for (int r = 1; r < n; ++r) {
    EXPECT_EQ(arenas[static_cast<std::size_t>(r)], arenas[0]) << "rank " << r << " disagrees";
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, PlainHostLoop, ::testing::Values(1, 2, 4));

TEST(TypedViews, CheckTheDtypeAndWhereTheMemoryIs) {
  std::vector<float> host(8, 1.5f);
  const cohort::TensorView view{std::span<float>(host)};
  EXPECT_EQ(view.span<float>().data(), host.data());
  EXPECT_EQ(view.span<const float>().size(), 8u);
  EXPECT_EQ(view.as<float>().data(), host.data());
  EXPECT_EQ(view.slice(2, 3).as<const float>().size(), 3u);
  try {
    (void)view.span<double>();
    FAIL() << "span<double> of f32 elements";
  } catch (const cohort::InvalidArgument& error) {
    EXPECT_THAT(error.what(), HasSubstr("TensorView::span<f64>: the view holds f32 elements"));
  }
  EXPECT_THROW((void)view.as<std::int32_t>(), cohort::InvalidArgument);

  // Device memory: a typed view for kernels, never a host span (the pointer is not dereferenced).
  const cohort::TensorView device(host.data(), 8, cohort::DType::f32, cohort::Device::cuda(0));
  EXPECT_EQ(device.as<float>().size(), 8u);
  try {
    (void)device.span<float>();
    FAIL() << "a host span of CUDA memory";
  } catch (const cohort::InvalidArgument& error) {
    EXPECT_THAT(error.what(), HasSubstr("cuda:0 memory, which host code cannot read"));
  }
}

// Note [Arena layout]: the numbers the public docs quote.
TEST(ArenaLayout, PaddingDependsOnTheWorldSize) {
  cohort::ParamRegistry registry;
  registry.add("w", {161});
  EXPECT_EQ(cohort::arena_layout(registry, 1).arena_count, 192u);
  EXPECT_EQ(cohort::arena_layout(registry, 4).arena_count, 256u);
  EXPECT_EQ(cohort::arena_layout(registry, 4).shard_count, 64u);
}

/// `count` floats at a 256-byte aligned address, freed with the returned owner.
std::unique_ptr<float[], decltype(&std::free)> aligned_floats(std::size_t count) {
  const std::size_t bytes = (count * sizeof(float) + 255) / 256 * 256;
  return {static_cast<float*>(std::aligned_alloc(256, bytes)), &std::free};
}

// An llm.c-style program keeps its parameters in one blob of its own; DataParallel trains in it
// in place, with the same result as in arenas it allocates.
TEST(OwnArenas, TrainInTheProgramsMemoryWithTheSameResult) {
  for (const int n : {1, 3}) {
    std::vector<std::vector<float>> own(static_cast<std::size_t>(n));
    std::vector<std::vector<float>> allocated(static_cast<std::size_t>(n));
    cohort::run_local(
        n,
        [&](cohort::World& world) {
          cohort::ParamRegistry registry;
          const Mlp mlp(registry);
          const cohort::BucketPlan layout = cohort::arena_layout(registry, world.size());
          auto params = aligned_floats(layout.arena_count);
          auto grads = aligned_floats(layout.arena_count);
          // The program's own initial values, placed where the layout says; garbage elsewhere.
          std::fill_n(params.get(), layout.arena_count, 7.0f);
          std::fill_n(grads.get(), layout.arena_count, 7.0f);
          const MlpTensors initial = cohort::test::mlp_initial(0.0f);
          std::ranges::copy(initial.w1, params.get() + layout.slots[mlp.w1.index].offset);
          std::ranges::copy(initial.b1, params.get() + layout.slots[mlp.b1.index].offset);
          std::ranges::copy(initial.w2, params.get() + layout.slots[mlp.w2.index].offset);
          std::ranges::copy(initial.b2, params.get() + layout.slots[mlp.b2.index].offset);
          const auto view = [&](float* data) {
            return cohort::TensorView::of(data, layout.arena_count, cohort::Device::host());
          };
          const auto rank = static_cast<std::size_t>(world.rank());
          {
            cohort::DataParallel dp(world, registry,
                                    {.bucket_bytes = 512,
                                     .first_bucket_bytes = 256,
                                     .param_memory = view(params.get()),
                                     .grad_memory = view(grads.get())});
            EXPECT_EQ(dp.param_arena().data(), params.get());
            EXPECT_EQ(dp.grad_arena().data(), grads.get());
            own[rank] = plain_loop(dp, mlp);
          }
          std::vector<bool> in_slot(layout.arena_count, false);
          for (const cohort::ArenaSlice& slot : layout.slots) {
            std::fill_n(in_slot.begin() + static_cast<std::ptrdiff_t>(slot.offset), slot.count,
                        true);
          }
          for (std::size_t i = 0; i < layout.arena_count; ++i) {
            if (!in_slot[i]) {
              ASSERT_EQ(params[i], 0.0f) << "gap or padding element " << i << " was not zeroed";
            }
          }
          cohort::DataParallel dp(
              world, registry,
              {.bucket_bytes = 512,
               .first_bucket_bytes = 256,
               .init = [&](cohort::DataParallel& d) { cohort::test::mlp_init(d, mlp, 0.0f); }});
          allocated[rank] = plain_loop(dp, mlp);
        },
        host_options());
    for (std::size_t r = 0; r < own.size(); ++r) {
      EXPECT_EQ(own[r], allocated[r]) << n << " ranks, rank " << r;
    }
  }
}

TEST(OwnArenas, MemoryThatBreaksARuleIsRefusedNamingIt) {
  cohort::run_local(
      2,
      [&](cohort::World& world) {
        cohort::ParamRegistry registry;
        registry.add("w", {161});
        const std::size_t count = cohort::arena_layout(registry, world.size()).arena_count;
        auto blob = aligned_floats(3 * count + 64);
        const auto refused = [&](cohort::DataParallelOptions options, const std::string& words) {
          try {
            cohort::DataParallel dp(world, registry, std::move(options));
            ADD_FAILURE() << "accepted; expected: " << words;
          } catch (const cohort::InvalidArgument& error) {
            EXPECT_THAT(error.what(), HasSubstr(words));
          }
        };
        const auto host_view = [](float* data, std::size_t n) {
          return cohort::TensorView::of(data, n, cohort::Device::host());
        };
        refused({.param_memory = host_view(blob.get(), count - 1)},
                "param_memory holds 255 elements, but the arena of 2 rank(s) needs 256");
        refused({.grad_memory = host_view(blob.get() + 1, count)},
                "grad_memory starts at an address that is not a multiple of 256 bytes");
        refused({.param_memory = cohort::TensorView(blob.get(), count, cohort::DType::i32,
                                                    cohort::Device::host())},
                "param_memory holds i32 elements, but the parameters are f32");
        refused({.param_memory = host_view(blob.get(), count),
                 .grad_memory = host_view(blob.get() + 64, count)},
                "param_memory and grad_memory overlap");
        refused({.param_memory = cohort::TensorView(blob.get(), count, cohort::DType::f32,
                                                    cohort::Device::cuda(0))},
                "param_memory is cuda:0 memory, but this rank works on host");
      },
      host_options());
}

/// Runs the plain loop on `n` ranks with a worker-thread compute stream under
/// COHORT_DEBUG_STREAMS=1; returns each rank's error message ("" when it trained to the end and
/// matched the reference).
std::vector<std::string> debug_loop(int n, const LoopHooks& hooks) {
  const cohort_test::ScopedEnv debug("COHORT_DEBUG_STREAMS", "1");
  std::vector<std::string> errors(static_cast<std::size_t>(n));
  cohort::run_local(
      n,
      [&](cohort::World& world) {
        cohort::ParamRegistry registry;
        const Mlp mlp(registry);
        cohort::DataParallel dp(
            world, registry,
            {.bucket_bytes = 512,
             .first_bucket_bytes = 256,
             .init = [&](cohort::DataParallel& d) { cohort::test::mlp_init(d, mlp, 0.0f); },
             .host_compute = cohort::HostExecution::worker});
        try {
          const std::vector<float> arena = plain_loop(dp, mlp, hooks);
          expect_near_reference(arena, dp, mlp);
        } catch (const cohort::InvalidArgument& error) {
          errors[static_cast<std::size_t>(world.rank())] = error.what();
        }
      },
      host_options());
  return errors;
}

// Note [Debugging streams]: the newcomer's loop on an asynchronous host compute stream is
// reported at its first racy access, naming the parameter and the call not waited for, whether
// or not the race happened to go wrong this time.
TEST(DebugStreams, HostLoopThatDoesNotWaitForTheStepIsReported) {
  for (const int n : {1, 2}) {
    for (const std::string& error : debug_loop(n, {})) {
      EXPECT_THAT(error, HasSubstr("COHORT_DEBUG_STREAMS: grad_ready('fc2.bias') on the host "
                                   "after the optimizer's step() enqueued work"));
      EXPECT_THAT(error, HasSubstr("dp.compute_stream().synchronize()"));
    }
  }
  const std::vector<std::string> zeroing =
      debug_loop(1, {.before_step = [](cohort::DataParallel& dp) { dp.zero_grads(); }});
  EXPECT_THAT(zeroing[0], HasSubstr("grad_ready('fc2.bias') on the host after zero_grads()"));
}

// The ways to order host access after the library's work are all accepted, and train right.
TEST(DebugStreams, WaitingForTheComputeStreamIsAccepted) {
  const auto accepted = [](const LoopHooks& hooks, const std::string& how) {
    for (const std::string& error : debug_loop(2, hooks)) {
      EXPECT_EQ(error, "") << how;
    }
  };
  accepted({.after_step = [](cohort::DataParallel& dp) { dp.compute_stream().synchronize(); }},
           "synchronize() after step()");
  accepted({.after_step =
                [](cohort::DataParallel& dp) {
                  cohort::Event done = cohort::Event::create(dp.compute_stream().device());
                  done.record(dp.compute_stream());
                  done.synchronize();
                }},
           "an event recorded after step() and synchronized");
  accepted({.before_step =
                [](cohort::DataParallel& dp) {
                  dp.zero_grads();
                  while (!dp.compute_stream().ready()) {
                    std::this_thread::yield();
                  }
                }},
           "zero_grads(), then ready() until it says yes");
}

// Work the program enqueues on the compute stream after the library's is ordered: not reported.
TEST(DebugStreams, ComputeEnqueuedOnTheStreamIsAccepted) {
  const cohort_test::ScopedEnv debug("COHORT_DEBUG_STREAMS", "1");
  cohort::run_local(
      1,
      [&](cohort::World& world) {
        cohort::ParamRegistry registry;
        const auto w = registry.add("w", {64});
        cohort::DataParallel dp(world, registry, {.host_compute = cohort::HostExecution::worker});
        cohort::Sgd sgd(cohort::target_of(dp), {.lr = 0.5f});
        for (int step = 0; step < 3; ++step) {
          dp.zero_grads();
          dp.compute_stream().enqueue([g = dp.grad(w)] {
            for (float& x : g.span<float>()) {
              x += 1.0f;
            }
          });
          EXPECT_NO_THROW(dp.grad_ready(w));
          dp.sync_grads();
          sgd.step();
        }
        dp.compute_stream().synchronize();
        for (const float x : dp.param(w).span<const float>()) {
          ASSERT_EQ(x, -1.5f);
        }
      },
      host_options());
}

TEST(DebugStreams, AValueThatIsNotASwitchIsRefusedNamingTheVariable) {
  const cohort_test::ScopedEnv debug("COHORT_DEBUG_STREAMS", "sometimes");
  cohort::run_local(
      1,
      [&](cohort::World& world) {
        cohort::ParamRegistry registry;
        registry.add("w", {4});
        try {
          cohort::DataParallel dp(world, registry);
          ADD_FAILURE() << "COHORT_DEBUG_STREAMS=sometimes was accepted";
        } catch (const cohort::InvalidArgument& error) {
          EXPECT_THAT(error.what(), HasSubstr("COHORT_DEBUG_STREAMS"));
        }
      },
      host_options());
}

}  // namespace
