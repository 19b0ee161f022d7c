// BucketPlan over seeded random registries: the layout and bucket properties that every rank
// relies on, checked against brute force.
#include <cohort/core/error.hpp>
#include <cohort/ddp/bucket_plan.hpp>
#include <cohort/ddp/bucket_sizing.hpp>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

namespace {

using ::testing::HasSubstr;

TEST(BucketPlan, RandomRegistriesHaveContiguousAlignedCappedBuckets) {
  std::mt19937 random(20261202);
  for (int trial = 0; trial < 300; ++trial) {
    const cohort::DType dtype = trial % 3 == 0 ? cohort::DType::bf16 : cohort::DType::f32;
    const std::size_t element = cohort::size_of(dtype);
    const std::size_t alignment = 256 / element;
    cohort::ParamRegistry registry;
    const int params = std::uniform_int_distribution<int>(1, 40)(random);
    for (int p = 0; p < params; ++p) {
      const std::size_t count = std::uniform_int_distribution<std::size_t>(1, 5000)(random);
      std::string name = "p";
      name.append(std::to_string(p));
      if (p % 4 == 1) {
        registry.add(name, {count, 3}, dtype);
      } else {
        registry.add(name, {count}, dtype);
      }
    }
    const int world = std::uniform_int_distribution<int>(1, 8)(random);
    const std::size_t bucket_bytes = std::uniform_int_distribution<std::size_t>(1, 65536)(random);
    const std::size_t first_bytes = std::uniform_int_distribution<std::size_t>(1, 16384)(random);
    const cohort::BucketPlan plan =
        cohort::make_bucket_plan(registry, world, bucket_bytes, first_bytes);
    SCOPED_TRACE("trial " + std::to_string(trial));

    // Layout: reverse registration order, aligned, disjoint, padded to world x alignment.
    ASSERT_EQ(plan.slots.size(), registry.size());
    std::size_t expected_offset = 0;
    for (std::size_t i = registry.size(); i-- > 0;) {
      EXPECT_EQ(plan.slots[i].offset, expected_offset) << "parameter " << i;
      EXPECT_EQ(plan.slots[i].offset % alignment, 0u);
      EXPECT_EQ(plan.slots[i].count, registry.params()[i].count);
      expected_offset =
          (plan.slots[i].offset + plan.slots[i].count + alignment - 1) / alignment * alignment;
    }
    EXPECT_EQ(plan.used_count, expected_offset);
    EXPECT_GE(plan.arena_count, plan.used_count);
    EXPECT_LT(plan.arena_count, plan.used_count + alignment * static_cast<std::size_t>(world));
    EXPECT_EQ(plan.arena_count % (alignment * static_cast<std::size_t>(world)), 0u);
    EXPECT_EQ(plan.shard_count * static_cast<std::size_t>(world), plan.arena_count);

    // Buckets: contiguous, covering the arena exactly, aligned, within their caps.
    const std::size_t cap = std::max(bucket_bytes / element / alignment * alignment, alignment);
    const std::size_t first_cap =
        std::max(first_bytes / element / alignment * alignment, alignment);
    std::size_t next = 0;
    for (std::size_t b = 0; b < plan.buckets.size(); ++b) {
      const cohort::ArenaSlice slice = plan.buckets[b].slice;
      EXPECT_EQ(slice.offset, next) << "bucket " << b;
      EXPECT_GT(slice.count, 0u);
      EXPECT_EQ(slice.offset % alignment, 0u);
      EXPECT_LE(slice.count, b == 0 ? first_cap : cap) << "bucket " << b;
      if (b + 1 < plan.buckets.size()) {  // only the last may be short
        EXPECT_EQ(slice.count, b == 0 ? first_cap : cap) << "bucket " << b;
      }
      next = slice.offset + slice.count;
    }
    EXPECT_EQ(next, plan.arena_count);

    // Overlap lists, by brute force, in arena order; and their inverse.
    for (std::size_t b = 0; b < plan.buckets.size(); ++b) {
      const cohort::ArenaSlice slice = plan.buckets[b].slice;
      std::vector<std::uint32_t> expected;
      for (std::size_t i = registry.size(); i-- > 0;) {
        const cohort::ArenaSlice slot = plan.slots[i];
        if (slot.offset < slice.offset + slice.count && slice.offset < slot.offset + slot.count) {
          expected.push_back(static_cast<std::uint32_t>(i));
        }
      }
      EXPECT_EQ(plan.buckets[b].params, expected) << "bucket " << b;
    }
    ASSERT_EQ(plan.param_buckets.size(), registry.size());
    for (std::uint32_t i = 0; i < registry.size(); ++i) {
      std::vector<std::uint32_t> expected;
      for (std::uint32_t b = 0; b < plan.buckets.size(); ++b) {
        const auto& list = plan.buckets[b].params;
        if (std::find(list.begin(), list.end(), i) != list.end()) {
          expected.push_back(b);
        }
      }
      EXPECT_FALSE(expected.empty());
      EXPECT_EQ(plan.param_buckets[i], expected) << "parameter " << i;
    }

    // A pure function: the same inputs give the same plan (what every rank computes).
    const cohort::BucketPlan again =
        cohort::make_bucket_plan(registry, world, bucket_bytes, first_bytes);
    EXPECT_EQ(again.describe(), plan.describe());
    EXPECT_EQ(again.slots, plan.slots);
  }
}

TEST(BucketPlan, DefaultCapsGiveA1MiBFirstBucketThen25MiB) {
  cohort::ParamRegistry registry;
  registry.add("big", {20u << 20});  // 80 MiB of f32
  const cohort::BucketPlan plan = cohort::make_bucket_plan(registry, 8, 25u << 20, 1u << 20);
  ASSERT_EQ(plan.buckets.size(), 5u);  // 1 + 25 + 25 + 25 + 4 MiB
  EXPECT_EQ(plan.buckets[0].slice.count, (1u << 20) / 4);
  EXPECT_EQ(plan.buckets[1].slice.count, (25u << 20) / 4);
  EXPECT_EQ(plan.buckets[4].slice.count, (4u << 20) / 4);
  EXPECT_THAT(plan.describe(), HasSubstr("bucket 0: [0, 262144) 1.00 MiB, 1 params"));
}

TEST(BucketPlan, LastCapGivesTheTailABucketOfItsOwn) {
  cohort::ParamRegistry registry;
  registry.add("big", {20u << 20});  // 80 MiB of f32
  const cohort::BucketPlan plan =
      cohort::make_bucket_plan(registry, 8, 25u << 20, 1u << 20, 1u << 20);
  ASSERT_EQ(plan.buckets.size(), 6u);  // 1 + 25 + 25 + 25 + 3 + 1 MiB
  EXPECT_EQ(plan.buckets[4].slice.count, (3u << 20) / 4);
  EXPECT_EQ(plan.buckets[5].slice.count, (1u << 20) / 4);
  EXPECT_EQ(plan.buckets[5].slice.offset + plan.buckets[5].slice.count, plan.arena_count);

  // Over random sizes: the tail never exceeds its cap (nor the general one), the first bucket
  // keeps its own, and the buckets still tile the arena.
  std::mt19937 random(7);
  for (int trial = 0; trial < 200; ++trial) {
    cohort::ParamRegistry params;
    params.add("a", {std::uniform_int_distribution<std::size_t>(1, 200000)(random)});
    params.add("b", {std::uniform_int_distribution<std::size_t>(1, 200000)(random)});
    const std::size_t cap = std::uniform_int_distribution<std::size_t>(256, 1 << 18)(random);
    const std::size_t first = std::uniform_int_distribution<std::size_t>(256, 1 << 16)(random);
    const std::size_t last = std::uniform_int_distribution<std::size_t>(256, 1 << 19)(random);
    const auto tiled = cohort::make_bucket_plan(params, 3, cap, first, last);
    std::size_t next = 0;
    for (const auto& bucket : tiled.buckets) {
      ASSERT_EQ(bucket.slice.offset, next);
      next += bucket.slice.count;
    }
    ASSERT_EQ(next, tiled.arena_count);
    const std::size_t element_cap = std::max<std::size_t>(cap / 4 / 64 * 64, 64);
    const std::size_t last_cap =
        std::min(element_cap, std::max<std::size_t>(last / 4 / 64 * 64, 64));
    if (tiled.buckets.size() > 1) {
      EXPECT_LE(tiled.buckets.back().slice.count, last_cap) << "trial " << trial;
    }
    EXPECT_LE(tiled.buckets.front().slice.count, std::max<std::size_t>(first / 4 / 64 * 64, 64));
  }
}

TEST(BucketPlan, RejectsEmptyAndMixedRegistries) {
  cohort::ParamRegistry empty;
  EXPECT_THROW(cohort::make_bucket_plan(empty, 1, 1024, 1024), cohort::InvalidArgument);
  cohort::ParamRegistry registry;
  EXPECT_THROW(registry.add("zero", {3, 0}), cohort::InvalidArgument);
  registry.add("a", {3});
  EXPECT_THROW(registry.add("a", {3}), cohort::InvalidArgument);
  EXPECT_EQ(registry.find("a").index, 0u);
  EXPECT_THROW((void)registry.find("b"), cohort::InvalidArgument);
  EXPECT_EQ(registry.info(registry.find("a")).describe(), "a [3] f32");
  registry.add("scalar", {}, cohort::DType::f16);
  EXPECT_EQ(registry.info(cohort::ParamHandle{1}).count, 1u);
  EXPECT_THROW(cohort::make_bucket_plan(registry, 2, 1024, 1024), cohort::InvalidArgument);
}

}  // namespace

namespace {

// Note [Automatic bucket sizes]: the fixed cost alpha is at most 10% of a first or last bucket's
// time, the middle cap is four times that, and the caps stay within [256 B, 64 MiB].
TEST(BucketSizing, FixedCostStaysUnderATenthOfEachBucket) {
  for (const cohort::LinkEstimate link : {cohort::LinkEstimate{20.0, 2000.0},      // shared memory
                                          cohort::LinkEstimate{1000.0, 700.0},     // TCP loopback
                                          cohort::LinkEstimate{8.0, 200000.0}}) {  // NVLink
    const cohort::BucketSizing sizing = cohort::choose_bucket_sizes(link);
    EXPECT_TRUE(sizing.automatic);
    for (const std::size_t cap : {sizing.first_bytes, sizing.last_bytes}) {
      const double seconds_fixed = link.alpha_us;
      const double seconds_total = link.alpha_us + static_cast<double>(cap) / link.bytes_per_us;
      EXPECT_LE(seconds_fixed / seconds_total, 0.1 + 1e-9) << sizing.describe();
      // ...and not much bigger than needed: one 256-byte step less would break the 10%.
      const double smaller = link.alpha_us + static_cast<double>(cap - 256) / link.bytes_per_us;
      EXPECT_GT(seconds_fixed / smaller, 0.1) << sizing.describe();
    }
    EXPECT_EQ(sizing.middle_bytes % 256, 0u);
    EXPECT_NEAR(static_cast<double>(sizing.middle_bytes),
                4.0 * static_cast<double>(sizing.first_bytes), 4.0 * 256.0);
  }
  // 18 us x 1 byte/us x 9 = 162 bytes: the 256-byte floor; 1 s x 1 GB/s: the 64 MiB ceiling.
  EXPECT_EQ(cohort::choose_bucket_sizes({18.0, 1.0}).first_bytes, 256u);
  EXPECT_EQ(cohort::choose_bucket_sizes({1e6, 1000.0}).middle_bytes, std::size_t{64} << 20);
  EXPECT_THROW(cohort::choose_bucket_sizes({1.0, 0.0}), cohort::InvalidArgument);
  EXPECT_THAT(cohort::choose_bucket_sizes({20.0, 2000.0}).describe(),
              ::testing::HasSubstr("auto from alpha 20.0 us, beta 2.00 GB/s: first 351.75 KiB"));
}

}  // namespace

namespace {

// The stall once seen with automatic buckets: probe times on the line through the origin (4 KiB
// in 4 us, 1 MiB in 1024 us) made the two-point intercept alpha = 0, hence 256-byte caps and
// hundreds of all-reduces a step. alpha is never 0 and the caps never tiny, whatever the times.
TEST(BucketSizing, TheLinkFitNeverGivesAZeroAlphaOrTinyCaps) {
  constexpr std::size_t kSmall = std::size_t{4} << 10;
  constexpr std::size_t kLarge = std::size_t{1} << 20;
  const std::size_t floor = 9 * kSmall;  // alpha x beta >= 4 KiB, times 9 for the 10% share
  auto check = [&](double small_us, double large_us) {
    const cohort::LinkEstimate link = cohort::fit_link(kSmall, small_us, kLarge, large_us);
    const cohort::BucketSizing sizing = cohort::choose_bucket_sizes(link);
    EXPECT_GE(link.alpha_us, std::max(small_us, 1.0)) << small_us << " " << large_us;
    EXPECT_GT(link.bytes_per_us, 0.0) << small_us << " " << large_us;
    EXPECT_GE(sizing.first_bytes, floor) << sizing.describe();
    EXPECT_GE(sizing.last_bytes, floor) << sizing.describe();
    EXPECT_GE(sizing.middle_bytes, floor) << sizing.describe();
  };
  check(4.0, 1024.0);  // proportional: the intercept is exactly 0
  check(4.0, 2048.0);  // slower than proportional: the intercept is negative
  check(30.0, 20.0);   // noise: the large probe faster than the small one
  check(0.0, 0.0);     // a clock too coarse to see either
  check(20.0, 520.0);  // shared memory: alpha stays the small probe's time
  std::mt19937 random(20261203);
  for (int trial = 0; trial < 1000; ++trial) {
    check(std::uniform_real_distribution<double>(0.0, 5000.0)(random),
          std::uniform_real_distribution<double>(0.0, 500000.0)(random));
    if (HasFailure()) {
      break;  // one counterexample says enough
    }
  }
  const cohort::LinkEstimate shm = cohort::fit_link(kSmall, 20.0, kLarge, 520.0);
  EXPECT_DOUBLE_EQ(shm.alpha_us, 20.0);
  EXPECT_DOUBLE_EQ(shm.bytes_per_us, static_cast<double>(kLarge - kSmall) / 500.0);
  EXPECT_THROW(cohort::fit_link(kLarge, 1.0, kSmall, 2.0), cohort::InvalidArgument);
  EXPECT_THROW(cohort::fit_link(0, 1.0, kSmall, 2.0), cohort::InvalidArgument);
  EXPECT_THROW(cohort::fit_link(kSmall, -1.0, kLarge, 2.0), cohort::InvalidArgument);
  EXPECT_THROW(cohort::fit_link(kSmall, 1.0, kLarge, std::nan("")), cohort::InvalidArgument);
}

}  // namespace
