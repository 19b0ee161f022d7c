// DataParallel on GPUs: NCCL through run_local on every GPU found, arenas in device memory, and
// two processes sharing the first GPU (ddp_gpu_worker), where averages show. Shows that the CUDA
// pieces (device arenas, events, the wire-cast kernel, NCCL's in-place reduce-scatter, the ZeRO-1
// step at odd offsets) agree with the host results, that a steady step creates no event and
// allocates nothing, that typed views and arenas in the program's own device memory work there,
// and that COHORT_DEBUG_STREAMS catches a gradient written on a stream the compute stream does
// not wait for. Skipped without a GPU.
#include "mlp_model.hpp"
#include "support/gpu_ranks.hpp"
#include "support/test_helpers.hpp"

#include <cohort/comm/world.hpp>
#include <cohort/ddp/data_parallel.hpp>

#if COHORT_WITH_CUDA
#include "ddp_gpu_checks.hpp"

#include <cuda_runtime.h>
#endif

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

namespace {

class DataParallelGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cohort::cuda_device_count() == 0) {
      GTEST_SKIP() << "no GPU: " << cohort::cuda_unavailable_reason();
    }
  }
};

#if COHORT_WITH_CUDA
cohort::WorldOptions gpu_options() {
  cohort::WorldOptions options;
  options.backend = cohort::BackendChoice::nccl;
  options.timeout = std::chrono::seconds(120);
  return options;
}

/// A non-blocking CUDA stream for a test, destroyed with the object.
struct SideStream {
  cudaStream_t stream = nullptr;
  SideStream() {
    EXPECT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  }
  ~SideStream() { cudaStreamDestroy(stream); }
  SideStream(const SideStream&) = delete;
  SideStream& operator=(const SideStream&) = delete;

  /// Queues a host function that sleeps, then a memset of `view` to `byte`: the write lands well
  /// after this call returns, so a check that misses it cannot pass by luck of timing.
  void late_write(const cohort::TensorView& view, int byte) const {
    ASSERT_EQ(
        cudaLaunchHostFunc(
            stream, [](void*) { std::this_thread::sleep_for(std::chrono::milliseconds(300)); },
            nullptr),
        cudaSuccess);
    ASSERT_EQ(cudaMemsetAsync(view.data(), byte, view.bytes(), stream), cudaSuccess);
  }
};
#endif

// Registered in every build, so that a host-only build counts them (SetUp says why they skip).
// Two ranks as processes on the first GPU (each its own NCCL host, sockets over lo): with one
// rank an average is its input, so this is the test that sees them on a machine with one GPU.
TEST_F(DataParallelGpu, TwoProcessesSharingAGpuPassEveryCheck) {
  const auto ranks = cohort_test::run_gpu_ranks(2, "tests/ddp/ddp_gpu_worker", {}, {}, "ddp-gpu");
  const std::string failed = cohort_test::ranks_failed(ranks);
  EXPECT_TRUE(failed.empty()) << failed;
}

TEST_F(DataParallelGpu, SgdMatchesOneRankWithTheWholeBatch) {
#if COHORT_WITH_CUDA
  const int n = cohort::cuda_device_count();
  std::vector<std::vector<float>> arenas(static_cast<std::size_t>(n));
  cohort::run_local(
      n,
      [&](cohort::World& world) {
        const auto r = static_cast<std::size_t>(world.rank());
        EXPECT_EQ(cohort::test::check_sgd_mlp(world, &arenas[r]), "");
      },
      gpu_options());
  for (std::size_t r = 1; r < arenas.size(); ++r) {
    EXPECT_EQ(std::memcmp(arenas[r].data(), arenas[0].data(), arenas[0].size() * sizeof(float)), 0)
        << "rank " << r;
  }
#endif
}

TEST_F(DataParallelGpu, Bf16CompressionAndReduceScatterMatchTheHostBound) {
#if COHORT_WITH_CUDA
  for (const bool scatter : {false, true}) {
    cohort::run_local(
        cohort::cuda_device_count(),
        [&](cohort::World& world) { EXPECT_EQ(cohort::test::check_bf16_wire(world, scatter), ""); },
        gpu_options());
  }
#endif
}

TEST_F(DataParallelGpu, ZeroOneWithShardsAtOddOffsetsMatchesTheHostAdamW) {
#if COHORT_WITH_CUDA
  cohort::run_local(
      cohort::cuda_device_count(),
      [&](cohort::World& world) { EXPECT_EQ(cohort::test::check_zero1_odd_shards(world), ""); },
      gpu_options());
#endif
}

// Typed views of device memory, and arenas in the program's own cudaMalloc'd memory: training in
// place gives the reference result on every GPU (Note [Your own arenas]).
TEST_F(DataParallelGpu, TypedViewsAndOwnDeviceArenasTrainInPlace) {
#if COHORT_WITH_CUDA
  const int n = cohort::cuda_device_count();
  std::vector<std::vector<float>> arenas(static_cast<std::size_t>(n));
  cohort::run_local(
      n,
      [&](cohort::World& world) {
        cohort::ParamRegistry registry;
        const cohort::test::Mlp mlp(registry);
        const cohort::BucketPlan layout = cohort::arena_layout(registry, world.size());
        float* params = nullptr;
        float* grads = nullptr;
        ASSERT_EQ(cudaMalloc(&params, layout.arena_count * sizeof(float)), cudaSuccess);
        ASSERT_EQ(cudaMalloc(&grads, layout.arena_count * sizeof(float)), cudaSuccess);
        const auto own = [&](float* data) {
          return cohort::TensorView::of(data, layout.arena_count, world.device());
        };
        // The program's initial values where the layout says, and garbage in the gaps.
        std::vector<float> initial(layout.arena_count, 7.0f);
        const auto p = cohort::test::mlp_initial(static_cast<float>(world.rank()));
        const auto place = [&](cohort::ParamHandle h, const std::vector<float>& values) {
          std::ranges::copy(
              values, initial.begin() + static_cast<std::ptrdiff_t>(layout.slots[h.index].offset));
        };
        place(mlp.w1, p.w1);
        place(mlp.b1, p.b1);
        place(mlp.w2, p.w2);
        place(mlp.b2, p.b2);
        const cohort::Stream uploads = cohort::Stream::create(world.device());
        cohort::test::upload_on(uploads, own(params), initial.data());
        cohort::test::upload_on(uploads, own(grads), initial.data());
        uploads.synchronize();
        {
          cohort::DataParallel dp(world, registry,
                                  {.bucket_bytes = 512,
                                   .first_bucket_bytes = 256,
                                   .param_memory = own(params),
                                   .grad_memory = own(grads)});
          EXPECT_EQ(dp.param_arena().data(), params);
          EXPECT_EQ(dp.grad_arena().data(), grads);
          const cohort::DeviceSpan<float> w1 = dp.param(mlp.w1).as<float>();
          EXPECT_EQ(w1.data(), params + layout.slots[mlp.w1.index].offset);
          EXPECT_EQ(w1.size(), cohort::test::Mlp::kHidden * cohort::test::Mlp::kIn);
          EXPECT_THROW((void)dp.grad(mlp.w1).as<double>(), cohort::InvalidArgument);
          EXPECT_THROW((void)dp.param(mlp.w1).span<float>(), cohort::InvalidArgument);
          EXPECT_EQ(cohort::test::train_mlp_and_check(
                        dp, mlp, &arenas[static_cast<std::size_t>(world.rank())], nullptr),
                    "");
        }
        EXPECT_EQ(cudaFree(params), cudaSuccess);
        EXPECT_EQ(cudaFree(grads), cudaSuccess);
      },
      gpu_options());
  for (std::size_t r = 1; r < arenas.size(); ++r) {
    EXPECT_EQ(arenas[r], arenas[0]) << "rank " << r;
  }
#endif
}

// Note [Debugging streams]: under COHORT_DEBUG_STREAMS a gradient still being written on a side
// stream when grad_ready is called is reported naming the parameter; passing that stream to
// grad_ready orders the mark after the write, and is accepted.
TEST_F(DataParallelGpu, DebugStreamsReportsAGradientWrittenOnAnotherStream) {
#if COHORT_WITH_CUDA
  const cohort_test::ScopedEnv debug("COHORT_DEBUG_STREAMS", "1");
  const int n = cohort::cuda_device_count();
  cohort::run_local(
      n,
      [&](cohort::World& world) {
        cohort::ParamRegistry registry;
        const auto a = registry.add("layer.a", {4096});
        const auto b = registry.add("layer.b", {1000});
        cohort::DataParallel dp(world, registry, {.bucket_bytes = 4096});
        const SideStream side;
        side.late_write(dp.grad(a), 0x3f);
        const std::string error =
            cohort_test::message_of<cohort::InvalidArgument>([&] { dp.grad_ready(a); });
        EXPECT_TRUE(cohort_test::contains(
            error,
            "COHORT_DEBUG_STREAMS: grad_ready('layer.a'): the gradient changed after it "
            "was marked ready"));
        ASSERT_EQ(cudaStreamSynchronize(side.stream), cudaSuccess);
        EXPECT_NO_THROW(dp.grad_ready(a));  // written and waited for: nothing changes any more
        side.late_write(dp.grad(b), 0x40);
        EXPECT_NO_THROW(dp.grad_ready(b, cohort::Stream::wrap_cuda(world.device(), side.stream)));
        dp.sync_grads();
        dp.compute_stream().synchronize();
        float a0 = 0.0f;
        float b0 = 0.0f;
        std::memset(&a0, 0x3f, sizeof(a0));
        std::memset(&b0, 0x40, sizeof(b0));
        for (const float x : cohort::test::download(dp.compute_stream(), dp.grad(a))) {
          ASSERT_NEAR(x, a0, 1e-6f * a0);
        }
        for (const float x : cohort::test::download(dp.compute_stream(), dp.grad(b))) {
          ASSERT_NEAR(x, b0, 1e-6f * b0);
        }
      },
      gpu_options());
#endif
}

}  // namespace
