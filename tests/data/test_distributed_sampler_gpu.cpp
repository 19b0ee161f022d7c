// DistributedSampler on a GPU: Thrust's permutation and gather equal the host's bit for bit, the
// sort's temporaries come from the sampler's resource, and the work runs on the stream's device
// whatever the calling thread has current (Note [Sampler launches]). Skipped without a GPU.

#include <cohort/core/error.hpp>
#include <cohort/data/distributed_sampler.hpp>
#include <cohort/memory/buffer.hpp>
#include <cohort/memory/statistics_adaptor.hpp>

#include <gtest/gtest.h>

#if COHORT_WITH_CUDA
#include <cohort/memory/detail/stream_copy.hpp>
#include <cohort/memory/device_pool.hpp>

#include <cuda_runtime_api.h>
#endif

#include <cstdint>
#include <thread>
#include <vector>

namespace {

class SamplerGpu : public ::testing::Test {
 protected:
  void SetUp() override {
#if COHORT_WITH_CUDA
    if (cohort::cuda_device_count() == 0) {
      GTEST_SKIP() << "no GPU: " << cohort::cuda_unavailable_reason();
    }
#else
    GTEST_SKIP() << "this build has no CUDA";
#endif
  }
};

#if COHORT_WITH_CUDA
void check_cuda(cudaError_t status) {
  ASSERT_EQ(status, cudaSuccess) << cudaGetErrorString(status);
}

TEST_F(SamplerGpu, PermutationEqualsTheHostOneBitForBit) {
  const cohort::Stream stream = cohort::Stream::create(cohort::Device::cuda(0));
  cohort::DevicePoolOptions pool_options;
  auto counted =
      std::make_shared<cohort::StatisticsAdaptor>(cohort::make_device_pool_resource(pool_options));
  for (const std::uint64_t n : {1u, 7u, 1000u, 100003u, 1u << 20}) {
    for (const auto policy : {cohort::LastBatch::drop, cohort::LastBatch::pad}) {
      cohort::SamplerOptions options;
      options.dataset_size = n;
      options.batch_per_rank = n < 8 ? 1 : 3;
      options.world_size = n < 8 ? 1 : 5;
      options.seed = n;
      options.last_batch = policy;
      options.resource = counted;
      cohort::DistributedSampler device(options, stream);
      cohort::SamplerOptions host_options = options;
      host_options.resource = nullptr;  // the device pool cannot serve the host
      cohort::DistributedSampler host(host_options, cohort::Stream::create(cohort::Device::host()));
      for (std::uint64_t epoch = 0; epoch < 3; ++epoch) {
        device.seek({epoch, 0});
        host.seek({epoch, 0});
        ASSERT_EQ(device.download_permutation(), host.download_permutation())
            << n << " samples, epoch " << epoch << ", " << cohort::to_string(policy);
      }
    }
  }
  // The keys and Thrust's temporaries came from the resource and went back to it.
  stream.synchronize();
  EXPECT_GT(counted->statistics().allocations.total, 2 * 5 * 3u);
  EXPECT_EQ(counted->statistics().allocations.current, 0u);
}

/// Gathers one batch of `row`-byte rows on `device` from the calling thread and checks it
/// against the host's indices.
void gather_and_check(cohort::Device device, std::size_t row) {
  const cohort::Stream stream = cohort::Stream::create(device);
  constexpr std::uint64_t kSamples = 1000;
  cohort::SamplerOptions options;
  options.dataset_size = kSamples;
  options.batch_per_rank = 32;
  options.rank = 1;
  options.world_size = 2;
  cohort::DistributedSampler sampler(options, stream);
  std::vector<std::uint8_t> table(kSamples * row);
  for (std::size_t i = 0; i < table.size(); ++i) table[i] = static_cast<std::uint8_t>(i * 7 + 3);
  cohort::DevicePoolOptions pool_options;
  pool_options.device = device.index();
  const auto pool = cohort::make_device_pool_resource(pool_options);
  cohort::Buffer table_device(pool, table.size(), stream);
  cohort::Buffer rows_device(pool, 32 * row, stream);
  // In the sampler stream's order: it is non-blocking, and a plain cudaMemcpy on the legacy
  // stream could still be on its way when the gather reads the table.
  cohort::detail::write_now(table_device.data(), table.data(), table.size(), stream);
  sampler.seek({2, 5});
  const cohort::SampledBatch batch = sampler.next_batch();
  sampler.gather(
      batch,
      cohort::TensorView::of(static_cast<std::uint8_t*>(table_device.data()), table.size(), device),
      row,
      cohort::TensorView::of(static_cast<std::uint8_t*>(rows_device.data()), 32 * row, device));
  std::vector<std::uint8_t> rows(32 * row);
  cohort::detail::read_after(rows.data(), rows_device.data(), rows.size(), stream);
  const std::vector<std::int64_t> indices = sampler.host_indices(batch.position);
  for (std::size_t j = 0; j < 32; ++j) {
    for (std::size_t c = 0; c < row; ++c) {
      ASSERT_EQ(rows[j * row + c], table[static_cast<std::size_t>(indices[j]) * row + c]) << j;
    }
  }
}

TEST_F(SamplerGpu, GathersTheSameRowsAsTheHost) {
  for (const std::size_t row : {1u, 3u, 8u}) {  // byte, word and double-word copies
    SCOPED_TRACE(row);
    gather_and_check(cohort::Device::cuda(0), row);
  }
}

// A thread that never chose a device: the sampler's Thrust calls run on the stream's device, and
// the thread's device as cudaGetDevice shows it is what it was (Note [Restoring an unbound
// thread]).
TEST_F(SamplerGpu, WorksFromAThreadThatBoundNoDevice) {
  int before = -1;
  int after = -1;
  std::thread fresh([&] {
    check_cuda(cudaGetDevice(&before));
    gather_and_check(cohort::Device::cuda(0), 8);
    check_cuda(cudaGetDevice(&after));
  });
  fresh.join();
  EXPECT_EQ(before, 0);
  EXPECT_EQ(after, before);
}

// Thrust and CUB launch on the current device: with another GPU current, the sampler must still
// permute and gather on its stream's.
TEST_F(SamplerGpu, RunsOnItsStreamsDeviceWhateverIsCurrent) {
  const int gpus = cohort::cuda_device_count();
  if (gpus < 2) {
    GTEST_SKIP() << "two GPUs needed (one current, the sampler's stream on the other); " << gpus
                 << " visible";
  }
  check_cuda(cudaSetDevice(0));
  gather_and_check(cohort::Device::cuda(1), 8);
  int current = -1;
  check_cuda(cudaGetDevice(&current));
  EXPECT_EQ(current, 0) << "the sampler left another device current";
}
#else
TEST_F(SamplerGpu, PermutationEqualsTheHostOneBitForBit) {}
#endif

}  // namespace
