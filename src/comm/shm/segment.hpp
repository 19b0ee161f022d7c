#pragma once

// Note [Shared-memory segment]
// One segment per shared-memory communicator, in /dev/shm. Rank 0 creates it under a name no
// other process can hold ("/cohort-shm.<uid>.<pid>.<n>": its pid is unique among live processes,
// O_EXCL checks it), reserves every byte with posix_fallocate (a full /dev/shm is then a clear
// error here rather than a SIGBUS inside a collective), and publishes the name through the
// communicator's store; the others attach, and rank 0 unlinks the name as soon as all have, so
// the memory goes away with the last mapping whichever way the processes end. What a crash can
// leave is a name whose creator died before everyone attached: every creation first removes
// names of this user's segments whose creator pid is gone.
//
// Layout, every flag on its own 128-byte line (two cache lines: adjacent-line prefetch):
//   header: magic, ranks, slot bytes, attach count | abort word | futex word, sleepers
//   per rank: pid | arrived | reduced | done           (u64 sequence numbers, never reset)
//   data: 2 buffers x ranks slots of slot-bytes each   (round s uses buffer s % 2)
// Flags are stored with release after the data they publish and loaded with acquire before it is
// read. A waiter spins briefly, then yields, then sleeps on the futex word with a short timeout
// (so that it still sees an abort, a dead peer or the deadline); a poster wakes the futex only
// when someone sleeps. See Note [Shared-memory collectives] for the protocol.

#include "comm/context.hpp"

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

namespace cohort::detail {

class ShmSegment {
 public:
  enum class Flag : int { arrived = 1, reduced = 2, done = 3 };
  using Clock = std::chrono::steady_clock;

  /// Creates (rank 0) or attaches to (the others) the segment of `context`. Collective.
  /// @throws Error naming /dev/shm when it lacks the space, TimeoutError when a member never
  ///         attaches.
  ShmSegment(CommContext& context, std::size_t slot_bytes);
  ~ShmSegment();
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;

  int ranks() const noexcept { return ranks_; }
  std::size_t slot_bytes() const noexcept { return slot_bytes_; }
  /// The slot of `rank` in buffer `buffer` (0 or 1).
  std::byte* slot(int buffer, int rank) const noexcept;

  /// Publishes `seq` on this rank's `flag` (release) and wakes sleepers.
  void post(Flag flag, std::uint64_t seq) noexcept;
  /// Waits until `rank`'s `flag` (every rank's when `rank` < 0) reaches `seq`. Throws when the
  /// segment is aborted, `context` is, a peer process died, or `deadline` passes.
  void wait(Flag flag, int rank, std::uint64_t seq, Clock::time_point deadline,
            const CommContext& context) const;

  /// Whether `rank`'s `flag` (every rank's when `rank` < 0) has reached `seq`, without waiting.
  bool reached(Flag flag, int rank, std::uint64_t seq) const noexcept;

  /// The call this rank runs in round `seq` (Note [Shared-memory call signatures] in
  /// shm_collectives.cpp): written before it posts `arrived`, so a rank that has seen another's
  /// `arrived` of the same round reads that rank's call. One word per buffer, as the slots: a
  /// rank starts round seq + 1 while others still read round seq.
  void set_signature(std::uint64_t seq, std::uint64_t signature) noexcept;
  std::uint64_t signature(int rank, std::uint64_t seq) const noexcept;

  /// Marks the segment aborted and wakes every waiter of every rank. Safe from any thread.
  void abort(int by_rank) noexcept;

  /// The segment's name while it may still be linked (for messages).
  const std::string& name() const noexcept { return name_; }

 private:
  std::atomic_ref<std::uint64_t> flag(int rank, Flag flag) const noexcept;
  std::atomic_ref<std::uint32_t> word(std::size_t line, std::size_t offset) const noexcept;
  std::atomic_ref<std::uint64_t> signature_word(int rank, std::uint64_t seq) const noexcept;
  /// Throws if the segment or `context` is aborted or a process we wait for died: a
  /// TimeoutError when another rank aborted the segment after `deadline`.
  void check_health(Flag flag, int rank, std::uint64_t seq, Clock::time_point deadline,
                    const CommContext& context) const;
  void wake_all() const noexcept;

  std::string name_;
  int ranks_ = 0;
  int rank_ = 0;
  std::size_t slot_bytes_ = 0;
  std::size_t bytes_ = 0;
  std::byte* base_ = nullptr;
  bool single_process_ = true;              // every member lives in this process (ranks as threads)
  int spin_ = 0;                            // pause iterations before yielding
  std::chrono::microseconds yield_for_{0};  // yielding before sleeping on the futex
};

/// Removes /dev/shm segments of this user that cohort created in a process that no longer
/// exists. Returns how many it removed. Never throws.
int remove_stale_shm_segments() noexcept;

}  // namespace cohort::detail
