#pragma once

/// @file
/// `BucketPlan`: where each parameter lives in the flat arenas and how the gradient arena is cut
/// into buckets. A pure function of the registry, the world size and two caps, so every rank
/// computes the same plan.
///
/// Note [Arena layout]
/// Parameters are laid out in reverse registration order (the last registered, whose gradient
/// backward produces first, at offset 0), each starting at a multiple of 256 bytes
/// (`kArenaAlignmentBytes`). The arena's total is padded up to a multiple of
/// world size x 256 bytes, so that it splits into `world_size` equal, aligned, contiguous shards
/// (ZeRO-1). Gaps and padding hold zeros and belong to no parameter. So the arena's size depends
/// on the world size: one f32 tensor of 161 elements takes 192 elements (three 256-byte units)
/// on 1 rank and 256 on 4 (docs/getting-started.md, "Memory").
///
/// Note [Buckets]
/// Buckets are contiguous slices of the whole (padded) arena, in arena order, covering it exactly.
/// The first is at most `first_bucket_bytes`, the last at most `last_bucket_bytes`, the others at
/// most `bucket_bytes`; the caps are rounded down to a multiple of 256 bytes (at least 256), so
/// every bucket starts aligned. A bucket may begin or end inside a parameter: it is ready when
/// every parameter that overlaps it is. Bucket 0 holds the gradients backward produces first and
/// starts communication early; the last bucket holds the gradients backward produces at its very
/// end, whose all-reduce nothing is left to hide, so a small last cap keeps that exposed time
/// short.

#include <cohort/ddp/param_registry.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace cohort {

/// Alignment of every parameter's slice and of every bucket and shard (Note [Arena layout]).
inline constexpr std::size_t kArenaAlignmentBytes = 256;

/// The default bucket caps (`DataParallelOptions`; Note [Buckets]).
inline constexpr std::size_t kDefaultBucketBytes = std::size_t{25} << 20;
inline constexpr std::size_t kDefaultFirstBucketBytes = std::size_t{1} << 20;
inline constexpr std::size_t kDefaultLastBucketBytes = std::size_t{1} << 20;

/// Elements [offset, offset + count) of an arena.
struct ArenaSlice {
  std::size_t offset = 0;
  std::size_t count = 0;
  friend constexpr bool operator==(const ArenaSlice&, const ArenaSlice&) noexcept = default;
};

struct Bucket {
  ArenaSlice slice;
  /// The parameters that overlap the bucket (registration indices), in arena order.
  std::vector<std::uint32_t> params;
};

struct BucketPlan {
  DType dtype = DType::f32;  ///< the arena's element type (every parameter's)
  int world_size = 1;
  std::vector<ArenaSlice> slots;  ///< per parameter, by registration index
  std::size_t used_count = 0;     ///< elements up to the end of the last parameter's aligned slot
  std::size_t arena_count = 0;    ///< elements in the padded arena: a multiple of world_size
  std::size_t shard_count = 0;    ///< arena_count / world_size
  std::vector<Bucket> buckets;
  /// Per parameter, the buckets it overlaps (ascending).
  std::vector<std::vector<std::uint32_t>> param_buckets;

  std::size_t arena_bytes() const noexcept { return arena_count * size_of(dtype); }

  /// One line per bucket: "bucket 0: [0, 262144) 1.00 MiB, 3 params".
  std::string describe() const;
};

/// The arena layout alone (slots, used, arena and shard counts; the buckets of the default
/// caps): what a program that brings its own arena memory needs to allocate and place its
/// tensors (Note [Your own arenas] in data_parallel.hpp). The slots do not depend on the caps.
/// @throws InvalidArgument as `make_bucket_plan`.
BucketPlan arena_layout(const ParamRegistry& registry, int world_size);

/// Plans the arena and its buckets (Notes [Arena layout], [Buckets]).
/// @throws InvalidArgument for an empty registry, parameters of different dtypes (naming the
///         first that differs from the first parameter), a world size below 1, or a cap of 0.
/// A `last_bucket_bytes` of 0 gives the last bucket no cap of its own (`bucket_bytes`).
BucketPlan make_bucket_plan(const ParamRegistry& registry, int world_size, std::size_t bucket_bytes,
                            std::size_t first_bucket_bytes, std::size_t last_bucket_bytes = 0);

}  // namespace cohort
