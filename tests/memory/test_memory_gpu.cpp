// The resource suite over the CUDA resources, and managed memory end to end. Every test skips
// without a GPU.

#include "resource_suite.hpp"

#include <cohort/memory/device_pool.hpp>
#include <cohort/memory/host_pool.hpp>
#include <cohort/memory/managed.hpp>
#include <cohort/memory/pinned_host.hpp>

#if COHORT_WITH_CUDA
#include "memory_test_kernels.hpp"

#include <cuda_runtime_api.h>
#endif

namespace cohort_test {
namespace {

struct CudaCase {
  static constexpr bool kNeedsGpu = true;
  static cohort::Stream make_stream() { return cohort::Stream::create(cohort::Device::cuda(0)); }
};

struct DevicePoolCase : CudaCase {
  static constexpr bool kHostAccessible = false;
  static constexpr bool kDeviceAccessible = true;
  static constexpr int kOpsPerThread = 10'000;
  static std::shared_ptr<cohort::MemoryResource> make() {
    return cohort::make_device_pool_resource({.device = 0});
  }
  static cohort::Device device() { return cohort::Device::cuda(0); }
};

// cudaHostAlloc and cudaMallocManaged take tens of microseconds or more per call (pinning, page
// tables), so the 8-thread test does fewer operations on them.
struct PinnedHostCase : CudaCase {
  static constexpr bool kHostAccessible = true;
  static constexpr bool kDeviceAccessible = true;
  static constexpr int kOpsPerThread = 1'000;
  static std::shared_ptr<cohort::MemoryResource> make() {
    return cohort::make_pinned_host_resource();
  }
  static cohort::Device device() { return cohort::Device::host(); }
};

struct PinnedHostPoolCase : PinnedHostCase {
  static constexpr int kOpsPerThread = 10'000;
  static std::shared_ptr<cohort::MemoryResource> make() {
    return std::make_shared<cohort::HostPoolResource>(
        cohort::HostPoolOptions{.upstream = cohort::make_pinned_host_resource()});
  }
};

struct ManagedCase : CudaCase {
  static constexpr bool kHostAccessible = true;
  static constexpr bool kDeviceAccessible = true;
  static constexpr int kOpsPerThread = 1'000;
  static std::shared_ptr<cohort::MemoryResource> make() {
    return cohort::make_managed_resource({.device = 0});
  }
  static cohort::Device device() { return cohort::Device::cuda(0); }
};

using CudaCases = ::testing::Types<DevicePoolCase, PinnedHostCase, PinnedHostPoolCase, ManagedCase>;
INSTANTIATE_TYPED_TEST_SUITE_P(Cuda, ResourceTest, CudaCases);

class ManagedMemoryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cohort::cuda_device_count() == 0) {
      GTEST_SKIP() << "no GPU: " << cohort::cuda_unavailable_reason();
    }
  }
};

#if COHORT_WITH_CUDA

TEST_F(ManagedMemoryTest, TouchedOnTheHostPrefetchedAndReadByAKernel) {
  constexpr std::size_t kCount = (std::size_t{1} << 20) + 3;  // odd, not a whole page
  const cohort::Device gpu = cohort::Device::cuda(0);
  const cohort::Stream stream = cohort::Stream::create(gpu);
  cohort::Buffer input(cohort::make_managed_resource({.device = 0}), kCount * sizeof(float),
                       cohort::MemoryCategory::optimizer_state);
  const std::span<float> host_input = input.view<float>();
  for (std::size_t i = 0; i < kCount; ++i) {
    host_input[i] = static_cast<float>(i % 4096) * 0.5f;
  }
  cohort::managed::set_preferred_location(input, gpu);
  cohort::managed::set_accessed_by(input, cohort::Device::host());
  cohort::managed::prefetch(input, gpu, stream);

  cohort::Buffer output(cohort::make_device_pool_resource({.device = 0}), kCount * sizeof(float),
                        stream);
  launch_affine(input.device_view<const float>(), output.device_view<float>(), 2.0f, 1.0f, stream);
  cohort::Buffer result(cohort::make_pinned_host_resource(), kCount * sizeof(float));
  ASSERT_EQ(
      cudaMemcpyAsync(result.data(), output.data(), output.size_bytes(), cudaMemcpyDeviceToHost,
                      static_cast<cudaStream_t>(stream.native_handle())),
      cudaSuccess);
  cohort::managed::prefetch(input, cohort::Device::host(), stream);
  stream.synchronize();

  const std::span<const float> values = std::as_const(result).view<float>();
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < kCount; ++i) {
    if (values[i] != static_cast<float>(i % 4096) + 1.0f) {
      ++wrong;
    }
  }
  EXPECT_EQ(wrong, 0u);
  EXPECT_EQ(host_input[kCount - 1], static_cast<float>((kCount - 1) % 4096) * 0.5f);
}

TEST_F(ManagedMemoryTest, RefusesMoreThanTheDeviceHasFree) {
  std::size_t free_bytes = 0;
  std::size_t total_bytes = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_bytes, &total_bytes), cudaSuccess);
  const auto managed = cohort::make_managed_resource({.device = 0});
  const std::size_t request = free_bytes + (std::size_t{1} << 30);
  const std::string message =
      thrown_message<cohort::OutOfMemory>([&] { (void)managed->allocate(request); });
  EXPECT_NE(message.find(std::to_string(request) + " bytes"), std::string::npos) << message;
  EXPECT_NE(message.find("allow_oversubscription"), std::string::npos) << message;
  EXPECT_EQ(managed->bytes_in_use(), 0u);
}

TEST_F(ManagedMemoryTest, HintsNeedManagedMemoryAndACudaStream) {
  const cohort::Stream host_stream = cohort::Stream::create(cohort::Device::host());
  const cohort::Stream gpu_stream = cohort::Stream::create(cohort::Device::cuda(0));
  cohort::Buffer device_memory(cohort::make_device_pool_resource({.device = 0}), 4096);
  cohort::Buffer managed_memory(cohort::make_managed_resource({.device = 0}), 4096);
  EXPECT_THROW(cohort::managed::prefetch(device_memory, cohort::Device::cuda(0), gpu_stream),
               cohort::InvalidArgument);
  EXPECT_THROW(cohort::managed::set_read_mostly(device_memory), cohort::InvalidArgument);
  EXPECT_THROW(cohort::managed::prefetch(managed_memory, cohort::Device::cuda(0), host_stream),
               cohort::InvalidArgument);
  EXPECT_THROW(cohort::managed::prefetch(
                   managed_memory, cohort::Device::cuda(cohort::cuda_device_count()), gpu_stream),
               cohort::InvalidArgument);
  cohort::managed::set_read_mostly(managed_memory);
  cohort::managed::set_read_mostly(managed_memory, false);
  cohort::managed::set_preferred_location(managed_memory, std::nullopt);
  cohort::managed::prefetch(cohort::Buffer(), cohort::Device::cuda(0), gpu_stream);  // empty: no-op
  gpu_stream.synchronize();
}

TEST_F(ManagedMemoryTest, DevicePoolReportsItsStateWhenFull) {
  std::size_t free_bytes = 0;
  std::size_t total_bytes = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_bytes, &total_bytes), cudaSuccess);
  const auto pool = cohort::make_device_pool_resource({.device = 0});
  const std::size_t request = 2 * total_bytes;
  const std::string message =
      thrown_message<cohort::OutOfMemory>([&] { (void)pool->allocate(request); });
  EXPECT_NE(message.find(std::to_string(request) + " bytes"), std::string::npos) << message;
  EXPECT_NE(message.find("free of"), std::string::npos) << message;
}

TEST_F(ManagedMemoryTest, DevicePoolKeepsFreedMemoryUntilReleased) {
  const auto pool = cohort::make_device_pool_resource({.device = 0});
  constexpr std::size_t kBytes = std::size_t{64} << 20;
  const cohort::Stream stream = cohort::Stream::create(cohort::Device::cuda(0));
  pool->deallocate(pool->allocate(kBytes, stream), kBytes, stream);
  stream.synchronize();
  EXPECT_GE(pool->release_unused(), kBytes);
  EXPECT_EQ(pool->release_unused(), 0u);
}

#endif  // COHORT_WITH_CUDA

}  // namespace
}  // namespace cohort_test
