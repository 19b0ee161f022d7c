#pragma once

// What the host backends (shared memory, Gloo) share: the worker thread that runs a
// communicator's operations in order, and the glue between a host stream and that thread.

#include "comm/context.hpp"
#include "comm/work_state.hpp"

#include <cohort/comm/communicator.hpp>
#include <cohort/core/detail/event_pool.hpp>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

namespace cohort::detail {

/// Note [Host worker teardown]
/// A communicator's destructor stops its worker: the worker finishes what is queued, then ends.
/// Without an abort the destructor joins it. After an abort the worker leaves its collective at
/// once on both host transports (a shared-memory wait checks the abort; Gloo's operations are
/// failed by it, Note [Aborting Gloo]); only a Gloo operation that the abort could not reach (a
/// transport other than TCP, or a receive already under way) waits for Gloo's own timeout, the
/// collective's deadline plus a grace. Joining unconditionally would hold a failed rank that long.
/// Detaching it always, as was done before, let the thread outlive `main`: it released the failed
/// communicator's Gloo context and device while static destructors ran, which ThreadSanitizer
/// reported as a race with the Gloo device cache's destruction. So the destructor waits for the
/// worker at most `kAbortedWorkerPatience`, longer than the grace that ends a Gloo operation after
/// a deadline and far longer than a collective needs to fail: in those cases (all the common ones)
/// the worker is joined and nothing of the communicator survives it. Only a worker still blocked
/// past that is detached; its tasks own everything they use (the communicator's context, the Gloo
/// context, which owns its device), and the only static on that path, the Gloo device cache, is
/// never destroyed (src/comm/gloo/device.cpp), so no destructor at exit runs under it.
/// The same bound as a wait for a failed work's buffers (Note [Buffers after a failure]).
inline constexpr std::chrono::milliseconds kAbortedWorkerPatience = kReleasePatience;

/// One thread running a communicator's operations in order (Note [Host worker teardown]).
class HostWorker {
 public:
  static std::shared_ptr<HostWorker> start();
  void enqueue(std::function<void()> task);
  /// Finishes what is queued, then ends. Waits for that, at most `kAbortedWorkerPatience` when
  /// the communicator was `aborted`; a worker still busy then is left to finish on its own.
  void stop(bool aborted);
  /// `stop` with the longest wait given. Returns whether the worker ended (and was joined)
  /// within it.
  bool stop_within(std::chrono::milliseconds patience);
  /// When nothing is queued or running, marks the worker busy and returns true: an operation run
  /// now on the caller's thread keeps the communicator's order, and the worker runs nothing until
  /// `release()`, so the two never use the communicator's state at once (its mutex also orders
  /// their writes to it).
  bool try_claim();
  void release();
  /// The marks that hold a task until the work before it on the caller's stream is done, reused
  /// (Note [Step events]).
  EventPool& input_events() noexcept { return input_events_; }

 private:
  HostWorker() = default;
  void run();

  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::function<void()>> tasks_;
  std::condition_variable done_;  // signalled when run() returns
  bool stopping_ = false;
  bool running_ = false;
  bool ended_ = false;
  EventPool input_events_{Device::host(), /*timing=*/false};
  std::thread thread_;
};

/// Runs `execute` (one collective; throws on failure) on `worker` once the work already on
/// `stream` is done, completes or fails `work` with its outcome, and makes `stream` wait for it.
/// An aborted communicator, or a stream that failed first, fails the work without running it.
void run_on_worker(HostWorker& worker, const Stream& stream, const std::shared_ptr<WorkState>& work,
                   std::shared_ptr<CommContext> context, std::function<void()> execute);

/// Note [Small host collectives inline]
/// Handing a collective to the worker thread and its completion back costs two thread wake-ups
/// per rank, tens of microseconds each when ranks outnumber cores, which is most of a small
/// collective's time. So when the caller's stream has nothing pending and the worker is idle, a
/// small collective runs on the caller's thread instead (as MPI runs it), with the same deadline,
/// abort and failure handling. Large ones stay on the worker, so that the caller can overlap
/// them with compute. Returns false, having done nothing, when it cannot run inline.
bool try_run_inline(HostWorker& worker, const Stream& stream,
                    const std::shared_ptr<WorkState>& work, CommContext& context,
                    const std::function<void()>& execute);

}  // namespace cohort::detail
