#include "resource_suite.hpp"
#include "test_resources.hpp"

#include <cohort/memory/host_resource.hpp>
#include <cohort/memory/limit_adaptor.hpp>
#include <cohort/memory/statistics_adaptor.hpp>

#include <limits>

namespace cohort_test {
namespace {

TEST(LimitAdaptor, GivesTheReservationBackWhenTheUpstreamThrows) {
  auto failing = std::make_shared<FailingResource>();
  auto capped = std::make_shared<cohort::LimitAdaptor>(failing, 1000);
  EXPECT_THROW((void)capped->allocate(600), cohort::OutOfMemory);
  EXPECT_EQ(failing->attempts(), 1);
  EXPECT_EQ(capped->used_bytes(), 0u);
  EXPECT_THROW((void)capped->allocate(600), cohort::OutOfMemory);  // still only the upstream's
  EXPECT_EQ(failing->attempts(), 2);
  EXPECT_EQ(capped->used_bytes(), 0u);
}

TEST(LimitAdaptor, NeverLetsConcurrentCallersPassTheLimitTogether) {
  auto counted =
      std::make_shared<cohort::StatisticsAdaptor>(std::make_shared<cohort::HostResource>());
  auto capped = std::make_shared<cohort::LimitAdaptor>(counted, 10 * 1000);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 2000; ++i) {
        try {
          void* pointer = capped->allocate(1000);
          capped->deallocate(pointer, 1000);
        } catch (const cohort::OutOfMemory&) {
        }
      }
    });
  }
  for (std::thread& thread : threads) {
    thread.join();
  }
  EXPECT_LE(counted->statistics().bytes.peak, 10u * 1000u);
  EXPECT_EQ(capped->used_bytes(), 0u);
}

TEST(LimitAdaptor, AHugeRequestDoesNotWrapTheCounter) {
  auto capped = std::make_shared<cohort::LimitAdaptor>(std::make_shared<cohort::HostResource>(),
                                                       std::numeric_limits<std::size_t>::max());
  void* small = capped->allocate(100);
  EXPECT_THROW((void)capped->allocate(std::numeric_limits<std::size_t>::max()),
               cohort::OutOfMemory);
  EXPECT_EQ(capped->used_bytes(), 100u);
  capped->deallocate(small, 100);
}

TEST(StatisticsAdaptor, DoesNotCountAFailedAllocation) {
  auto counted = std::make_shared<cohort::StatisticsAdaptor>(std::make_shared<FailingResource>());
  EXPECT_THROW((void)counted->allocate(64), cohort::OutOfMemory);
  const cohort::MemoryStatistics stats = counted->statistics();
  EXPECT_EQ(stats.bytes.total, 0u);
  EXPECT_EQ(stats.allocations.total, 0u);
  EXPECT_EQ(counted->bytes_in_use(), 0u);
}

TEST(Adaptors, NeedAnUpstreamAndTakeItsProperties) {
  EXPECT_THROW(cohort::StatisticsAdaptor(nullptr), cohort::InvalidArgument);
  EXPECT_THROW(cohort::LimitAdaptor(nullptr, 10), cohort::InvalidArgument);
  auto device = std::make_shared<FakeDeviceResource>();
  const cohort::LimitAdaptor capped(device, 10);
  EXPECT_EQ(capped.device(), cohort::Device::cuda(0));
  EXPECT_FALSE(capped.host_accessible());
  EXPECT_TRUE(capped.device_accessible());
  EXPECT_EQ(capped.name(), "limit(fake_device(cuda:0))");
  EXPECT_EQ(capped.limit_bytes(), 10u);
}

}  // namespace
}  // namespace cohort_test
