// Note [Shard layout]: segments of whole parameters, each split evenly over the ranks.

#include <cohort/core/error.hpp>
#include <cohort/core/format.hpp>
#include <cohort/ddp/shard_layout.hpp>

#include <algorithm>
#include <functional>

namespace cohort {
namespace {

std::size_t round_up(std::size_t value, std::size_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

/// A cap in bytes as elements: rounded down to whole aligned units, at least one unit.
std::size_t cap_elements(std::size_t bytes, std::size_t element_bytes, std::size_t alignment) {
  return std::max(bytes / element_bytes / alignment * alignment, alignment);
}

/// ZeRO-2: groups of consecutive parameters (in arena order) under the caps, like the buckets of
/// plain data parallel but cut at parameter boundaries, and never inside a unit (its parameters
/// are written together: a bucket split there would hold two buckets open at once); a parameter
/// larger than its cap ends the group it joins (Note [Shard layout]). `unit[k]` is the unit of
/// the k-th parameter in arena order, or `none`.
std::vector<std::vector<std::uint32_t>> bucket_groups(const std::vector<std::uint32_t>& order,
                                                      const std::vector<std::size_t>& sizes,
                                                      const std::vector<std::uint32_t>& unit,
                                                      std::uint32_t none, std::size_t first_cap,
                                                      std::size_t cap, std::size_t last_cap) {
  const std::size_t n = order.size();
  auto can_cut_before = [&](std::size_t k) {
    return k == 0 || unit[k] == none || unit[k] != unit[k - 1];
  };
  // The tail that the last cap holds: the parameters at the end of the arena, when the last one
  // fits the cap, never the first one, and from a unit's start.
  std::size_t tail_begin = n;
  if (last_cap > 0 && n > 1 && sizes[n - 1] <= last_cap) {
    tail_begin = n - 1;
    std::size_t total = sizes[tail_begin];
    while (tail_begin > 1 && total + sizes[tail_begin - 1] <= last_cap) {
      total += sizes[--tail_begin];
    }
    while (tail_begin > 0 && !can_cut_before(tail_begin)) --tail_begin;
    if (tail_begin == 0) tail_begin = n;
  }
  std::vector<std::vector<std::uint32_t>> groups;
  std::size_t total = 0;
  bool closed = true;
  for (std::size_t k = 0; k < n; ++k) {
    const std::size_t limit = groups.size() == 1 ? first_cap : cap;
    const bool oversized = sizes[k] > limit;
    const bool full = k < tail_begin && !oversized && total + sizes[k] > limit;
    if (groups.empty() || k == tail_begin || ((closed || full) && can_cut_before(k))) {
      groups.emplace_back();
      total = 0;
    }
    groups.back().push_back(order[k]);
    total += sizes[k];
    closed = oversized || k + 1 == tail_begin;
  }
  return groups;
}

}  // namespace

std::string_view to_string(Sharding sharding) noexcept {
  switch (sharding) {
    case Sharding::none:
      return "none";
    case Sharding::zero2:
      return "zero2";
    case Sharding::zero3:
      return "zero3";
  }
  return "none";
}

std::vector<ShardPiece> ShardLayout::pieces(int rank) const {
  std::vector<ShardPiece> result;
  result.reserve(segments.size());
  for (const ShardSegment& segment : segments) {
    result.push_back(
        ShardPiece{segment.slice.offset + static_cast<std::size_t>(rank) * segment.piece_count,
                   segment.shard_offset, segment.piece_count});
  }
  return result;
}

std::size_t ShardLayout::largest_segment() const noexcept {
  std::size_t largest = 0;
  for (const ShardSegment& segment : segments) largest = std::max(largest, segment.slice.count);
  return largest;
}

std::size_t ShardLayout::rank_bytes(int buckets_in_flight) const noexcept {
  std::size_t elements = 0;
  switch (sharding) {
    case Sharding::none:
      elements = 2 * arena_count;
      break;
    case Sharding::zero2:
      elements = arena_count + shard_count +
                 static_cast<std::size_t>(buckets_in_flight) * largest_segment();
      break;
    case Sharding::zero3:
      elements = 2 * shard_count + 2 * kUnitsInFlight * largest_segment();
      break;
  }
  return elements * size_of(dtype);
}

BucketPlan ShardLayout::as_bucket_plan() const {
  BucketPlan plan;
  plan.dtype = dtype;
  plan.world_size = world_size;
  plan.slots = slots;
  plan.used_count = used_count;
  plan.arena_count = arena_count;
  plan.shard_count = shard_count;
  plan.param_buckets.resize(slots.size());
  for (std::size_t s = 0; s < segments.size(); ++s) {
    plan.buckets.push_back(Bucket{segments[s].slice, segments[s].params});
    for (const std::uint32_t param : segments[s].params) {
      plan.param_buckets[param].push_back(static_cast<std::uint32_t>(s));
    }
  }
  return plan;
}

std::string ShardLayout::describe() const {
  std::string text;
  for (std::size_t s = 0; s < segments.size(); ++s) {
    const ShardSegment& segment = segments[s];
    text += "segment " + std::to_string(s) + ": [" + std::to_string(segment.slice.offset) + ", " +
            std::to_string(segment.slice.offset + segment.slice.count) + ") " +
            format_bytes(segment.slice.count * size_of(dtype)) + ", " +
            std::to_string(segment.params.size()) + " params\n";
  }
  return text;
}

ShardLayout make_shard_layout(const ParamRegistry& registry, int world_size, Sharding sharding,
                              std::size_t bucket_bytes, std::size_t first_bucket_bytes,
                              std::size_t last_bucket_bytes) {
  // The checks of the plain layout (dtypes, world size, caps), and its slots for Sharding::none.
  const BucketPlan plain =
      make_bucket_plan(registry, world_size, bucket_bytes, first_bucket_bytes, last_bucket_bytes);
  const auto ranks = static_cast<std::size_t>(world_size);
  const auto params = registry.params();
  const auto units = registry.units();
  ShardLayout layout;
  layout.sharding = sharding;
  layout.world_size = world_size;
  layout.dtype = plain.dtype;
  const std::size_t element_bytes = size_of(layout.dtype);
  const std::size_t alignment = kArenaAlignmentBytes / element_bytes;

  // The segments' parameters, in arena order.
  std::vector<std::vector<std::uint32_t>> groups;
  std::vector<std::uint32_t> group_units;
  if (sharding == Sharding::none) {
    groups.emplace_back();
    for (std::size_t i = params.size(); i-- > 0;) {
      groups.back().push_back(static_cast<std::uint32_t>(i));
    }
  } else if (sharding == Sharding::zero2) {
    std::vector<std::uint32_t> order;
    std::vector<std::size_t> sizes;
    std::vector<std::uint32_t> unit;
    for (std::size_t i = params.size(); i-- > 0;) {
      order.push_back(static_cast<std::uint32_t>(i));
      sizes.push_back(round_up(params[i].count, alignment));
      unit.push_back(registry.unit_index_of(ParamHandle{static_cast<std::uint32_t>(i)}));
    }
    const auto none = static_cast<std::uint32_t>(units.size());
    groups = bucket_groups(
        order, sizes, unit, none, cap_elements(first_bucket_bytes, element_bytes, alignment),
        cap_elements(bucket_bytes, element_bytes, alignment),
        last_bucket_bytes == 0 ? 0
                               : std::min(cap_elements(last_bucket_bytes, element_bytes, alignment),
                                          cap_elements(bucket_bytes, element_bytes, alignment)));
  } else {
    COHORT_EXPECTS(!units.empty(),
                   "ZeRO-3 gathers parameters a unit at a time, but the registry declares no unit; "
                   "declare the groups of parameters used together in forward order with "
                   "registry.add_unit(name, {handles...}) (a layer, a block)");
    for (std::size_t i = 0; i < params.size(); ++i) {
      COHORT_EXPECTS(
          registry.unit_index_of(ParamHandle{static_cast<std::uint32_t>(i)}) < units.size(),
          "ZeRO-3: parameter '" + params[i].name +
              "' belongs to no unit; every parameter must be in one "
              "(registry.add_unit(name, {handles...}))");
    }
    for (std::size_t u = units.size(); u-- > 0;) {
      std::vector<std::uint32_t> members;
      for (const ParamHandle handle : units[u].params) members.push_back(handle.index);
      std::sort(members.begin(), members.end(), std::greater<>());
      groups.push_back(std::move(members));
      group_units.push_back(static_cast<std::uint32_t>(u));
    }
  }

  layout.slots.resize(params.size());
  layout.segment_of.resize(params.size());
  std::size_t offset = 0;
  std::size_t shard_offset = 0;
  for (std::size_t g = 0; g < groups.size(); ++g) {
    ShardSegment segment;
    segment.slice.offset = offset;
    segment.params = groups[g];
    segment.unit = group_units.empty() ? static_cast<std::uint32_t>(units.size()) : group_units[g];
    for (const std::uint32_t i : groups[g]) {
      layout.slots[i] = ArenaSlice{offset, params[i].count};
      layout.segment_of[i] = static_cast<std::uint32_t>(g);
      offset = round_up(offset + params[i].count, alignment);
      layout.used_count = offset;
    }
    offset = segment.slice.offset + round_up(offset - segment.slice.offset, alignment * ranks);
    segment.slice.count = offset - segment.slice.offset;
    segment.piece_count = segment.slice.count / ranks;
    segment.shard_offset = shard_offset;
    shard_offset += segment.piece_count;
    layout.segments.push_back(std::move(segment));
  }
  layout.arena_count = offset;
  layout.shard_count = shard_offset;
  if (sharding == Sharding::none) {
    COHORT_CHECK(layout.arena_count == plain.arena_count && layout.slots == plain.slots, Error,
                 "make_shard_layout: the one-segment layout differs from the plain arena");
  }
  return layout;
}

}  // namespace cohort
