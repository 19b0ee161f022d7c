#pragma once

// What the host backends (shared memory, Gloo) share: the worker thread that runs a
// communicator's operations in order, and the glue between a host stream and that thread.

#include "comm_context.hpp"

#include <cohort/comm/communicator.hpp>
#include <cohort/detail/event_pool.hpp>

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

namespace cohort::detail {

/// One thread running a communicator's operations in order. See Note [Aborting Gloo]: it can be
/// detached, and then keeps itself alive until its queue is done.
class HostWorker {
 public:
  static std::shared_ptr<HostWorker> start();
  void enqueue(std::function<void()> task);
  /// Finishes what is queued, then ends; waits for that unless `detach`.
  void stop(bool detach);
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
  bool stopping_ = false;
  bool running_ = false;
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
