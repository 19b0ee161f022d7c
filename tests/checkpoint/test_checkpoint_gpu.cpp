// Checkpoints of arenas in device memory: the asynchronous save copies them into pinned host memory
// on the Checkpointer's own CUDA stream while the next steps run (the optimizer's step waits for
// the copy), and the load all-gathers the replicated arrays with NCCL. A resumed run ends bitwise
// equal to the uninterrupted one. Skipped without a GPU.

#include "checkpoint/checkpoint_test_model.hpp"  // TemporaryFolder

#include <cohort/checkpoint/checkpoint.hpp>
#include <cohort/checkpoint/preemption.hpp>
#include <cohort/comm/world.hpp>
#include <cohort/ddp/data_parallel.hpp>
#include <cohort/optim/adamw.hpp>
#include <cohort/optim/data_parallel_target.hpp>

#if COHORT_WITH_CUDA
#include "support/cuda_copy.hpp"

#include <layers/math.hpp>

#include <cuda_runtime.h>
#endif

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <mutex>
#include <vector>

namespace {

#if COHORT_WITH_CUDA

constexpr int kSavedStep = 3;
constexpr int kSteps = 6;

void upload(const cohort::TensorView& view, const std::vector<float>& host) {
  ASSERT_EQ(cohort_test::copy_with_device_idle(view.data(), host.data(),
                                               host.size() * sizeof(float), cudaMemcpyHostToDevice),
            cudaSuccess);
}

std::vector<float> download(const cohort::DataParallel& dp) {
  dp.compute_stream().synchronize();
  std::vector<float> host(dp.plan().used_count);
  EXPECT_EQ(cohort_test::copy_with_device_idle(host.data(), dp.param_arena().data(),
                                               host.size() * sizeof(float), cudaMemcpyDeviceToHost),
            cudaSuccess);
  return host;
}

/// One rank's model on its GPU: three f32 parameters of awkward sizes and AdamW.
struct GpuRun {
  std::unique_ptr<cohort::DataParallel> dp;
  std::unique_ptr<cohort::AdamW> optimizer;

  GpuRun(cohort::World& world, const cohort::ParamRegistry& registry) {
    cohort::DataParallelOptions options;
    options.init = [](cohort::DataParallel& d) {
      std::vector<float> values(d.plan().used_count);
      for (std::size_t e = 0; e < values.size(); ++e)
        values[e] = std::sin(0.1f * static_cast<float>(e)) + 0.01f;
      upload(d.param_arena(), values);
    };
    dp = std::make_unique<cohort::DataParallel>(world, registry, options);
    optimizer =
        std::make_unique<cohort::AdamW>(cohort::target_of(*dp), cohort::AdamWOptions{.lr = 1e-2f});
  }

  /// One step with gradients that depend on (step, rank, element).
  void step(int step) {
    dp->compute_stream().synchronize();
    std::vector<float> grads(dp->plan().used_count);
    for (std::size_t e = 0; e < grads.size(); ++e) {
      grads[e] = 0.1f * std::sin(0.37f * static_cast<float>(step) + 0.011f * static_cast<float>(e) +
                                 0.5f * static_cast<float>(dp->world().rank()));
    }
    upload(dp->grad_arena(), grads);
    for (std::uint32_t i = 0; i < dp->registry().size(); ++i)
      dp->grad_ready(cohort::ParamHandle{i});
    dp->sync_grads();
    optimizer->step();
  }
};

#endif

TEST(CheckpointGpu, AsyncSaveThroughPinnedMemoryResumesBitwiseEqual) {
  if (cohort::cuda_device_count() == 0) {
    GTEST_SKIP() << "no GPU: " << cohort::cuda_unavailable_reason();
  }
#if COHORT_WITH_CUDA
  const int ranks = std::min(cohort::cuda_device_count(), 4);
  cohort::ParamRegistry registry;
  registry.add("layer.weight", {37, 5});
  registry.add("layer.bias", {300});
  registry.add("head.weight", {3, 3});
  cohort::WorldOptions world_options;
  world_options.backend = cohort::BackendChoice::nccl;
  world_options.timeout = std::chrono::seconds(120);
  for (const bool gather : {true, false}) {
    cohort_test::TemporaryFolder folder;
    std::mutex mutex;
    std::vector<std::vector<float>> uninterrupted(static_cast<std::size_t>(ranks));
    std::vector<std::vector<float>> resumed(static_cast<std::size_t>(ranks));
    cohort::run_local(
        ranks,
        [&](cohort::World& world) {
          const cohort::CheckpointOptions options{.directory = folder.path(),
                                                  .gather_replicated = gather};
          GpuRun original(world, registry);
          cohort::Checkpointer saver(*original.dp, original.optimizer.get(), options);
          for (int step = 0; step < kSavedStep; ++step) original.step(step);
          saver.save_async({kSavedStep, 0, 0, ""});
          for (int step = kSavedStep; step < kSteps; ++step)
            original.step(step);  // overlap the copy
          saver.wait();

          GpuRun again(world, registry);
          cohort::Checkpointer loader(*again.dp, again.optimizer.get(), options);
          ASSERT_TRUE(loader.load().has_value());
          EXPECT_EQ(again.optimizer->steps_taken(), kSavedStep);
          for (int step = kSavedStep; step < kSteps; ++step) again.step(step);
          const std::lock_guard lock(mutex);
          uninterrupted[static_cast<std::size_t>(world.rank())] = download(*original.dp);
          resumed[static_cast<std::size_t>(world.rank())] = download(*again.dp);
        },
        world_options);
    for (int rank = 0; rank < ranks; ++rank) {
      const auto r = static_cast<std::size_t>(rank);
      ASSERT_FALSE(uninterrupted[r].empty());
      EXPECT_EQ(0, std::memcmp(uninterrupted[r].data(), resumed[r].data(),
                               uninterrupted[r].size() * sizeof(float)))
          << "rank " << rank << ", gather_replicated " << gather;
    }
  }
#endif
}

// Note [Agreeing without waiting for the GPU]: with a 2 s kernel on the stream, agreed() returns
// long before it ends; a flag raised is agreed one call later than on the host, and the first
// call answers false.
TEST(CheckpointGpu, PreemptionIsAgreedWithoutWaitingForTheStep) {
  if (cohort::cuda_device_count() == 0) {
    GTEST_SKIP() << "no GPU: " << cohort::cuda_unavailable_reason();
  }
#if COHORT_WITH_CUDA
  cohort::WorldOptions world_options;
  world_options.backend = cohort::BackendChoice::nccl;
  world_options.timeout = std::chrono::seconds(60);
  cohort::run_local(
      1,
      [](cohort::World& world) {
        const cohort::Stream stream = cohort::Stream::create(world.device());
        layers::Math math(stream);
        cohort::clear_preemption();
        {
          cohort::PreemptionWatch watch(world, stream);
          EXPECT_FALSE(watch.agreed());  // call 0: nothing agreed before it
          math.simulate(std::chrono::seconds(2));
          const auto start = std::chrono::steady_clock::now();
          EXPECT_FALSE(
              watch.agreed());  // call 1: the answer of call 0, which came before the kernel
          const double took =
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
          EXPECT_LT(took, 0.5) << "agreed() waited for the 2 s kernel";
          EXPECT_FALSE(stream.ready()) << "the kernel ended before agreed() returned";
          cohort::request_preemption();
          EXPECT_FALSE(watch.agreed());  // call 2: the flags of call 1
          EXPECT_TRUE(watch.agreed());   // call 3: the flags of call 2
        }                                // waits for the all-reduce of call 3
        cohort::clear_preemption();
      },
      world_options);
#endif
}

}  // namespace
