#include "comm/shm/collectives.hpp"

#include "comm/call_signature.hpp"
#include "comm/shm/reduce.hpp"

#include <cohort/core/error.hpp>

#include <algorithm>
#include <cstring>
#include <vector>

namespace cohort::detail {
namespace {

// The chunk choice of Note [Chunked shared-memory all-reduce], at the sizes it was measured at.
static_assert(ShmEngine::all_reduce_chunk_bytes(std::size_t{33} << 10) == std::size_t{64} << 10);
static_assert(ShmEngine::all_reduce_chunk_bytes(std::size_t{256} << 10) == std::size_t{64} << 10);
static_assert(ShmEngine::all_reduce_chunk_bytes(std::size_t{512} << 10) == std::size_t{128} << 10);
static_assert(ShmEngine::all_reduce_chunk_bytes(std::size_t{1} << 20) == std::size_t{256} << 10);
static_assert(ShmEngine::all_reduce_chunk_bytes(std::size_t{4} << 20) == std::size_t{512} << 10);
static_assert(ShmEngine::all_reduce_chunk_bytes(std::size_t{64} << 20) == std::size_t{512} << 10);

using Flag = ShmSegment::Flag;
constexpr int kEveryRank = -1;

bool overlaps(const TensorView& a, const TensorView& b) {
  const auto* a_begin = static_cast<const std::byte*>(a.data());
  const auto* b_begin = static_cast<const std::byte*>(b.data());
  return a.bytes() > 0 && b.bytes() > 0 && a_begin < b_begin + b.bytes() &&
         b_begin < a_begin + a.bytes();
}

void copy(void* dst, const void* src, std::size_t bytes) {
  if (dst != src && bytes > 0) {
    std::memcpy(dst, src, bytes);
  }
}

}  // namespace

ShmEngine::ShmEngine(CommContext& context)
    : rank_(context.rank()),
      ranks_(context.size()),
      share_copied_(static_cast<std::size_t>(context.size()), false) {
  if (ranks_ > 1) {
    segment_ = std::make_unique<ShmSegment>(context, kSlotBytes);
  }
}

void ShmEngine::abort(int rank) noexcept {
  if (segment_) {
    segment_->abort(rank);
  }
}

std::uint64_t ShmEngine::begin_round(ShmSegment::Clock::time_point deadline,
                                     const CommContext& context) {
  const std::uint64_t seq = ++sequence_;
  if (seq > 2) {
    segment_->wait(Flag::done, kEveryRank, seq - 2, deadline, context);
  }
  segment_->set_signature(seq, signature_);
  return seq;
}

// Note [Shared-memory call signatures]
// Ranks that issue different collectives at the same point (an all_reduce against a broadcast,
// or another count) would otherwise run them against each other's slots: wrong results, or a
// hang until the deadline that blames nobody. So each round carries the call's signature (Note
// [Call signatures]) beside the rank's pid, written before the rank posts `arrived`; after
// waiting for the others' `arrived` (the root's, in a broadcast) a rank compares theirs with its
// own and fails, naming the rank and both calls, on a difference. The cost is a store and n loads
// per round.

void ShmEngine::check_signatures(int rank, std::uint64_t seq, const CommContext& context) const {
  for (int r = rank >= 0 ? rank : 0; r < (rank >= 0 ? rank + 1 : ranks_); ++r) {
    const std::uint64_t theirs = segment_->signature(r, seq);
    if (r != rank_ && theirs != signature_) {
      COHORT_FAIL(InvalidArgument,
                  "rank " + std::to_string(context.global_rank(r)) + " called " +
                      describe_signature(theirs) + " where rank " +
                      std::to_string(context.global_rank(rank_)) + " called " +
                      describe_signature(signature_) + " on " + context.describe() +
                      ": every rank must issue the same collectives, in the same order, with "
                      "the same counts, dtypes, reduce ops and roots");
    }
  }
}

void ShmEngine::execute(const Communicator::Call& call, ShmSegment::Clock::time_point deadline,
                        const CommContext& context) {
  signature_ = call_signature(call);
  if (call.op == CollectiveOp::barrier) {
    if (ranks_ > 1) {
      const std::uint64_t seq = begin_round(deadline, context);
      segment_->post(Flag::arrived, seq);
      segment_->wait(Flag::arrived, kEveryRank, seq, deadline, context);
      check_signatures(kEveryRank, seq, context);
      segment_->post(Flag::done, seq);
    }
    return;
  }
  visit_dtype(call.input.dtype(),
              [&](auto tag) { run_typed<decltype(tag)>(call, deadline, context); });
}

template <typename T>
void ShmEngine::run_typed(const Communicator::Call& call, ShmSegment::Clock::time_point deadline,
                          const CommContext& context) {
  const auto n = static_cast<std::size_t>(ranks_);
  const auto me = static_cast<std::size_t>(rank_);
  const auto* input = static_cast<const T*>(call.input.data());
  auto* output = static_cast<T*>(call.output.data());
  auto slot = [&](std::uint64_t seq, std::size_t rank) {
    return reinterpret_cast<T*>(segment_->slot(static_cast<int>(seq % 2), static_cast<int>(rank)));
  };
  const std::size_t slot_elements = ShmEngine::kSlotBytes / sizeof(T);

  if (ranks_ == 1) {
    // One rank: the result is its own input (avg divides by one).
    copy(output, input, call.output.bytes());
    return;
  }
  switch (call.op) {
    case CollectiveOp::all_reduce: {
      const std::size_t count = call.output.count();
      if (count * sizeof(T) <= kSmallBytes) {
        if (count == 0) {
          return;
        }
        const std::uint64_t seq = begin_round(deadline, context);
        copy(slot(seq, me), input, count * sizeof(T));
        segment_->post(Flag::arrived, seq);
        segment_->wait(Flag::arrived, kEveryRank, seq, deadline, context);
        check_signatures(kEveryRank, seq, context);
        reduce_sources<T>([&](int r) { return slot(seq, static_cast<std::size_t>(r)); }, ranks_,
                          count, call.reduce, output, nullptr);
        segment_->post(Flag::done, seq);
        return;
      }
      // Note [Chunked shared-memory all-reduce]
      // Rank r reduces share r of each chunk. Its own share it reads from its input, so it copies
      // in only the others' shares; the result goes to its output and into its slot, for the
      // others. It then copies out every other share whose rank has posted `reduced`, and waits
      // (yielding its core) only when none is ready, instead of waiting for every rank: with
      // more ranks than cores it copies from the ranks that ran while the rest still reduce
      // (256 KiB: 141-146 us against 148-167 us waiting for each in turn).
      // The chunk is a quarter of the all-reduce, between 64 KiB and 512 KiB
      // (ShmEngine::all_reduce_chunk_bytes): small chunks keep a chunk's slots in the cores'
      // caches and overlap one chunk's copy-in with another's reduction, large ones pay fewer
      // waits, each a switch between processes when ranks outnumber cores. Measured with 4
      // processes on 2 cores (medians, in place): on an Intel Xeon (2 MiB L2 a core, load 16-21)
      // 256 KiB took 140-147 us in 64 KiB chunks against 156-162 us in one, and 4 MiB 2.5-2.8
      // ms in 64 KiB chunks against 3.5-3.7 ms in 1 MiB ones; on an AMD EPYC (1 MiB L2 a core,
      // quiet; 6 rounds) 64 KiB chunks lost to Open MPI at 1 MiB (577 against 514 us) where
      // this choice gives 432 us, and 4 MiB 1.96 ms against 2.43 ms in 64 KiB chunks and 2.56
      // for Open MPI (docs/performance.md).
      const std::size_t chunk_elements = all_reduce_chunk_bytes(count * sizeof(T)) / sizeof(T);
      for (std::size_t offset = 0; offset < count; offset += chunk_elements) {
        const std::size_t chunk = std::min(chunk_elements, count - offset);
        auto share_begin = [&](std::size_t r) { return chunk * r / n; };
        const std::size_t begin = share_begin(me);
        const std::size_t end = share_begin(me + 1);
        const std::uint64_t seq = begin_round(deadline, context);
        T* mine = slot(seq, me);
        copy(mine, input + offset, begin * sizeof(T));
        copy(mine + end, input + offset + end, (chunk - end) * sizeof(T));
        segment_->post(Flag::arrived, seq);
        segment_->wait(Flag::arrived, kEveryRank, seq, deadline, context);
        check_signatures(kEveryRank, seq, context);
        reduce_sources<T>(
            [&](int r) {
              const auto rank = static_cast<std::size_t>(r);
              return rank == me ? input + offset + begin : slot(seq, rank) + begin;
            },
            ranks_, end - begin, call.reduce, output + offset + begin, mine + begin);
        segment_->post(Flag::reduced, seq);
        std::fill(share_copied_.begin(), share_copied_.end(), false);
        share_copied_[me] = true;  // in its output already
        for (std::size_t copied = 1; copied < n;) {
          std::size_t first_pending = 0;
          for (std::size_t step = 1; step < n; ++step) {
            const std::size_t r = (me + step) % n;
            if (share_copied_[r]) {
              continue;
            }
            if (!segment_->reached(Flag::reduced, static_cast<int>(r), seq)) {
              first_pending = first_pending == 0 ? step : first_pending;
              continue;
            }
            copy(output + offset + share_begin(r), slot(seq, r) + share_begin(r),
                 (share_begin(r + 1) - share_begin(r)) * sizeof(T));
            share_copied_[r] = true;
            ++copied;
          }
          if (copied < n) {
            segment_->wait(Flag::reduced, static_cast<int>((me + first_pending) % n), seq, deadline,
                           context);
          }
        }
        segment_->post(Flag::done, seq);
      }
      return;
    }
    case CollectiveOp::reduce_scatter: {
      const std::size_t count = call.output.count();
      const std::size_t block = slot_elements / n;
      for (std::size_t offset = 0; offset < count; offset += block) {
        const std::size_t chunk = std::min(block, count - offset);
        const std::uint64_t seq = begin_round(deadline, context);
        for (std::size_t r = 0; r < n; ++r) {
          copy(slot(seq, me) + r * chunk, input + r * count + offset, chunk * sizeof(T));
        }
        segment_->post(Flag::arrived, seq);
        segment_->wait(Flag::arrived, kEveryRank, seq, deadline, context);
        check_signatures(kEveryRank, seq, context);
        reduce_sources<T>(
            [&](int r) { return slot(seq, static_cast<std::size_t>(r)) + me * chunk; }, ranks_,
            chunk, call.reduce, output + offset, nullptr);
        segment_->post(Flag::done, seq);
      }
      return;
    }
    case CollectiveOp::all_gather: {
      const std::size_t count = call.input.count();
      // An input inside the output anywhere but at this rank's own block would be overwritten
      // before it is read: stage it.
      std::vector<T> staged;
      if (overlaps(call.input, call.output) && input != output + me * count) {
        staged.assign(input, input + count);
        input = staged.data();
      }
      for (std::size_t offset = 0; offset < count; offset += slot_elements) {
        const std::size_t chunk = std::min(slot_elements, count - offset);
        const std::uint64_t seq = begin_round(deadline, context);
        copy(slot(seq, me), input + offset, chunk * sizeof(T));
        segment_->post(Flag::arrived, seq);
        segment_->wait(Flag::arrived, kEveryRank, seq, deadline, context);
        check_signatures(kEveryRank, seq, context);
        for (std::size_t r = 0; r < n; ++r) {
          copy(output + r * count + offset, r == me ? input + offset : slot(seq, r),
               chunk * sizeof(T));
        }
        segment_->post(Flag::done, seq);
      }
      return;
    }
    case CollectiveOp::broadcast: {
      const std::size_t count = call.output.count();
      const auto root = static_cast<std::size_t>(call.root);
      for (std::size_t offset = 0; offset < count; offset += slot_elements) {
        const std::size_t chunk = std::min(slot_elements, count - offset);
        const std::uint64_t seq = begin_round(deadline, context);
        if (me == root) {
          copy(slot(seq, me), output + offset, chunk * sizeof(T));
          segment_->post(Flag::arrived, seq);
        } else {
          // Posted though no rank waits for it in a broadcast: ranks that issued another
          // collective at this round see it, check the signatures and name the mismatch
          // themselves, not only through this rank's report (Note [Shared-memory call
          // signatures]).
          segment_->post(Flag::arrived, seq);
          segment_->wait(Flag::arrived, call.root, seq, deadline, context);
          check_signatures(call.root, seq, context);
          copy(output + offset, slot(seq, root), chunk * sizeof(T));
        }
        segment_->post(Flag::done, seq);
      }
      return;
    }
    case CollectiveOp::barrier:
      return;
  }
}

}  // namespace cohort::detail
