// Note [Step events]: once warm, a DataParallel step on the host backend (each transport) creates
// no event and no stream, and allocates nothing from its memory resource. The GPU side of the
// same promise is checked by ddp_gpu_worker (tests/ddp/ddp_gpu_checks.hpp).
#include "mlp_model.hpp"

#include <cohort/comm/world.hpp>
#include <cohort/core/stream.hpp>
#include <cohort/ddp/data_parallel.hpp>
#include <cohort/memory/host_resource.hpp>
#include <cohort/memory/statistics_adaptor.hpp>

#include <gtest/gtest.h>

#include <future>
#include <memory>
#include <string>
#include <vector>

namespace {

using cohort::test::host_data;

constexpr std::size_t kBatch = 840;
constexpr int kWarmSteps = 2;
constexpr int kSteadySteps = 3;

/// One SGD step of the test MLP in which every bucket's all-reduce is issued while the compute
/// stream is still held back by a gate: each collective then finds its stream busy and needs an
/// input-ready mark, every step alike, so a step that creates none does so by reuse and not by
/// luck of timing. Ends synchronized, as a step that logs its loss does.
void gated_step(cohort::DataParallel& dp, const cohort::test::Mlp& mlp, std::size_t begin,
                std::size_t end) {
  const cohort::Stream& stream = dp.compute_stream();
  auto gate = std::make_shared<std::promise<void>>();
  stream.enqueue([opened = gate->get_future().share()] { opened.wait(); });
  stream.enqueue(
      [&dp, &mlp, begin, end] { cohort::test::mlp_write_gradients(dp, mlp, begin, end); });
  dp.grad_ready(mlp.b2);
  dp.grad_ready(mlp.w2);
  dp.grad_ready(mlp.b1);
  dp.grad_ready(mlp.w1);
  dp.sync_grads();
  gate->set_value();
  stream.enqueue([&dp] {
    cohort::test::sgd(host_data(dp.param_arena()), host_data(dp.grad_arena()),
                      dp.param_arena().count(), 0.2f);
  });
  stream.synchronize();
}

struct Case {
  const char* name;
  cohort::DataParallelOptions options;
};

TEST(DataParallelSteadyStep, CreatesNoEventNorStreamAndAllocatesNothing) {
  std::vector<Case> cases;
  cases.push_back({"all-reduce, statistics on", {.bucket_bytes = 512, .first_bucket_bytes = 256}});
  cases.push_back({"all-reduce, statistics off",
                   {.bucket_bytes = 512, .first_bucket_bytes = 256, .collect_stats = false}});
  cases.push_back({"bf16 wire, reduce-scatter",
                   {.bucket_bytes = 512,
                    .first_bucket_bytes = 256,
                    .gradient_sync = cohort::GradientSync::reduce_scatter,
                    .compression = cohort::Compression::bf16}});
  cohort::WorldOptions world_options;
  world_options.backend = cohort::BackendChoice::host;  // COHORT_HOST_TRANSPORT picks shm or Gloo
  world_options.timeout = std::chrono::seconds(30);
  constexpr int kRanks = 2;
  for (const Case& test_case : cases) {
    SCOPED_TRACE(test_case.name);
    std::vector<cohort::detail::CreatedCounts> created(kRanks);
    std::vector<std::size_t> allocations(kRanks);
    std::vector<std::size_t> buckets(kRanks);
    cohort::run_local(
        kRanks,
        [&](cohort::World& world) {
          cohort::ParamRegistry registry;
          const cohort::test::Mlp mlp(registry);
          auto counted =
              std::make_shared<cohort::StatisticsAdaptor>(std::make_shared<cohort::HostResource>());
          cohort::DataParallelOptions options = test_case.options;
          options.memory = counted;
          options.host_compute = cohort::HostExecution::worker;  // the gate holds its thread
          cohort::DataParallel dp(world, registry, options);
          const auto n = static_cast<std::size_t>(world.size());
          const auto r = static_cast<std::size_t>(world.rank());
          const std::size_t begin = r * kBatch / n;
          const std::size_t end = (r + 1) * kBatch / n;
          for (int step = 0; step < kWarmSteps; ++step) {
            gated_step(dp, mlp, begin, end);
          }
          // The counts are per process and the ranks are threads: every rank is warm before the
          // first reading and done before the last one, and the store's barrier creates nothing.
          world.group().barrier("warm");
          const cohort::detail::CreatedCounts before = cohort::detail::created_counts();
          const std::size_t allocated_before = counted->statistics().allocations.total;
          world.group().barrier("counted");
          for (int step = 0; step < kSteadySteps; ++step) {
            gated_step(dp, mlp, begin, end);
          }
          world.group().barrier("steady");
          const cohort::detail::CreatedCounts after = cohort::detail::created_counts();
          created[r] = {after.events - before.events, after.streams - before.streams};
          allocations[r] = counted->statistics().allocations.total - allocated_before;
          buckets[r] = dp.plan().buckets.size();
        },
        world_options);
    for (int r = 0; r < kRanks; ++r) {
      const auto index = static_cast<std::size_t>(r);
      EXPECT_GT(buckets[index], 2u) << "the model must span several buckets";
      EXPECT_EQ(created[index].events, 0u)
          << "rank " << r << ": " << kSteadySteps << " steady steps created "
          << created[index].events << " events";
      EXPECT_EQ(created[index].streams, 0u)
          << "rank " << r << ": " << kSteadySteps << " steady steps created "
          << created[index].streams << " streams";
      EXPECT_EQ(allocations[index], 0u)
          << "rank " << r << ": " << kSteadySteps << " steady steps allocated "
          << allocations[index] << " times from DataParallel's memory resource";
    }
  }
}

}  // namespace
