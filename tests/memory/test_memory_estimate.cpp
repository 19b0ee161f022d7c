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

#include "memory/cgroup_memory.hpp"
#include "support/test_helpers.hpp"

#include <gtest/gtest.h>

#include <cstddef>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <mutex>
#include <string>

#include <unistd.h>

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
  const auto message =
      message_of<OutOfMemory>([&] { check_memory_fits(Device::host(), huge, "the test's arena"); });
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
  // Where the host's number comes from (MemAvailable, or a memory cgroup's limit).
  EXPECT_TRUE(contains(message, memory_availability(Device::host()).source)) << message;
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

// ---- Note [Memory cgroups]: the tightest limit among a process's cgroups, on a fake tree ----

namespace fs = std::filesystem;
constexpr std::size_t kMiB = std::size_t{1} << 20;

/// A folder of fake cgroup files, removed at the end.
class FakeCgroups {
 public:
  FakeCgroups()
      : root_(fs::temp_directory_path() /
              ("cohort-cgroups-" + std::to_string(::getpid()) + "-" +
               std::to_string(reinterpret_cast<std::uintptr_t>(this)))) {
    fs::create_directories(root_);
  }
  ~FakeCgroups() {
    std::error_code ignored;
    fs::remove_all(root_, ignored);
  }
  FakeCgroups(const FakeCgroups&) = delete;
  FakeCgroups& operator=(const FakeCgroups&) = delete;

  /// Writes `text` to `path` (absolute, as on the machine) under the fake root.
  void write(const std::string& path, const std::string& text) const {
    const fs::path file = root_ / path.substr(1);
    fs::create_directories(file.parent_path());
    std::ofstream(file) << text << "\n";
  }
  std::string root() const { return root_.string(); }

 private:
  fs::path root_;
};

// A mountinfo line for a cgroup hierarchy mounted at `point`.
std::string mount_line(const std::string& root, const std::string& point, const std::string& type,
                       const std::string& options) {
  return "30 25 0:27 " + root + " " + point + " rw,nosuid - " + type + " cgroup " + options + "\n";
}

// A hybrid host (v1 memory, v2 at /sys/fs/cgroup/unified), as this development machine and
// Slurm's cgroup v1 plugin have: the job's limit is the tightest, its step has none, and the
// inactive file cache is not counted as used.
TEST(MemoryCgroups, AV1JobLimitAboveItsStepIsFoundWithoutTheFileCache) {
  const FakeCgroups tree;
  const std::string v1 = "/sys/fs/cgroup/memory";
  tree.write(v1 + "/memory.limit_in_bytes", "9223372036854771712");
  tree.write(v1 + "/slurm/job_7/memory.limit_in_bytes", std::to_string(4096 * kMiB));
  tree.write(v1 + "/slurm/job_7/memory.usage_in_bytes", std::to_string(1024 * kMiB));
  tree.write(v1 + "/slurm/job_7/memory.stat",
             "cache 1\ninactive_file 5\ntotal_inactive_file " + std::to_string(256 * kMiB));
  tree.write(v1 + "/slurm/job_7/step_0/memory.limit_in_bytes", "9223372036854771712");
  const std::string mounts = mount_line("/", "/sys/fs/cgroup/unified", "cgroup2", "rw") +
                             mount_line("/", v1, "cgroup", "rw,memory") +
                             mount_line("/", "/sys/fs/cgroup/cpu", "cgroup", "rw,cpu");
  const auto found = detail::tightest_cgroup_memory("5:cpu:/\n4:memory:/slurm/job_7/step_0\n0::/\n",
                                                    mounts, tree.root());
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->version, 1);
  EXPECT_EQ(found->folder, tree.root() + v1 + "/slurm/job_7");
  EXPECT_EQ(found->limit, 4096 * kMiB);
  EXPECT_EQ(found->in_use, 768 * kMiB);
  EXPECT_EQ(found->room(), 3328 * kMiB);
}

// cgroup v2 without a cgroup namespace: the mount shows part of the hierarchy ("/kubepods/pod"),
// so the process's path loses that prefix; the pod's limit ("max" in the container's own) holds.
TEST(MemoryCgroups, AV2PodLimitIsFoundThroughTheMountsRoot) {
  const FakeCgroups tree;
  const std::string v2 = "/sys/fs/cgroup";
  tree.write(v2 + "/memory.max", std::to_string(2048 * kMiB));
  tree.write(v2 + "/memory.current", std::to_string(512 * kMiB));
  tree.write(v2 + "/memory.stat", "anon 1\ninactive_file " + std::to_string(128 * kMiB));
  tree.write(v2 + "/ctr/memory.max", "max");
  tree.write(v2 + "/ctr/memory.current", std::to_string(384 * kMiB));
  const auto found = detail::tightest_cgroup_memory(
      "0::/kubepods/pod/ctr\n", mount_line("/kubepods/pod", v2, "cgroup2", "rw"), tree.root());
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->version, 2);
  EXPECT_EQ(found->folder, tree.root() + v2);
  EXPECT_EQ(found->room(), (2048 - 384) * kMiB);
}

// Of two limits the one with less room wins, whichever is larger: a parent nearly full beats a
// child with a small limit and nothing used.
TEST(MemoryCgroups, TheLimitWithTheLeastRoomWins) {
  const FakeCgroups tree;
  const std::string v2 = "/sys/fs/cgroup";
  tree.write(v2 + "/a/memory.max", std::to_string(8192 * kMiB));
  tree.write(v2 + "/a/memory.current", std::to_string(8000 * kMiB));
  tree.write(v2 + "/a/b/memory.max", std::to_string(1024 * kMiB));
  tree.write(v2 + "/a/b/memory.current", "0");
  const auto found = detail::tightest_cgroup_memory(
      "0::/a/b\n", mount_line("/", v2, "cgroup2", "rw"), tree.root());
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->folder, tree.root() + v2 + "/a");
  EXPECT_EQ(found->room(), 192 * kMiB);
}

TEST(MemoryCgroups, NoLimitAnywhereIsNone) {
  const FakeCgroups tree;
  tree.write("/sys/fs/cgroup/memory.max", "max");
  tree.write("/sys/fs/cgroup/x/memory.max", "max");
  EXPECT_FALSE(detail::tightest_cgroup_memory(
                   "0::/x\n", mount_line("/", "/sys/fs/cgroup", "cgroup2", "rw"), tree.root())
                   .has_value());
  // No memory hierarchy mounted at all, or unreadable files.
  EXPECT_FALSE(detail::tightest_cgroup_memory("0::/x\n", "", tree.root()).has_value());
  EXPECT_FALSE(detail::tightest_cgroup_memory("garbage", "more garbage", tree.root()).has_value());
}

// A mount point with a space (mountinfo writes it as \040).
TEST(MemoryCgroups, MountPointsWithEscapedSpacesAreRead) {
  const FakeCgroups tree;
  tree.write("/cg roups/memory.max", std::to_string(64 * kMiB));
  tree.write("/cg roups/memory.current", std::to_string(16 * kMiB));
  const auto found = detail::tightest_cgroup_memory(
      "0::/\n", mount_line("/", "/cg\\040roups", "cgroup2", "rw"), tree.root());
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->room(), 48 * kMiB);
}

// Ranks that share a host are checked together against what was there before any allocated, and
// the message names the source of the number.
TEST(MemoryEstimate, RanksSharingAHostAreCheckedTogether) {
  const MemoryAvailability available{1000 * kMiB, "a test's limit"};
  EXPECT_NO_THROW(check_memory_fits(available, Device::host(), 250 * kMiB, 4, "the ranks"));
  const auto message = message_of<OutOfMemory>([&] {
    check_memory_fits(available, Device::host(), 251 * kMiB, 4, "the ranks", "Do this.");
  });
  EXPECT_TRUE(contains(message, "251.00 MiB for each of the 4 ranks that share it"));
  EXPECT_TRUE(contains(message, "(a test's limit)"));
  EXPECT_TRUE(contains(message, "refused before allocating. Do this."));
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
      optimizer =
          std::make_unique<ShardedOptimizer>(target_of(dp), AdamWOptions{}, sharded_options_of(dp));
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
