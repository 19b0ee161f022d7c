#pragma once

// Who aborts the NCCL communicators of a cohort communicator that was never finished (Note
// [Communicators made halfway] in communicator.cpp). No NCCL here: the rules are a template over
// the communicator handle and its abort, so the host tests check them with a fake
// (tests/comm/test_held_comms.cpp); NcclCommunicator::Handle holds ncclComm_t with ncclCommAbort.

#include <utility>

namespace cohort::detail {

/// The two communicators of one cohort communicator, `control` (made first) and `comm` (split
/// from it). Whatever is held when the holder is destroyed is aborted, `comm` first, unless it
/// was aborted already or released (destroyed by its owner). Not thread-safe: the owner locks.
template <typename Comm, void (*Abort)(Comm)>
class HeldComms {
 public:
  HeldComms() = default;
  ~HeldComms() { abort_held(); }
  HeldComms(const HeldComms&) = delete;
  HeldComms& operator=(const HeldComms&) = delete;

  Comm control{};
  Comm comm{};

  /// Aborts both (`comm` first), once: later calls, and the destructor, do nothing.
  void abort_held() noexcept {
    if (aborted_) return;
    aborted_ = true;
    if (comm) Abort(comm);
    if (control) Abort(control);
  }
  bool aborted() const noexcept { return aborted_; }

  /// The owner destroyed them (or never made any): nothing is left to abort.
  void release() noexcept {
    comm = Comm{};
    control = Comm{};
    aborted_ = true;
  }

 private:
  bool aborted_ = false;
};

}  // namespace cohort::detail
