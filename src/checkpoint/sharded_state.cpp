// ZeRO-2 and ZeRO-3 state in checkpoints: the same files as plain data parallel's, so that any
// mode on any number of ranks loads what any other saved.
//
// Note [Sharded checkpoints]
// A checkpoint's arrays are in the plain arena's order (Note [Checkpoint arrays] in manifest.hpp),
// cut into one slice per rank: [r x n, (r + 1) x n) with n the plain shard size. The sharded modes
// lay the arena out otherwise (Note [Shard layout]: segments padded at their ends, ZeRO-3's units
// in their own order), and a rank's shard is its pieces of every segment. So a Checkpointer of
// ZeRO-2 or ZeRO-3 state keeps, per array, a buffer of this rank's slice in checkpoint order, and
// moves the state in and out of it with collectives:
//   - before a save, `to_checkpoint_order`: the ranks reduce-scatter windows of the plain arena,
//     each rank filling the elements it owns (its runs) and zeros elsewhere, summed as bytes (u8):
//     exactly one rank holds each element and x + 0 is exact for bytes, so every rank receives
//     its slice bit for bit (a float sum would turn -0 into +0). The save then writes the slices
//     as plain data parallel writes its ZeRO-1 shards: the files are the same;
//   - after a load has read, checked and agreed on the slices (a live load touches no state before
//     that, a start-up load no more than the slices), `from_checkpoint_order`: the ranks
//     all-gather the windows and each copies out the elements it owns. ZeRO-2 then all-gathers
//     its updated parameters (`params_updated`), and ZeRO-3 fetches its first unit again.
// The windows are at most kWindowBytes per rank, so the memory this takes beside the state is the
// slices (one more copy of this rank's share of each array) and N windows.
// Only the elements of parameters move: the alignment gaps between the plain arena's slots are
// zero in a checkpoint saved from a sharded mode.

#include "checkpointer_impl.hpp"

#include <cohort/memory/detail/stream_copy.hpp>
#include <cohort/memory/device_pool.hpp>
#include <cohort/memory/host_resource.hpp>

#include <algorithm>

namespace cohort {
namespace detail {

std::vector<ShardedRun> sharded_runs(const ShardLayout& layout, const BucketPlan& plain, int rank) {
  std::vector<ShardedRun> runs;
  const auto r = static_cast<std::uint64_t>(rank);
  for (std::size_t p = 0; p < layout.slots.size(); ++p) {
    const ArenaSlice slot = layout.slots[p];
    const ShardSegment& segment = layout.segments[layout.segment_of[p]];
    const std::uint64_t piece_begin = segment.slice.offset + r * segment.piece_count;
    const std::uint64_t begin = std::max<std::uint64_t>(slot.offset, piece_begin);
    const std::uint64_t end =
        std::min<std::uint64_t>(slot.offset + slot.count, piece_begin + segment.piece_count);
    if (begin >= end) continue;
    runs.push_back(ShardedRun{plain.slots[p].offset + (begin - slot.offset), begin,
                              segment.shard_offset + (begin - piece_begin), end - begin});
  }
  std::sort(runs.begin(), runs.end(),
            [](const ShardedRun& a, const ShardedRun& b) { return a.checkpoint < b.checkpoint; });
  std::vector<ShardedRun> merged;
  for (const ShardedRun& run : runs) {
    if (!merged.empty()) {
      ShardedRun& last = merged.back();
      if (last.checkpoint + last.count == run.checkpoint && last.arena + last.count == run.arena &&
          last.shard + last.count == run.shard) {
        last.count += run.count;
        continue;
      }
    }
    merged.push_back(run);
  }
  return merged;
}

namespace {

constexpr std::uint64_t kWindowBytes = std::uint64_t{8} << 20;

/// Calls `each(run, from, to)` for the part [from, to) of every run of `runs` inside [begin, end)
/// (checkpoint elements).
template <typename Each>
void for_runs_in(const std::vector<ShardedRun>& runs, std::uint64_t begin, std::uint64_t end,
                 Each&& each) {
  auto it = std::upper_bound(
      runs.begin(), runs.end(), begin,
      [](std::uint64_t at, const ShardedRun& run) { return at < run.checkpoint + run.count; });
  for (; it != runs.end() && it->checkpoint < end; ++it) {
    const std::uint64_t from = std::max(begin, it->checkpoint);
    const std::uint64_t to = std::min(end, it->checkpoint + it->count);
    if (from < to) each(*it, from, to);
  }
}

std::shared_ptr<MemoryResource> resource_for(const Device& device) {
  if (device.is_host()) return std::make_shared<HostResource>();
  return make_device_pool_resource({.device = device.index()});
}

}  // namespace
}  // namespace detail

void Checkpointer::Impl::set_up_sharded() {
  const int rank = dp.world().rank();
  const BucketPlan plain = detail::checkpoint_plan(dp);
  sharded = std::make_unique<detail::ShardedState>();
  detail::ShardedState& state = *sharded;
  state.slice_count = plain.shard_count;
  state.used_count = plain.used_count;
  state.runs = detail::sharded_runs(dp.shard_layout(), plain, rank);
  const std::shared_ptr<MemoryResource> resource =
      detail::resource_for(dp.compute_stream().device());
  const bool zero2 = dp.options().sharding == Sharding::zero2;
  for (detail::CheckpointArray& array : arrays) {
    const bool by_arena = zero2 && array.name == "params";
    const std::uint64_t expected =
        by_arena ? dp.shard_layout().arena_count : dp.shard_layout().shard_count;
    COHORT_EXPECTS(array.view.count() >= expected,
                   "checkpoint array " + array.name + " holds " +
                       std::to_string(array.view.count()) + " elements, fewer than the " +
                       std::to_string(expected) + " of this rank's " +
                       (by_arena ? "arena" : "shard"));
    state.states.push_back(array.view);
    state.by_arena.push_back(by_arena);
    const std::size_t bytes = state.slice_count * size_of(array.dtype);
    state.slices.emplace_back(resource, std::max<std::size_t>(bytes, 1), MemoryCategory::other);
    array.count = state.used_count;
    array.view = TensorView(state.slices.back().data(), state.slice_count, array.dtype,
                            dp.compute_stream().device());
    array.view_offset = state.slice_count * static_cast<std::uint64_t>(rank);
  }
}

namespace detail {
namespace {

/// Moves every array between the state and the slices (Note [Sharded checkpoints]), window by
/// window: `to_slices` reduce-scatters windows filled from the state, else all-gathers the slices
/// into windows and copies out of them. Collective; returns once the stream has finished it.
void move_state(const ShardedState& state, const std::vector<CheckpointArray>& arrays,
                Communicator& comm, const Stream& stream, bool to_slices) {
  const std::uint64_t ranks = static_cast<std::uint64_t>(comm.size());
  const std::uint64_t n = state.slice_count;
  Buffer window;
  for (std::size_t a = 0; a < arrays.size(); ++a) {
    const std::size_t element = size_of(arrays[a].dtype);
    const std::uint64_t per_round = std::max<std::uint64_t>(1, kWindowBytes / element);
    auto* local = static_cast<unsigned char*>(state.states[a].data());
    auto* slice = static_cast<unsigned char*>(arrays[a].view.data());
    for (std::uint64_t at = 0; at < n; at += per_round) {
      const std::uint64_t count = std::min(per_round, n - at);
      const std::size_t block = count * element;
      if (window.size_bytes() < block * ranks) {
        stream.synchronize();  // the previous window's copies are done
        window = Buffer(resource_for(stream.device()), block * ranks, MemoryCategory::other);
      }
      auto* bytes = static_cast<unsigned char*>(window.data());
      const TensorView windows(bytes, block * ranks, DType::u8, stream.device());
      const TensorView mine(slice + at * element, block, DType::u8, stream.device());
      if (to_slices) {
        zero_async(windows, stream);
      } else {
        comm.all_gather(mine, windows, stream).wait();
      }
      for (std::uint64_t d = 0; d < ranks; ++d) {
        const std::uint64_t begin = d * n + at;
        for_runs_in(state.runs, begin, std::min(begin + count, state.used_count),
                    [&](const ShardedRun& run, std::uint64_t from, std::uint64_t to) {
                      unsigned char* in_window = bytes + d * block + (from - begin) * element;
                      unsigned char* in_state =
                          local +
                          ((state.by_arena[a] ? run.arena : run.shard) + (from - run.checkpoint)) *
                              element;
                      const std::size_t size = (to - from) * element;
                      if (to_slices) {
                        copy_async(in_window, in_state, size, stream);
                      } else {
                        copy_async(in_state, in_window, size, stream);
                      }
                    });
      }
      if (to_slices) comm.reduce_scatter(windows, mine, ReduceOp::sum, stream).wait();
    }
  }
  stream.synchronize();
}

}  // namespace
}  // namespace detail

void Checkpointer::Impl::to_checkpoint_order() {
  detail::move_state(*sharded, arrays, dp.comm(), dp.compute_stream(), /*to_slices=*/true);
}

void Checkpointer::Impl::from_checkpoint_order() {
  dp.settle_for_overwrite();
  detail::move_state(*sharded, arrays, dp.comm(), dp.compute_stream(), /*to_slices=*/false);
  dp.params_updated();
}

}  // namespace cohort
