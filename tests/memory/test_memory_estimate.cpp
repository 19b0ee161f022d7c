// Memory that cannot fit is refused before it is allocated, with what was needed and what was
// available; and what the library holds per parameter for training stays at its stated bounds
// (docs/memory.md, "Bytes per parameter").

#include <cohort/comm/world.hpp>
#include <cohort/core/error.hpp>
#include <cohort/ddp/data_parallel.hpp>
#include <cohort/ddp/param_registry.hpp>
#include <cohort/memory/memory_estimate.hpp>
#include <cohort/memory/memory_report.hpp>
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
