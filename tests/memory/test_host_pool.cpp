#include "resource_suite.hpp"
#include "test_resources.hpp"

#include <cohort/memory/host_pool.hpp>
#include <cohort/memory/host_resource.hpp>
#include <cohort/memory/limit_adaptor.hpp>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>

namespace cohort_test {
namespace {

TEST(HostPool, RoundsRequestsUpToSizeClasses) {
  const cohort::HostPoolResource pool(cohort::HostPoolOptions{.max_block_bytes = 1u << 20});
  EXPECT_EQ(pool.block_bytes(1), 256u);
  EXPECT_EQ(pool.block_bytes(256), 256u);
  EXPECT_EQ(pool.block_bytes(257), 320u);
  EXPECT_EQ(pool.block_bytes(320), 320u);
  EXPECT_EQ(pool.block_bytes(321), 384u);
  EXPECT_EQ(pool.block_bytes(512), 512u);
  EXPECT_EQ(pool.block_bytes(513), 640u);
  EXPECT_EQ(pool.block_bytes(600'000), 655'360u);  // 5 * 2^17
  EXPECT_EQ(pool.block_bytes(1'000'000), 1u << 20);
  EXPECT_EQ(pool.block_bytes(1u << 20), 1u << 20);
  EXPECT_EQ(pool.block_bytes((1u << 20) + 1), (1u << 20) + 1);  // above the largest: as asked
}

TEST(HostPool, ReusesAFreedBlockForTheSameSizeClass) {
  auto pool = std::make_shared<cohort::HostPoolResource>();
  void* first = pool->allocate(300);
  pool->deallocate(first, 300);
  EXPECT_EQ(pool->statistics().cached_bytes, 320u);
  EXPECT_EQ(pool->statistics().cached_blocks, 1u);

  void* second = pool->allocate(320);  // same class: the same block
  EXPECT_EQ(second, first);
  void* third = pool->allocate(321);  // next class: a new block
  EXPECT_NE(third, first);
  const cohort::HostPoolStatistics stats = pool->statistics();
  EXPECT_EQ(stats.hits, 1u);
  EXPECT_EQ(stats.misses, 2u);
  EXPECT_EQ(stats.cached_bytes, 0u);

  pool->deallocate(second, 320);
  pool->deallocate(third, 321);
  EXPECT_EQ(pool->statistics().cached_bytes, 320u + 384u);
  EXPECT_EQ(pool->release_unused(), 320u + 384u);
  EXPECT_EQ(pool->statistics().cached_bytes, 0u);
  EXPECT_EQ(pool->statistics().cached_blocks, 0u);
}

TEST(HostPool, ReturnsBlocksUpstreamBeyondTheCacheLimit) {
  auto upstream =
      std::make_shared<cohort::StatisticsAdaptor>(std::make_shared<cohort::HostResource>());
  auto pool = std::make_shared<cohort::HostPoolResource>(cohort::HostPoolOptions{
      .upstream = upstream, .max_block_bytes = 4096, .max_cached_bytes = 1024});
  void* a = pool->allocate(600);  // 640-byte class
  void* b = pool->allocate(600);
  void* large = pool->allocate(5000);  // above max_block_bytes: straight upstream
  EXPECT_EQ(upstream->statistics().bytes.current, 640u + 640u + 5000u);
  pool->deallocate(a, 600);
  pool->deallocate(b, 600);  // 1280 > 1024: goes back
  pool->deallocate(large, 5000);
  EXPECT_EQ(pool->statistics().cached_bytes, 640u);
  EXPECT_EQ(upstream->statistics().bytes.current, 640u);
  pool.reset();  // the destructor releases the cache
  EXPECT_EQ(upstream->statistics().bytes.current, 0u);
}

TEST(HostPool, ReleasesItsCacheAndRetriesWhenTheUpstreamRunsOut) {
  auto upstream =
      std::make_shared<cohort::LimitAdaptor>(std::make_shared<cohort::HostResource>(), 1024);
  auto pool =
      std::make_shared<cohort::HostPoolResource>(cohort::HostPoolOptions{.upstream = upstream});
  pool->deallocate(pool->allocate(640), 640);
  EXPECT_EQ(upstream->used_bytes(), 640u);  // cached
  void* block = pool->allocate(1024);       // 640 + 1024 > 1024: release the cache, then it fits
  EXPECT_EQ(upstream->used_bytes(), 1024u);
  EXPECT_EQ(pool->statistics().cached_bytes, 0u);
  EXPECT_THROW((void)pool->allocate(256), cohort::OutOfMemory);  // nothing left to release
  pool->deallocate(block, 1024);
}

TEST(HostPool, AStreamOrderedFreeWaitsForTheStreamBeforeReusingTheBlock) {
  auto pool = std::make_shared<cohort::HostPoolResource>();
  const auto stream = cohort::Stream::create(cohort::Device::host());
  auto* block = static_cast<unsigned char*>(pool->allocate(300, stream));
  std::atomic<bool> written{false};
  // Work still queued on the stream that uses the block when it is freed.
  stream.enqueue([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    std::memset(block, 1, 300);
    written = true;
  });
  pool->deallocate(block, 300, stream);
  EXPECT_TRUE(written) << "the block went back to the pool while its stream still used it";
  auto* again = static_cast<unsigned char*>(pool->allocate(300));
  EXPECT_EQ(again, block) << "the cached block is reused";
  std::memset(again, 2, 300);
  stream.synchronize();
  EXPECT_EQ(again[299], 2) << "the stream wrote into a block that was handed out again";
  pool->deallocate(again, 300);
}

TEST(HostPool, RejectsDeviceOnlyUpstreamsAndBadLimits) {
  EXPECT_THROW(cohort::HostPoolResource(
                   cohort::HostPoolOptions{.upstream = std::make_shared<FakeDeviceResource>()}),
               cohort::InvalidArgument);
  EXPECT_THROW(cohort::HostPoolResource(cohort::HostPoolOptions{.max_block_bytes = 100}),
               cohort::InvalidArgument);
}

TEST(HostPool, TakesItsPropertiesFromTheUpstream) {
  auto upstream = std::make_shared<cohort::HostResource>();
  const cohort::HostPoolResource pool(cohort::HostPoolOptions{.upstream = upstream});
  EXPECT_EQ(pool.device(), cohort::Device::host());
  EXPECT_TRUE(pool.host_accessible());
  EXPECT_FALSE(pool.device_accessible());
  EXPECT_EQ(pool.name(), "host_pool(host)");
  EXPECT_EQ(pool.upstream(), upstream);
}

}  // namespace
}  // namespace cohort_test
