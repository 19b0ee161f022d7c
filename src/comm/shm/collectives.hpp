#pragma once

// Note [Shared-memory collectives]
// Every collective is a sequence of rounds; each round takes the next sequence number s (the
// same on every rank, since every rank issues the same collectives) and uses buffer s % 2 of the
// segment, one slot per rank. A rank writes its slot only once every rank has posted `done` for
// round s - 2, the last round that used the buffer; so two rounds can be in flight and a rank
// that finishes early starts copying the next chunk while the others still read.
// - all-reduce, small (up to kSmallBytes): copy in, post `arrived`, wait for every rank, reduce
//   all slots in rank order into the output (every rank computes the same bits), post `done`.
// - all-reduce, large: chunks of 64-512 KiB; after `arrived`, rank r reduces its 1/n share of the
//   chunk (its own part from its input, the others' from their slots), writes it to its output
//   and into its own slot, posts `reduced`; it copies each other share out once that share's
//   rank posted `reduced` (reduce-scatter + all-gather; Note [Chunked shared-memory all-reduce]).
// - reduce-scatter: chunk c of each rank's n blocks goes side by side in the slot; rank r
//   reduces block r of every slot. all-gather: copy in, then copy every slot out. broadcast:
//   the root copies in; the others copy out. barrier: `arrived` and wait.

#include "comm/context.hpp"
#include "comm/shm/segment.hpp"

#include <cohort/comm/communicator.hpp>

#include <cstdint>
#include <memory>
#include <vector>

namespace cohort::detail {

class ShmEngine {
 public:
  /// Bytes of one slot: the chunk of a pipelined collective.
  static constexpr std::size_t kSlotBytes = std::size_t{1} << 20;
  /// All-reduces up to this size take one round with one wait.
  static constexpr std::size_t kSmallBytes = std::size_t{32} << 10;
  /// The chunks of a larger all-reduce (Note [Chunked shared-memory all-reduce]): a quarter of
  /// the all-reduce, rounded down to a power of two, at least kMinChunkBytes and at most
  /// kMaxChunkBytes. The same on every rank, since every rank reduces the same size.
  static constexpr std::size_t kMinChunkBytes = std::size_t{64} << 10;
  static constexpr std::size_t kMaxChunkBytes = std::size_t{512} << 10;
  static_assert(kMaxChunkBytes <= kSlotBytes, "an all-reduce chunk must fit a slot");
  static constexpr std::size_t all_reduce_chunk_bytes(std::size_t bytes) noexcept {
    std::size_t chunk = kMinChunkBytes;
    while (chunk < kMaxChunkBytes && chunk * 8 <= bytes) {
      chunk *= 2;
    }
    return chunk;
  }

  /// Opens the segment of `context` (none for a single rank). Collective.
  explicit ShmEngine(CommContext& context);

  /// Runs one collective on the calling thread; throws on failure (abort, dead peer, deadline).
  void execute(const Communicator::Call& call, ShmSegment::Clock::time_point deadline,
               const CommContext& context);

  /// Aborts the segment for every rank (wakes their waits).
  void abort(int rank) noexcept;

 private:
  /// Takes the next round's sequence number once this rank may write its slot of the round's
  /// buffer (every rank is done with the round that used it last).
  std::uint64_t begin_round(ShmSegment::Clock::time_point deadline, const CommContext& context);
  /// Fails naming the rank when `rank`'s call (every rank's when negative) in round `seq`
  /// differs from this one's (Note [Shared-memory call signatures]).
  void check_signatures(int rank, std::uint64_t seq, const CommContext& context) const;
  template <typename T>
  void run_typed(const Communicator::Call& call, ShmSegment::Clock::time_point deadline,
                 const CommContext& context);

  int rank_ = 0;
  int ranks_ = 1;
  std::unique_ptr<ShmSegment> segment_;
  std::uint64_t sequence_ = 0;
  std::uint64_t signature_ = 0;     // the call being executed
  std::vector<bool> share_copied_;  // per rank, within one chunk of an all-reduce
};

}  // namespace cohort::detail
