// DistributedSampler on a GPU: Thrust's permutation and gather equal the host's bit for bit, and
// the sort's temporaries come from the sampler's resource. Skipped without a GPU.

#include <cohort/core/error.hpp>
#include <cohort/data/distributed_sampler.hpp>
#include <cohort/memory/statistics_adaptor.hpp>

#include <gtest/gtest.h>

#if COHORT_WITH_CUDA
#include <cohort/memory/device_pool.hpp>

#include <cuda_runtime_api.h>
#endif

#include <cstdint>
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
void check_cuda(cudaError_t status) { ASSERT_EQ(status, cudaSuccess) << cudaGetErrorString(status); }

TEST_F(SamplerGpu, PermutationEqualsTheHostOneBitForBit) {
  const cohort::Stream stream = cohort::Stream::create(cohort::Device::cuda(0));
  cohort::DevicePoolOptions pool_options;
  auto counted = std::make_shared<cohort::StatisticsAdaptor>(
      cohort::make_device_pool_resource(pool_options));
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

TEST_F(SamplerGpu, GathersTheSameRowsAsTheHost) {
  const cohort::Stream stream = cohort::Stream::create(cohort::Device::cuda(0));
  constexpr std::uint64_t kSamples = 1000;
  for (const std::size_t row : {1u, 3u, 8u}) {  // byte, word and double-word copies
    cohort::SamplerOptions options;
    options.dataset_size = kSamples;
    options.batch_per_rank = 32;
    options.rank = 1;
    options.world_size = 2;
    cohort::DistributedSampler sampler(options, stream);
    std::vector<std::uint8_t> table(kSamples * row);
    for (std::size_t i = 0; i < table.size(); ++i) table[i] = static_cast<std::uint8_t>(i * 7 + 3);
    void* table_device = nullptr;
    void* rows_device = nullptr;
    check_cuda(cudaMalloc(&table_device, table.size()));
    check_cuda(cudaMalloc(&rows_device, 32 * row));
    check_cuda(cudaMemcpy(table_device, table.data(), table.size(), cudaMemcpyHostToDevice));
    sampler.seek({2, 5});
    const cohort::SampledBatch batch = sampler.next_batch();
    sampler.gather(batch, cohort::TensorView::of(static_cast<std::uint8_t*>(table_device), table.size(), cohort::Device::cuda(0)),
                   row, cohort::TensorView::of(static_cast<std::uint8_t*>(rows_device), 32 * row, cohort::Device::cuda(0)));
    stream.synchronize();
    std::vector<std::uint8_t> rows(32 * row);
    check_cuda(cudaMemcpy(rows.data(), rows_device, rows.size(), cudaMemcpyDeviceToHost));
    const std::vector<std::int64_t> indices = sampler.host_indices(batch.position);
    for (std::size_t j = 0; j < 32; ++j) {
      for (std::size_t c = 0; c < row; ++c) {
        ASSERT_EQ(rows[j * row + c], table[static_cast<std::size_t>(indices[j]) * row + c]) << j;
      }
    }
    check_cuda(cudaFree(table_device));
    check_cuda(cudaFree(rows_device));
  }
}
#else
TEST_F(SamplerGpu, PermutationEqualsTheHostOneBitForBit) {}
#endif

}  // namespace
