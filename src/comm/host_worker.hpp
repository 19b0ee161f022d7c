#pragma once

// What the host backends (shared memory, Gloo) share: the worker thread that runs a
// communicator's operations in order, and the glue between a host stream and that thread.

#include "comm_context.hpp"

#include <cohort/comm/communicator.hpp>

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

 private:
  HostWorker() = default;
  void run();

  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::function<void()>> tasks_;
  bool stopping_ = false;
  std::thread thread_;
};

/// Runs `execute` (one collective; throws on failure) on `worker` once the work already on
/// `stream` is done, completes or fails `work` with its outcome, and makes `stream` wait for it.
/// An aborted communicator, or a stream that failed first, fails the work without running it.
void run_on_worker(HostWorker& worker, const Stream& stream, const std::shared_ptr<WorkState>& work,
                   std::shared_ptr<CommContext> context, std::function<void()> execute);

}  // namespace cohort::detail
