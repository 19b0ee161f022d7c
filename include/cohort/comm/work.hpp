#pragma once

/// @file
/// `Work`: a handle to one collective in flight.

#include <cohort/comm/types.hpp>

#include <chrono>
#include <cstdint>
#include <memory>

namespace cohort {

namespace detail {
class WorkState;
}

/// Returned by every collective. Copies refer to the same operation.
///
/// The collective is ordered on the stream it was issued on (see `Communicator`), so most code
/// never waits on a `Work`: later work on that stream runs after it. `wait()` is for the host:
/// it blocks until the operation has finished and rethrows its error.
class Work {
 public:
  Work() = default;
  explicit Work(std::shared_ptr<detail::WorkState> state) : state_(std::move(state)) {}

  /// Whether the operation has finished, successfully or not. Never blocks.
  bool done() const;

  /// Blocks until the operation has finished; rethrows its error (a TimeoutError when its
  /// deadline passed, naming the ranks that had not arrived). When it throws, the host backend
  /// no longer touches the operation's buffers, so they may be freed: it waits for that up to 4 s
  /// past the failure, and says so on standard error if that is not enough.
  void wait() const;

  /// As `wait()`, giving up after `timeout`.
  /// @throws TimeoutError when the operation is still running then (it goes on running; the
  ///         communicator's own deadline still applies).
  void wait(std::chrono::milliseconds timeout) const;

  /// The operation's sequence number on its communicator (0 for a Work that holds nothing).
  std::uint64_t sequence() const noexcept;
  CollectiveOp op() const noexcept;

 private:
  std::shared_ptr<detail::WorkState> state_;
};

}  // namespace cohort
