#include <cohort/core/error.hpp>
#include <cohort/core/format.hpp>
#include <cohort/ddp/bucket_plan.hpp>

#include <algorithm>

namespace cohort {

namespace {

std::size_t round_up(std::size_t value, std::size_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

/// A cap in bytes as elements: rounded down to whole aligned units, at least one unit.
std::size_t cap_elements(std::size_t bytes, std::size_t element_bytes, std::size_t alignment) {
  const std::size_t elements = bytes / element_bytes / alignment * alignment;
  return std::max(elements, alignment);
}

}  // namespace

std::string BucketPlan::describe() const {
  std::string text;
  for (std::size_t b = 0; b < buckets.size(); ++b) {
    const ArenaSlice& slice = buckets[b].slice;
    text += "bucket " + std::to_string(b) + ": [" + std::to_string(slice.offset) + ", " +
            std::to_string(slice.offset + slice.count) + ") " +
            format_bytes(slice.count * size_of(dtype)) + ", " +
            std::to_string(buckets[b].params.size()) + " params\n";
  }
  return text;
}

BucketPlan arena_layout(const ParamRegistry& registry, int world_size) {
  return make_bucket_plan(registry, world_size, kDefaultBucketBytes, kDefaultFirstBucketBytes,
                          kDefaultLastBucketBytes);
}

BucketPlan make_bucket_plan(const ParamRegistry& registry, int world_size, std::size_t bucket_bytes,
                            std::size_t first_bucket_bytes, std::size_t last_bucket_bytes) {
  COHORT_EXPECTS(!registry.empty(), "cannot plan an arena for an empty parameter registry");
  COHORT_EXPECTS_GE(world_size, 1, "the world size must be at least 1");
  COHORT_EXPECTS(bucket_bytes > 0 && first_bucket_bytes > 0,
                 "bucket_bytes and first_bucket_bytes must be positive");
  const auto params = registry.params();
  BucketPlan plan;
  plan.dtype = params.front().dtype;
  plan.world_size = world_size;
  for (const ParamInfo& info : params) {
    COHORT_EXPECTS(info.dtype == plan.dtype,
                   "every parameter must have the arena's dtype: '" + info.name + "' is " +
                       std::string(to_string(info.dtype)) + " but the first parameter, '" +
                       params.front().name + "', is " + std::string(to_string(plan.dtype)) +
                       " (keep 16-bit models entirely 16-bit; the optimizer keeps f32 masters)");
  }
  const std::size_t element_bytes = size_of(plan.dtype);
  const std::size_t alignment = kArenaAlignmentBytes / element_bytes;

  // Reverse registration order (Note [Arena layout]).
  plan.slots.resize(params.size());
  std::size_t offset = 0;
  for (std::size_t i = params.size(); i-- > 0;) {
    plan.slots[i] = ArenaSlice{offset, params[i].count};
    offset = round_up(offset + params[i].count, alignment);
  }
  plan.used_count = offset;
  plan.arena_count = round_up(offset, alignment * static_cast<std::size_t>(world_size));
  plan.shard_count = plan.arena_count / static_cast<std::size_t>(world_size);

  // Buckets (Note [Buckets]).
  const std::size_t first_cap = cap_elements(first_bucket_bytes, element_bytes, alignment);
  const std::size_t cap = cap_elements(bucket_bytes, element_bytes, alignment);
  // With a last cap, the tail after the first bucket gets a bucket of its own (the one before it
  // may then be short); without one, the last bucket is whatever remains.
  const std::size_t first_count = std::min(first_cap, plan.arena_count);
  const std::size_t tail =
      last_bucket_bytes == 0
          ? 0
          : std::min({cap, cap_elements(last_bucket_bytes, element_bytes, alignment),
                      plan.arena_count - first_count});
  const std::size_t body_end = plan.arena_count - tail;
  for (std::size_t start = 0; start < body_end;) {
    const std::size_t limit = plan.buckets.empty() ? first_cap : cap;
    const std::size_t count = std::min(limit, body_end - start);
    plan.buckets.push_back(Bucket{ArenaSlice{start, count}, {}});
    start += count;
  }
  if (tail > 0) {
    plan.buckets.push_back(Bucket{ArenaSlice{body_end, tail}, {}});
  }

  // Overlaps: walk parameters in arena order against buckets in arena order.
  plan.param_buckets.resize(params.size());
  std::size_t first_bucket = 0;
  for (std::size_t i = params.size(); i-- > 0;) {
    const ArenaSlice slot = plan.slots[i];
    while (plan.buckets[first_bucket].slice.offset + plan.buckets[first_bucket].slice.count <=
           slot.offset) {
      ++first_bucket;
    }
    for (std::size_t b = first_bucket;
         b < plan.buckets.size() && plan.buckets[b].slice.offset < slot.offset + slot.count; ++b) {
      plan.buckets[b].params.push_back(static_cast<std::uint32_t>(i));
      plan.param_buckets[i].push_back(static_cast<std::uint32_t>(b));
    }
  }
  return plan;
}

}  // namespace cohort
