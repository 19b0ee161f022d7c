#pragma once

/// @file
/// `ShardLayout`: which elements of the arena each rank owns, in every data-parallel mode. A pure
/// function of the registry (its parameters and units), the world size, the mode and, for ZeRO-2,
/// the bucket caps, so every rank computes the same layout, and a checkpoint can recompute the
/// layout it was saved with and re-split its state for another.
///
/// Note [Shard layout]
/// The arena (Note [Arena layout] in bucket_plan.hpp) is cut into segments: contiguous runs of
/// whole parameters, each padded at its end to a multiple of world size x 256 bytes. Rank r owns
/// the r-th 1/world-size of every segment, its *piece*; its *shard* is its pieces side by side,
/// in segment order. So for every mode, arena elements [segment.slice.offset + r x piece, +
/// piece) are shard elements [segment.shard_offset, + piece) (piece = segment.piece_count),
/// and a segment's reduce-scatter (input: the segment, output: this rank's piece) and all-gather
/// (the reverse) need no copy and no rearrangement.
/// - `Sharding::none` (plain data parallel and ZeRO-1): one segment, the whole arena. Its pieces
///   are the ZeRO-1 shards [r x n, (r + 1) x n), as before segments existed.
/// - `Sharding::zero2`: the segments are the gradient buckets, cut at parameter boundaries (a
///   bucket of ZeRO-2 is reduce-scattered on its own, into a buffer where backward wrote whole
///   parameters), with the same three caps as the buckets of plain data parallel. A bucket is
///   never cut inside a unit of the registry (backward writes a unit's gradients together, and a
///   unit split in two would hold two buckets open at once), and a parameter larger than its cap
///   ends the bucket it joins (a layer's bias stays with its weight even without units).
/// - `Sharding::zero3`: the segments are the registry's units, in reverse declaration order (the
///   unit backward reaches first at offset 0, as parameters are laid out in reverse registration
///   order), each unit's parameters in reverse registration order within it.
/// The optimizer state of a rank is indexed like its shard, so every value of it belongs to one
/// arena element, hence to one parameter (`slots`): state can be saved per parameter and re-split
/// across modes and world sizes.

#include <cohort/ddp/bucket_plan.hpp>
#include <cohort/ddp/param_registry.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace cohort {

/// How `DataParallel` keeps parameters, gradients and optimizer state across ranks.
enum class Sharding : std::uint8_t {
  /// Every rank holds every parameter and gradient (plain data parallel; with
  /// `GradientSync::reduce_scatter` and a `ShardedOptimizer`, ZeRO-1).
  none,
  /// ZeRO-2: every rank holds every parameter; gradients are reduce-scattered bucket by bucket as
  /// backward produces them, and each rank keeps only its shard of them and of the optimizer state.
  zero2,
  /// ZeRO-3 (fully sharded): parameters, gradients and optimizer state live in shards; the
  /// program gathers a unit of parameters before using it and releases it after.
  zero3,
};

/// "none", "zero2" or "zero3".
std::string_view to_string(Sharding sharding) noexcept;

/// A run of whole parameters that is sharded as one (Note [Shard layout]).
struct ShardSegment {
  ArenaSlice slice;                   ///< of the arena; a multiple of world size x 256 bytes
  std::size_t piece_count = 0;        ///< slice.count / world size: each rank's part of it
  std::size_t shard_offset = 0;       ///< where every rank's piece of it starts in its shard
  std::vector<std::uint32_t> params;  ///< registration indices, in arena order
  /// The unit it holds (ZeRO-3), in declaration order; the unit count otherwise.
  std::uint32_t unit = 0;
};

/// One of a rank's pieces: arena elements [arena_offset, + count) are its shard elements
/// [shard_offset, + count).
struct ShardPiece {
  std::size_t arena_offset = 0;
  std::size_t shard_offset = 0;
  std::size_t count = 0;
  friend constexpr bool operator==(const ShardPiece&, const ShardPiece&) noexcept = default;
};

/// Buffers in flight: ZeRO-2's bucket ring (the default of `DataParallelOptions::
/// buckets_in_flight`), ZeRO-3's gathered units (each with a gradient buffer in backward). A
/// program that holds more at once makes the ring grow (Note [Slot rings]).
inline constexpr int kDefaultBucketsInFlight = 1;
inline constexpr int kUnitsInFlight = 2;

struct ShardLayout {
  Sharding sharding = Sharding::none;
  int world_size = 1;
  DType dtype = DType::f32;
  std::vector<ArenaSlice> slots;          ///< per parameter, by registration index
  std::vector<std::uint32_t> segment_of;  ///< per parameter, the segment that holds it
  std::size_t used_count = 0;   ///< elements up to the end of the last parameter's aligned slot
  std::size_t arena_count = 0;  ///< the padded arena: the sum of the segments
  std::size_t shard_count = 0;  ///< arena_count / world_size: one rank's shard
  std::vector<ShardSegment> segments;  ///< in arena order, covering it exactly

  /// `rank`'s pieces, one per segment, in shard order.
  std::vector<ShardPiece> pieces(int rank) const;
  /// The most elements of any segment (the largest bucket or unit).
  std::size_t largest_segment() const noexcept;
  /// Bytes one rank's `DataParallel` holds in this layout, the optimizer's state aside:
  /// parameters, gradients and the buffers in flight (ZeRO-2's buckets, ZeRO-3's two gathered
  /// units with their gradients).
  std::size_t rank_bytes(int buckets_in_flight = kDefaultBucketsInFlight) const noexcept;
  /// The arena as a bucket plan whose buckets are the segments (what `DataParallel::plan()`
  /// returns in the sharded modes).
  BucketPlan as_bucket_plan() const;
  /// One line per segment: "segment 0: [0, 65536) 256.00 KiB, 2 params, unit 'fc2'".
  std::string describe() const;
};

/// The layout of `sharding` on `world_size` ranks (Note [Shard layout]). The caps shape ZeRO-2's
/// segments only (rounded as bucket caps are; `last_bucket_bytes` 0: no cap of its own).
/// @throws InvalidArgument as `make_bucket_plan`, and for ZeRO-3 when the registry declares no
///         unit or a parameter belongs to none (naming it and saying how to declare one).
ShardLayout make_shard_layout(const ParamRegistry& registry, int world_size, Sharding sharding,
                              std::size_t bucket_bytes = kDefaultBucketBytes,
                              std::size_t first_bucket_bytes = kDefaultFirstBucketBytes,
                              std::size_t last_bucket_bytes = kDefaultLastBucketBytes);

}  // namespace cohort
