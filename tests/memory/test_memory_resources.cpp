// The resource suite over the host resources, and what only host resources do.

#include "resource_suite.hpp"
#include "test_resources.hpp"

#include <cohort/memory/device_pool.hpp>
#include <cohort/memory/host_pool.hpp>
#include <cohort/memory/host_resource.hpp>
#include <cohort/memory/managed.hpp>
#include <cohort/memory/pinned_host.hpp>

#include <atomic>
#include <chrono>
#include <limits>
#include <thread>

namespace cohort_test {
namespace {

struct HostCase {
  static constexpr bool kNeedsGpu = false;
  static constexpr bool kHostAccessible = true;
  static constexpr bool kDeviceAccessible = false;
  static constexpr int kOpsPerThread = 10'000;
  static std::shared_ptr<cohort::MemoryResource> make() {
    return std::make_shared<cohort::HostResource>();
  }
  static cohort::Device device() { return cohort::Device::host(); }
  static cohort::Stream make_stream() { return cohort::Stream::create(cohort::Device::host()); }
};

struct HostPoolCase : HostCase {
  static std::shared_ptr<cohort::MemoryResource> make() {
    return std::make_shared<cohort::HostPoolResource>();
  }
};

/// A pool that bypasses most sizes and caches little: exercises the paths past its limits.
struct SmallHostPoolCase : HostCase {
  static std::shared_ptr<cohort::MemoryResource> make() {
    return std::make_shared<cohort::HostPoolResource>(cohort::HostPoolOptions{
        .upstream = nullptr, .max_block_bytes = 4096, .max_cached_bytes = 8192});
  }
};

using HostCases = ::testing::Types<HostCase, HostPoolCase, SmallHostPoolCase>;
INSTANTIATE_TYPED_TEST_SUITE_P(Host, ResourceTest, HostCases);

TEST(HostResource, DeallocateOnAStreamWaitsForItsWork) {
  auto resource = std::make_shared<cohort::HostResource>();
  const cohort::Stream stream = cohort::Stream::create(cohort::Device::host());
  auto* pointer = static_cast<int*>(resource->allocate(sizeof(int), stream));
  std::atomic<bool> written{false};
  stream.enqueue([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    *pointer = 42;
    written = true;
  });
  resource->deallocate(pointer, sizeof(int), stream);
  EXPECT_TRUE(written.load());
}

TEST(HostResource, DeallocateAfterAFailedStreamStillFrees) {
  auto resource = std::make_shared<cohort::HostResource>();
  const cohort::Stream stream = cohort::Stream::create(cohort::Device::host());
  void* pointer = resource->allocate(64, stream);
  stream.enqueue([] { throw std::runtime_error("task failed"); });
  resource->deallocate(pointer, 64, stream);
  EXPECT_EQ(resource->bytes_in_use(), 0u);
  EXPECT_THROW(stream.synchronize(), std::runtime_error);  // the owner still sees the error
}

TEST(HostResource, NamesTheBytesItCouldNotGet) {
  auto resource = std::make_shared<cohort::HostResource>();
  const std::size_t impossible = std::numeric_limits<std::size_t>::max() / 2;
  const std::string message =
      thrown_message<cohort::OutOfMemory>([&] { (void)resource->allocate(impossible); });
  EXPECT_NE(message.find(std::to_string(impossible) + " bytes"), std::string::npos) << message;
  EXPECT_EQ(resource->bytes_in_use(), 0u);
}

TEST(HostResource, DeviceOnlyMemoryCannotBeOrderedOnAHostStream) {
  auto fake_device = std::make_shared<FakeDeviceResource>();
  const cohort::Stream host_stream = cohort::Stream::create(cohort::Device::host());
  const std::string message = thrown_message<cohort::InvalidArgument>(
      [&] { (void)fake_device->allocate(64, host_stream); });
  EXPECT_NE(message.find("host stream"), std::string::npos) << message;
  EXPECT_EQ(fake_device->bytes_in_use(), 0u);
}

TEST(CudaResources, AreRefusedWithAReasonWhenNoGpuIsUsable) {
  if (cohort::cuda_device_count() > 0) {
    GTEST_SKIP() << "a GPU is usable; test_memory_gpu covers the CUDA resources";
  }
  // "cohort was built without CUDA (COHORT_WITH_CUDA=OFF)" in a host-only build.
  const std::string expected = cohort::cuda_unavailable_reason();
  ASSERT_FALSE(expected.empty());
  for (const std::string& message : {
           thrown_message<cohort::InvalidArgument>(
               [] { (void)cohort::make_device_pool_resource(); }),
           thrown_message<cohort::InvalidArgument>([] { (void)cohort::make_managed_resource(); }),
           thrown_message<cohort::InvalidArgument>(
               [] { (void)cohort::make_pinned_host_resource(); }),
       }) {
    EXPECT_FALSE(message.empty());
    EXPECT_NE(message.find(expected), std::string::npos) << message;
  }
  EXPECT_FALSE(cohort::managed::concurrent_access(0));
}

TEST(CudaResources, ManagedHintsOnHostMemoryWithoutAGpuAreRefused) {
  if (cohort::cuda_device_count() > 0) {
    GTEST_SKIP() << "a GPU is present: test_memory_gpu covers prefetch and advice";
  }
  const cohort::Stream stream = cohort::Stream::create(cohort::Device::host());
  cohort::Buffer host(std::make_shared<cohort::HostResource>(), 64);
  EXPECT_THROW(cohort::managed::prefetch(host, cohort::Device::cuda(0), stream),
               cohort::InvalidArgument);
  if (cohort::built_with_cuda()) {  // not managed memory, or no device to ask: an error either way
    EXPECT_THROW(cohort::managed::set_read_mostly(host), cohort::Error);
  } else {
    EXPECT_THROW(cohort::managed::set_read_mostly(host), cohort::InvalidArgument);
  }
}

}  // namespace
}  // namespace cohort_test
