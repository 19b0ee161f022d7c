#pragma once

// Note [Slot rings]
// The sharded modes hold whole buckets (ZeRO-2's gradients) and whole units (ZeRO-3's gathered
// parameters and gradients) only while they are in flight, in a few buffers of the largest size
// reused in turn: a slot is taken by the stream that writes it next and given back on the stream
// that last uses it, and the taker's stream waits for that point (an event recorded at the
// release), so reuse is ordered on the streams and the host never blocks for it (except on a host
// stream that runs tasks on the caller, where waiting is what a wait is). The oldest slot given
// back is taken first, leaving the most time for its last use to finish. When a program holds
// more at once than the ring has, the ring grows by one slot (allocated then, kept after): the
// memory then is what the program holds, not what cohort planned, and the ring says so once.

#include <cohort/core/stream.hpp>
#include <cohort/memory/buffer.hpp>
#include <cohort/memory/memory_report.hpp>
#include <cohort/memory/memory_resource.hpp>

#include <cstddef>
#include <deque>
#include <memory>
#include <string>
#include <vector>

namespace cohort::detail {

class SlotRing {
 public:
  /// `count` slots of `bytes` each from `resource`, accounted as `category`; `what` names them in
  /// the message when the ring grows.
  SlotRing(std::shared_ptr<MemoryResource> resource, std::size_t bytes, int count,
           MemoryCategory category, std::string what);

  /// Takes a free slot; `stream` (the slot's next writer) waits until its last user gave it back.
  int acquire(const Stream& stream);
  /// Gives `slot` back once the work enqueued so far on `stream` is done.
  void release(int slot, const Stream& stream);

  void* data(int slot) const noexcept { return slots_[static_cast<std::size_t>(slot)].data; }
  std::size_t slot_bytes() const noexcept { return bytes_; }
  std::size_t size() const noexcept { return slots_.size(); }
  /// Slots taken and not given back.
  std::size_t taken() const noexcept { return slots_.size() - free_.size(); }

 private:
  struct Slot {
    Buffer buffer;
    void* data = nullptr;
    Event released;
  };
  void grow();

  std::shared_ptr<MemoryResource> resource_;
  std::size_t bytes_;
  MemoryCategory category_;
  std::string what_;
  std::vector<Slot> slots_;
  std::deque<int> free_;  ///< oldest release first
  bool grew_ = false;
};

}  // namespace cohort::detail
