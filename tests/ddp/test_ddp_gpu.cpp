// DataParallel on GPUs: NCCL through run_local on every GPU found, arenas in device memory. Shows
// that the CUDA pieces (device arenas, events, the wire-cast kernel, NCCL's in-place
// reduce-scatter) agree with the host results. Skipped without a GPU.
#include "mlp_model.hpp"

#include <cohort/comm/world.hpp>
#include <cohort/ddp/data_parallel.hpp>

#if COHORT_WITH_CUDA
#include <cuda_runtime.h>
#endif

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
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
#endif

// Registered in every build, so that a host-only build counts them (SetUp says why they skip).
TEST_F(DataParallelGpu, SgdMatchesOneRankWithTheWholeBatch) {
#if COHORT_WITH_CUDA
  const int n = cohort::cuda_device_count();
  constexpr std::size_t kBatch = 840;
  constexpr int kSteps = 4;
  constexpr float kLr = 0.2f;
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
        const auto r = static_cast<std::size_t>(world.rank());
        const std::size_t begin = r * kBatch / static_cast<std::size_t>(n);
        const std::size_t end = (r + 1) * kBatch / static_cast<std::size_t>(n);
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
        arenas[r] = download(dp.param_arena());
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

}  // namespace
