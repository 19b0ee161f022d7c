// Memory that cannot fit is refused before it is allocated, with what was needed and what was
// available; and what the library holds per parameter for training stays at its stated bounds
// (docs/memory.md, "Bytes per parameter").

#include <cohort/comm/world.hpp>
#include <cohort/core/error.hpp>
#include <cohort/ddp/data_parallel.hpp>
#include <cohort/ddp/param_registry.hpp>
#include <cohort/memory/host_resource.hpp>
#include <cohort/memory/limit_adaptor.hpp>
#include <cohort/memory/memory_estimate.hpp>
#include <cohort/memory/memory_report.hpp>
#include <cohort/memory/statistics_adaptor.hpp>
#include <cohort/optim/adamw.hpp>
#include <cohort/optim/data_parallel_target.hpp>
#include <cohort/optim/sharded_optimizer.hpp>

#include "support/test_helpers.hpp"

#include <gtest/gtest.h>

#include <cstddef>
#include <limits>
#include <memory>
#include <mutex>
#include <string>

namespace cohort {
namespace {

using cohort_test::contains;
using cohort_test::message_of;

TEST(MemoryEstimate, TheHostHasSomeMemoryAvailable) {
  const std::size_t available = available_memory(Device::host());
  EXPECT_GT(available, std::size_t{1} << 20);
  EXPECT_NO_THROW(check_memory_fits(Device::host(), 4096, "a page"));
}

TEST(MemoryEstimate, WhatCannotFitIsRefusedWithBothAmounts) {
  const std::size_t huge = std::numeric_limits<std::size_t>::max() / 2;
  const auto message = message_of<OutOfMemory>(
      [&] { check_memory_fits(Device::host(), huge, "the test's arena"); });
  EXPECT_TRUE(contains(message, "the test's arena needs " + std::to_string(huge) + " bytes"));
  EXPECT_TRUE(contains(message, "are available"));
  EXPECT_TRUE(contains(message, "refused before allocating"));
}

TEST(MemoryEstimate, TheResourceOverloadRefusesOnTheHostToo) {
  const HostResource host;
  const std::size_t huge = std::numeric_limits<std::size_t>::max() / 2;
  const auto message =
      message_of<OutOfMemory>([&] { check_memory_fits(host, huge, "the optimizer state"); });
  EXPECT_TRUE(contains(message, "the optimizer state needs"));
  EXPECT_TRUE(contains(message, "the host's available memory"));
  EXPECT_NO_THROW(check_memory_fits(host, 4096, "a page"));
}

// Note [Oversubscribed managed memory]: the decision alone, from amounts the test chooses (the
// GPU side of it runs in test_optim_gpu, OversubscribedManagedStateConstructsAndSteps).
constexpr std::size_t kGiB = std::size_t{1} << 30;

TEST(MemoryFit, AGpuResourceIsBoundedByTheGpusFreeMemory) {
  const detail::MemoryFit fit = detail::memory_fit(10 * kGiB, true, false, 4 * kGiB, 64 * kGiB);
  EXPECT_FALSE(fit.fits);
  EXPECT_EQ(fit.available, 4 * kGiB);
  EXPECT_EQ(fit.where, "the GPU's free memory");
  EXPECT_TRUE(detail::memory_fit(4 * kGiB, true, false, 4 * kGiB, 0).fits);
}

TEST(MemoryFit, OversubscribedManagedMemoryIsBoundedByTheGpuAndTheHostTogether) {
  // More than the GPU has free, less than the GPU and the host together: what
  // allow_oversubscription exists for.
  const detail::MemoryFit fits = detail::memory_fit(10 * kGiB, true, true, 4 * kGiB, 8 * kGiB);
  EXPECT_TRUE(fits.fits);
  EXPECT_EQ(fits.available, 12 * kGiB);
  // More than both together: refused, and the message says what the bound was.
  const detail::MemoryFit refused = detail::memory_fit(20 * kGiB, true, true, 4 * kGiB, 8 * kGiB);
  EXPECT_FALSE(refused.fits);
  EXPECT_EQ(refused.available, 12 * kGiB);
  EXPECT_TRUE(contains(refused.where, "together"));
}

TEST(MemoryFit, AnAmountThatCannotBeReadRefusesNothing) {
  EXPECT_TRUE(detail::memory_fit(10 * kGiB, true, false, 0, 0).fits);
  EXPECT_TRUE(detail::memory_fit(10 * kGiB, true, true, 4 * kGiB, 0).fits);
  EXPECT_TRUE(detail::memory_fit(10 * kGiB, true, true, 0, 8 * kGiB).fits);
  EXPECT_TRUE(detail::memory_fit(10 * kGiB, false, false, 0, 0).fits);
}

TEST(MemoryFit, TheHostIgnoresOversubscription) {
  const detail::MemoryFit fit = detail::memory_fit(10 * kGiB, false, true, 4 * kGiB, 8 * kGiB);
  EXPECT_FALSE(fit.fits);
  EXPECT_EQ(fit.available, 4 * kGiB);
  EXPECT_EQ(fit.where, "the host's available memory");
}

/// Says it is managed memory of cuda:0 made with allow_oversubscription (host memory underneath).
class FakeOversubscribingResource final : public MemoryResource {
 public:
  FakeOversubscribingResource() : MemoryResource(Device::cuda(0), true, true, "fake_managed") {
    set_oversubscribable(true);
  }

 private:
  void* do_allocate(std::size_t bytes, const Stream* /*stream*/) override {
    return host_.allocate(bytes);
  }
  void do_deallocate(void* pointer, std::size_t bytes, const Stream* /*stream*/) noexcept override {
    host_.deallocate(pointer, bytes);
  }
  HostResource host_;
};

TEST(MemoryFit, AdaptorsOverAnOversubscribingResourceSaySo) {
  EXPECT_FALSE(HostResource().oversubscribable());
  const auto managed = std::make_shared<FakeOversubscribingResource>();
  EXPECT_TRUE(managed->oversubscribable());
  const auto counted = std::make_shared<StatisticsAdaptor>(managed);
  const LimitAdaptor capped(counted, kGiB);
  EXPECT_TRUE(counted->oversubscribable());
  EXPECT_TRUE(capped.oversubscribable());
  EXPECT_FALSE(StatisticsAdaptor(std::make_shared<HostResource>()).oversubscribable());
}

// 2^40 f32 parameters (4 TiB each for parameters and gradients): refused by DataParallel before
// it allocates, not killed by the kernel.
TEST(MemoryEstimate, DataParallelRefusesArenasThatCannotFit) {
  std::string message;
  run_local(1, [&](World& world) {
    ParamRegistry registry;
    registry.add("huge", {std::size_t{1} << 20, std::size_t{1} << 20});
    DataParallelOptions options;  // fixed caps: no link measurement first
    options.bucket_bytes = std::size_t{1} << 30;
    options.first_bucket_bytes = std::size_t{1} << 30;
    message = message_of<OutOfMemory>([&] { DataParallel dp(world, registry, options); });
  });
  EXPECT_TRUE(contains(message, "DataParallel's parameter, gradient and wire buffers"));
  EXPECT_TRUE(contains(message, "available"));
}

struct LibraryBytes {
  std::size_t bytes = 0;  ///< parameters, gradients, optimizer state and buckets, all ranks
  std::size_t other = 0;
};

/// The live bytes of the library's training categories on the host, now.
LibraryBytes library_bytes_now() {
  LibraryBytes total;
  for (const MemoryUsage& usage : memory_usage()) {
    if (!usage.device.is_host()) continue;
    switch (usage.category) {
      case MemoryCategory::parameters:
      case MemoryCategory::gradients:
      case MemoryCategory::optimizer_state:
      case MemoryCategory::buckets:
        total.bytes += usage.current_bytes;
        break;
      default:
        total.other += usage.current_bytes;
    }
  }
  return total;
}

/// Bytes per parameter the library holds for f32 AdamW on `ranks` ranks (ZeRO-1 or not), measured
/// by memory_report()'s registry while DataParallel and the optimizer live.
double library_bytes_per_parameter(int ranks, bool zero1) {
  constexpr std::size_t kRows = 1000, kColumns = 1001;  // odd sizes: padding counts too
  const LibraryBytes before = library_bytes_now();
  std::mutex mutex;
  double per_parameter = 0.0;
  run_local(ranks, [&](World& world) {
    ParamRegistry registry;
    registry.add("w", {kRows, kColumns});
    registry.add("b", {kRows});
    DataParallelOptions options;
    options.gradient_sync = zero1 ? GradientSync::reduce_scatter : GradientSync::all_reduce;
    options.bucket_bytes = std::size_t{1} << 20;
    options.first_bucket_bytes = std::size_t{1} << 20;
    DataParallel dp(world, registry, options);
    std::unique_ptr<Optimizer> optimizer;
    if (zero1) {
      optimizer = std::make_unique<ShardedOptimizer>(target_of(dp), AdamWOptions{},
                                                     sharded_options_of(dp));
    } else {
      optimizer = std::make_unique<AdamW>(target_of(dp), AdamWOptions{});
    }
    dp.compute_stream().synchronize();
    world.group().barrier("every rank allocated");
    if (world.rank() == 0) {
      const std::size_t parameters = (kRows * kColumns + kRows) * static_cast<std::size_t>(ranks);
      const std::lock_guard lock(mutex);
      per_parameter = static_cast<double>(library_bytes_now().bytes - before.bytes) /
                      static_cast<double>(parameters);
    }
    world.group().barrier("every rank measured");
  });
  return per_parameter;
}

// Parameters 4 + gradients 4 + two AdamW moments 8 = 16, plus padding and small buffers.
TEST(MemoryEstimate, F32AdamWHoldsAtMost16AndAHalfBytesPerParameter) {
  const double bytes = library_bytes_per_parameter(1, false);
  EXPECT_GE(bytes, 16.0);
  EXPECT_LE(bytes, 16.5);
}

// ZeRO-1 on N ranks: parameters 4 + gradients 4 + the moments of this rank's shard, 8 / N.
TEST(MemoryEstimate, ZeroOneHoldsAtMost8Plus8OverNAndAHalfBytesPerParameter) {
  for (const int ranks : {2, 4}) {
    const double bytes = library_bytes_per_parameter(ranks, true);
    EXPECT_GE(bytes, 8.0 + 8.0 / ranks) << ranks << " ranks";
    EXPECT_LE(bytes, 8.0 + 8.0 / ranks + 0.5) << ranks << " ranks";
  }
}

}  // namespace
}  // namespace cohort
