#pragma once

// The shared state behind a Work, completed by the backend or failed by the backend or the
// watchdog, whichever comes first.

#include <cohort/comm/communicator.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>

namespace cohort::detail {

class FlightRecorder;

class WorkState {
 public:
  using Clock = std::chrono::steady_clock;

  /// A collective issued at `issued_at`: the same clock reading as its flight recorder entry, so
  /// that every age and duration said of it is measured from one instant (Note [One clock for a
  /// collective]).
  WorkState(CollectiveRecord record, Clock::time_point issued_at, Clock::time_point deadline,
            std::shared_ptr<FlightRecorder> recorder);
  /// Issued now.
  WorkState(CollectiveRecord record, Clock::time_point deadline,
            std::shared_ptr<FlightRecorder> recorder);

  /// What was issued (its state and timing as issued; `describe` says them as of a moment).
  const CollectiveRecord& record() const noexcept { return record_; }
  Clock::time_point issued_at() const noexcept { return issued_at_; }
  /// The record as of `now`: its state, its age (in flight) or its duration (finished).
  CollectiveRecord record_at(Clock::time_point now);
  /// "#12 all_reduce ... : in flight for 1513 ms", as of `now`.
  std::string describe(Clock::time_point now = Clock::now());
  Clock::time_point deadline() const noexcept { return deadline_; }

  /// For backends whose completion must be polled (a CUDA event): returns true once finished.
  /// Set at most once, before the Work is handed out, possibly while the watchdog already polls
  /// the work (which sees no probe until it is set); called by `done()` and the watchdog.
  void set_completion_probe(std::function<bool()> probe) {
    probe_ = std::move(probe);
    has_probe_.store(true, std::memory_order_release);
  }

  /// Marks success; ignored when the work already failed. Returns whether it took effect.
  bool complete();
  /// The instant this work fails at, for everything said of its failure: `now` the first time
  /// it is asked, the same instant after (Note [One clock for a collective]).
  Clock::time_point failure_instant(Clock::time_point now);
  /// Marks failure with `error`, at `at` (the instant its error describes); ignored when the work
  /// already finished. Returns whether it took effect (the first failure wins, so the most
  /// informative one should come first).
  bool fail(std::exception_ptr error, Clock::time_point at = Clock::now());

  /// Note [Buffers after a failure]: a host backend runs the collective on a thread of its own,
  /// while the watchdog may fail the work at its deadline, and an abort then makes that thread
  /// leave the collective only at its next check (a shared-memory wait and Gloo's: at once, Note
  /// [Aborting Gloo]). The caller, told of the failure, frees its buffers
  /// while unwinding. So a work whose backend thread uses the caller's buffers is marked `held`
  /// before it is handed out, and `release()`d when that thread no longer touches them; waits
  /// for the work return only after that (`wait_released`), at most `kReleasePatience` later.
  void hold() { held_.store(true, std::memory_order_relaxed); }
  void release();
  /// After the work finished: waits until its buffers are released or `patience` passes; says
  /// so on standard error in the second case. Returns whether they were released.
  bool wait_released(Clock::duration patience);
  /// Waits until finished (or `until`), then for the buffers when it failed. Returns whether it
  /// finished.
  bool wait_finished_and_released(Clock::time_point until);

  /// Whether finished, polling the probe if any.
  bool done();
  /// Whether finished, without polling: what is known now. Safe under any lock.
  bool finished();
  /// Blocks until finished or `until`; returns whether finished. Polls the probe when set.
  bool wait_until(Clock::time_point until);
  /// Rethrows the failure, if any.
  void rethrow_if_failed();

 private:
  void finish_locked(CollectiveRecord::State state, Clock::time_point at);

  CollectiveRecord record_;
  Clock::time_point issued_at_;
  Clock::time_point finished_at_{};                   // guarded by mutex_; set once done_
  std::optional<Clock::time_point> failure_instant_;  // guarded by mutex_
  CollectiveRecord::State state_ = CollectiveRecord::State::issued;  // guarded by mutex_
  Clock::time_point deadline_;
  std::shared_ptr<FlightRecorder> recorder_;
  std::function<bool()> probe_;
  std::atomic<bool> has_probe_{false};  // probe_ is written once, before this turns true

  std::mutex mutex_;
  std::condition_variable finished_;
  bool done_ = false;
  std::exception_ptr error_;
  std::atomic<bool> held_{false};  // guarded by mutex_ once the work is handed out
  std::condition_variable released_;
};

/// How long a wait for a failed work waits for its backend thread to release the caller's
/// buffers: longer than the grace after which a Gloo operation ends (kGlooGrace, 2 s). A worker's
/// stop after an abort waits as long (kAbortedWorkerPatience is this).
inline constexpr std::chrono::milliseconds kReleasePatience{4000};

}  // namespace cohort::detail
