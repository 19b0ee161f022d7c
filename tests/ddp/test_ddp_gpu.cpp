// DataParallel on GPUs: NCCL through run_local on every GPU found, arenas in device memory. Shows
// that the CUDA pieces (device arenas, events, the wire-cast kernel, NCCL's in-place
// reduce-scatter) agree with the host results, that typed views and arenas in the program's own
// device memory work there, and that COHORT_DEBUG_STREAMS catches a gradient written on a stream
// the compute stream does not wait for. Skipped without a GPU.
#include "mlp_model.hpp"
#include "support/test_helpers.hpp"

#include <cohort/comm/world.hpp>
#include <cohort/ddp/data_parallel.hpp>

#if COHORT_WITH_CUDA
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

void copy(void* to, const void* from, std::size_t bytes, cudaMemcpyKind kind) {
  ASSERT_EQ(cudaMemcpy(to, from, bytes, kind), cudaSuccess);
}

std::vector<float> download(const cohort::TensorView& view) {
  std::vector<float> host(view.count());
  copy(host.data(), view.data(), view.bytes(), cudaMemcpyDeviceToHost);
  return host;
}

/// A synchronous upload: cudaMemcpy from pageable memory may return before the copy lands, and
/// DataParallel's streams are non-blocking (not ordered after the legacy default stream).
void upload(const cohort::TensorView& view, const std::vector<float>& host) {
  copy(view.data(), host.data(), view.bytes(), cudaMemcpyHostToDevice);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

/// An upload queued on `stream` and not waited for: what follows on the device is ordered after
/// it only through the stream (and the events DataParallel records on it). `host` must outlive
/// the copy.
void upload_on(const cohort::Stream& stream, const cohort::TensorView& view,
               const std::vector<float>& host) {
  ASSERT_EQ(cudaMemcpyAsync(view.data(), host.data(), view.bytes(), cudaMemcpyHostToDevice,
                            static_cast<cudaStream_t>(stream.native_handle())),
            cudaSuccess);
}

constexpr std::size_t kBatch = 840;
constexpr int kSteps = 4;
constexpr float kLr = 0.2f;

/// Trains the MLP for kSteps, gradients queued on the compute stream and SGD on the host, checks
/// every parameter against one rank with the whole batch, and returns the parameter arena.
std::vector<float> train_and_check(cohort::DataParallel& dp, const cohort::test::Mlp& mlp) {
  const auto n = static_cast<std::size_t>(dp.world().size());
  const auto r = static_cast<std::size_t>(dp.world().rank());
  const std::size_t begin = r * kBatch / n;
  const std::size_t end = (r + 1) * kBatch / n;
  for (int step = 0; step < kSteps; ++step) {
    dp.compute_stream().synchronize();
    const auto w1 = download(dp.param(mlp.w1));
    const auto b1 = download(dp.param(mlp.b1));
    const auto w2 = download(dp.param(mlp.w2));
    const auto b2 = download(dp.param(mlp.b2));
    const auto g =
        cohort::test::mlp_gradients(w1.data(), b1.data(), w2.data(), b2.data(), begin, end);
    // Queued on the compute stream, never waited for by the host: only grad_ready's event
    // keeps each bucket's all-reduce after the gradients it reduces.
    const cohort::Stream& compute = dp.compute_stream();
    upload_on(compute, dp.grad(mlp.b2), g.b2);
    dp.grad_ready(mlp.b2);
    upload_on(compute, dp.grad(mlp.w2), g.w2);
    dp.grad_ready(mlp.w2);
    upload_on(compute, dp.grad(mlp.b1), g.b1);
    dp.grad_ready(mlp.b1);
    upload_on(compute, dp.grad(mlp.w1), g.w1);
    dp.grad_ready(mlp.w1);
    dp.sync_grads();
    dp.compute_stream().synchronize();
    auto params = download(dp.param_arena());
    const auto grads = download(dp.grad_arena());
    cohort::test::sgd(params.data(), grads.data(), params.size(), kLr);
    upload(dp.param_arena(), params);
  }
  EXPECT_EQ(dp.last_step_stats().collectives, dp.plan().buckets.size());
  // Every parameter against the reference.
  const auto want = cohort::test::mlp_reference(kBatch, kSteps, kLr);
  auto expect_close = [&](const cohort::TensorView& view, const std::vector<float>& reference,
                          const char* what) {
    const auto got = download(view);
    ASSERT_EQ(got.size(), reference.size()) << what;
    for (std::size_t i = 0; i < got.size(); ++i) {
      ASSERT_NEAR(got[i], reference[i], 2e-6f * (1.0f + std::abs(reference[i])))
          << what << "[" << i << "] on rank " << r;
    }
  };
  expect_close(dp.param(mlp.w1), want.w1, "fc1.weight");
  expect_close(dp.param(mlp.b1), want.b1, "fc1.bias");
  expect_close(dp.param(mlp.w2), want.w2, "fc2.weight");
  expect_close(dp.param(mlp.b2), want.b2, "fc2.bias");
  return download(dp.param_arena());
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
    ASSERT_EQ(cudaLaunchHostFunc(
                  stream,
                  [](void*) { std::this_thread::sleep_for(std::chrono::milliseconds(300)); },
                  nullptr),
              cudaSuccess);
    ASSERT_EQ(cudaMemsetAsync(view.data(), byte, view.bytes(), stream), cudaSuccess);
  }
};
#endif

// Registered in every build, so that a host-only build counts them (SetUp says why they skip).
TEST_F(DataParallelGpu, SgdMatchesOneRankWithTheWholeBatch) {
#if COHORT_WITH_CUDA
  const int n = cohort::cuda_device_count();
  std::vector<std::vector<float>> arenas(static_cast<std::size_t>(n));
  cohort::run_local(
      n,
      [&](cohort::World& world) {
        cohort::ParamRegistry registry;
        const cohort::test::Mlp mlp(registry);
        cohort::DataParallel dp(
            world, registry,
            {.bucket_bytes = 512, .first_bucket_bytes = 256, .init = [&](cohort::DataParallel& d) {
               const auto p = cohort::test::mlp_initial(static_cast<float>(world.rank()));
               upload(d.param(mlp.w1), p.w1);
               upload(d.param(mlp.b1), p.b1);
               upload(d.param(mlp.w2), p.w2);
               upload(d.param(mlp.b2), p.b2);
             }});
        ASSERT_TRUE(dp.param_arena().device().is_cuda());
        arenas[static_cast<std::size_t>(world.rank())] = train_and_check(dp, mlp);
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
  const int n = cohort::cuda_device_count();
  for (const bool scatter : {false, true}) {
    cohort::run_local(
        n,
        [&](cohort::World& world) {
          cohort::ParamRegistry registry;
          const auto a = registry.add("a", {3000});
          const auto b = registry.add("b", {1001});
          cohort::DataParallelOptions options;
          options.bucket_bytes = 4096;
          options.compression = cohort::Compression::bf16;
          if (scatter) {
            options.gradient_sync = cohort::GradientSync::reduce_scatter;
          }
          cohort::DataParallel dp(world, registry, options);
          // Rank r holds (r + 1) * x_i for x_i in [-1, 1]: the mean is (n + 1) / 2 * x_i.
          std::mt19937 random(5);
          std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
          std::vector<float> x(dp.grad_arena().count());
          for (float& v : x) v = uniform(random);
          std::vector<float> mine(x);
          for (float& v : mine) v *= static_cast<float>(world.rank() + 1);
          upload(dp.grad_arena(), mine);
          dp.grad_ready(a);
          dp.grad_ready(b);
          dp.sync_grads();
          dp.compute_stream().synchronize();
          const auto got = download(scatter ? dp.grad_shard() : dp.grad_arena());
          const std::size_t offset = scatter ? dp.shard_offset() : 0;
          const double u = std::ldexp(1.0, -8);
          double worst = 0.0;
          for (std::size_t k = 0; k < got.size(); ++k) {
            const double exact = (n + 1) / 2.0 * static_cast<double>(x[offset + k]);
            const double error = std::abs(static_cast<double>(got[k]) - exact);
            ASSERT_LE(error, (n + 2) * u * std::abs(exact) + 1e-30) << "element " << offset + k;
            if (exact != 0.0) worst = std::max(worst, error / std::abs(exact));
          }
          // The wire really was 16-bit: bf16 rounding is visible (even on one rank, where the
          // cast to the wire and back is all that happens), and half the bytes went out.
          EXPECT_GT(worst, u / 64) << "rank " << world.rank();
          EXPECT_EQ(dp.last_step_stats().bytes, dp.grad_arena().count() * 2);
        },
        gpu_options());
  }
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
          std::ranges::copy(values, initial.begin() + static_cast<std::ptrdiff_t>(
                                                          layout.slots[h.index].offset));
        };
        place(mlp.w1, p.w1);
        place(mlp.b1, p.b1);
        place(mlp.w2, p.w2);
        place(mlp.b2, p.b2);
        upload(own(params), initial);
        upload(own(grads), initial);
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
          arenas[static_cast<std::size_t>(world.rank())] = train_and_check(dp, mlp);
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
            error, "COHORT_DEBUG_STREAMS: grad_ready('layer.a'): the gradient changed after it "
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
        for (const float x : download(dp.grad(a))) ASSERT_NEAR(x, a0, 1e-6f * a0);
        for (const float x : download(dp.grad(b))) ASSERT_NEAR(x, b0, 1e-6f * b0);
      },
      gpu_options());
#endif
}

}  // namespace
