#include "comm/host/worker.hpp"

#include "comm/watchdog.hpp"

#include <cohort/core/error.hpp>

namespace cohort::detail {

std::shared_ptr<HostWorker> HostWorker::start() {
  auto worker = std::shared_ptr<HostWorker>(new HostWorker());
  worker->thread_ = std::thread([self = worker] { self->run(); });
  return worker;
}

void HostWorker::enqueue(std::function<void()> task) {
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    tasks_.push_back(std::move(task));
  }
  wake_.notify_one();
}

void HostWorker::stop(bool aborted) {
  stop_within(aborted ? kAbortedWorkerPatience : std::chrono::milliseconds::max());
}

bool HostWorker::stop_within(std::chrono::milliseconds patience) {
  std::unique_lock<std::mutex> lock(mutex_);
  stopping_ = true;
  wake_.notify_one();
  const auto ended_now = [&] { return ended_; };
  bool ended = true;
  if (patience == std::chrono::milliseconds::max()) {
    done_.wait(lock, ended_now);
  } else {
    ended = done_.wait_for(lock, patience, ended_now);
  }
  lock.unlock();
  if (ended) {
    thread_.join();  // it has returned from run(): this waits only for the thread's exit
  } else {
    thread_.detach();  // Note [Host worker teardown]
  }
  return ended;
}

bool HostWorker::try_claim() {
  const std::lock_guard<std::mutex> lock(mutex_);
  if (!tasks_.empty() || running_ || stopping_) {
    return false;
  }
  running_ = true;
  return true;
}

void HostWorker::release() {
  bool queued = false;
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    running_ = false;
    queued = !tasks_.empty() || stopping_;
  }
  // Only a task queued meanwhile (or a stop) waited for the claim. Waking an idle worker for
  // nothing would cost every inline collective a thread switch (Note [Small host collectives
  // inline]).
  if (queued) {
    wake_.notify_one();
  }
}

void HostWorker::run() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    wake_.wait(lock, [&] { return !running_ && (stopping_ || !tasks_.empty()); });
    if (tasks_.empty()) {
      ended_ = true;  // stopping, and everything queued has run
      done_.notify_all();
      return;
    }
    std::function<void()> task = std::move(tasks_.front());
    tasks_.pop_front();
    running_ = true;
    lock.unlock();
    task();  // tasks catch their own errors
    task = nullptr;
    lock.lock();
    running_ = false;
  }
}

namespace {

/// Runs one collective unless the communicator was aborted, and completes or fails `work`;
/// either way it releases the work's buffers on return (Note [Buffers after a failure]).
void execute_collective(WorkState& work, CommContext& context,
                        const std::function<void()>& execute) {
  const struct Release {
    WorkState& work;
    ~Release() { work.release(); }
  } release{work};
  if (context.aborted()) {
    try {
      COHORT_FAIL(Error,
                  "rank " + std::to_string(context.global_rank(context.rank())) + ": " +
                      work.describe() + " on " + context.describe() +
                      " did not run: the communicator was aborted: " + context.abort_reason());
    } catch (...) {
      work.fail(std::current_exception());
    }
    return;
  }
  try {
    execute();
    work.complete();
  } catch (const TimeoutError& error) {
    fail_collective(context, work, /*timed_out=*/true, error.what());
  } catch (const std::exception& error) {
    fail_collective(context, work, /*timed_out=*/false, error.what());
  }
}

}  // namespace

bool try_run_inline(HostWorker& worker, const Stream& stream,
                    const std::shared_ptr<WorkState>& work, CommContext& context,
                    const std::function<void()>& execute) {
  if (!stream.ready() || !worker.try_claim()) {
    return false;
  }
  work->hold();
  {
    const struct Release {
      HostWorker& worker;
      ~Release() { worker.release(); }
    } release{worker};
    execute_collective(*work, context, execute);
  }
  try {
    work->rethrow_if_failed();
  } catch (const std::exception&) {
    // Later work on the caller's stream fails, as after a collective on the worker.
    stream.enqueue_wait([work] { work->rethrow_if_failed(); });
  }
  return true;
}

void run_on_worker(HostWorker& worker, const Stream& stream, const std::shared_ptr<WorkState>& work,
                   std::shared_ptr<CommContext> context, std::function<void()> execute) {
  // The input is ready once the work already on `stream` is done; when there is none, there is
  // nothing to wait for (and no event to record: the common case of a caller that synchronizes).
  // The mark comes from the worker's pool and goes back as soon as it has been waited for, before
  // the collective runs, so a step that waits for its collectives finds it free again (Note
  // [Step events]).
  std::shared_ptr<Event> input_ready;
  if (!stream.ready()) {
    input_ready = worker.input_events().acquire();
    input_ready->record(stream);
  }
  work->hold();  // released by the task, whichever way it ends
  worker.enqueue([input_ready, work, context = std::move(context),
                  execute = std::move(execute)]() mutable {
    if (input_ready) {
      try {
        input_ready->synchronize();
        input_ready.reset();
      } catch (const std::exception& error) {
        // The caller's stream failed before reaching the collective: this rank cannot take
        // part, so every rank is told now rather than at the deadline.
        fail_collective(*context, *work, /*timed_out=*/false,
                        std::string("the stream it was issued on failed first: ") + error.what());
        work->release();
        return;
      }
    }
    execute_collective(*work, *context, execute);
  });
  // Later work on the caller's stream runs after the collective, and fails if it failed.
  stream.enqueue_wait([work] {
    work->wait_finished_and_released(WorkState::Clock::time_point::max());
    work->rethrow_if_failed();
  });
}

}  // namespace cohort::detail
