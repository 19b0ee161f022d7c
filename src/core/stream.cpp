#include "stream_impl.hpp"

#include <cohort/core/error.hpp>
#include <cohort/core/stream.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>

namespace cohort {
namespace detail {
namespace {

using Clock = std::chrono::steady_clock;

// Note [Host streams]
// A host stream is one worker thread and a queue. Counters of enqueued and finished tasks give
// `ready` and `synchronize` without tracking tasks one by one. An event is a generation counter:
// recording enqueues a task that publishes the generation it was given, and a stream that waits
// on the event enqueues a task that blocks until that generation is published. A generation
// captured when `wait` is called is what CUDA's cudaStreamWaitEvent would wait for.
//
// A failed stream skips its later tasks, but not the event markers among them: a marker still
// completes its event, carrying the stream's error, so that nothing waits for ever on a stream
// that will never get there. A stream waiting on such an event fails with the same error, and
// Event::synchronize() rethrows it: the failure travels along the dependencies, as a sticky
// error does on CUDA.

class HostStream;

class HostEvent final : public EventImpl, public std::enable_shared_from_this<HostEvent> {
 public:
  explicit HostEvent(bool timing) : timing_(timing) {}

  Device device() const noexcept override { return Device::host(); }
  void record(StreamImpl& stream) override;
  bool ready() override {
    bool done;
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      done = completed_ >= recorded_;
    }
    if (done) {
      tell_stream_waited();
    }
    return done;
  }
  void synchronize() override {
    wait_for(recorded_generation());
    tell_stream_waited();
  }
  float elapsed_ms_since(EventImpl& start) override;
  void* native_handle() const noexcept override { return nullptr; }

  std::uint64_t recorded_generation() {
    const std::lock_guard<std::mutex> lock(mutex_);
    return recorded_;
  }

  /// Whether `generation` has completed without an error: nothing left to wait for.
  bool completed_cleanly(std::uint64_t generation) {
    const std::lock_guard<std::mutex> lock(mutex_);
    return completed_ >= generation && !error_;
  }

  /// Waits until `generation` has completed; rethrows the error of the stream it was recorded
  /// on, if that stream had failed by then.
  void wait_for(std::uint64_t generation) {
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [&] { return completed_ >= generation; });
    if (error_) {
      std::rethrow_exception(error_);
    }
  }

 private:
  friend class HostStream;
  /// Note [Unwaited host work]: the host has seen the recorded work finish.
  void tell_stream_waited();

  bool timing_;
  std::mutex mutex_;
  std::condition_variable done_;
  std::uint64_t recorded_ = 0;
  std::uint64_t completed_ = 0;
  Clock::time_point completed_at_{};
  std::exception_ptr error_;               // of the stream the latest completed recording was on
  std::weak_ptr<HostStream> recorded_on_;  // the stream of the latest recording
  std::uint64_t recorded_through_ = 0;     // that stream's enqueued tasks it follows
};

// Note [Caller-run host streams]
// A HostExecution::caller stream has no worker: each task runs on the enqueuing thread before
// enqueue returns, under a recursive mutex (a task may enqueue on its own stream; two threads
// enqueuing at once still run their tasks one at a time). Its queue is always empty, so markers
// complete at once, `wait` blocks the caller, and `synchronize` only reports the error. A failed
// stream rethrows its first error from every later enqueue instead of skipping tasks silently:
// the caller of a plain host loop never synchronizes, so this is where it learns of the failure.
// Note [Unwaited host work]
// For COHORT_DEBUG_STREAMS (Note [Debugging streams] in data_parallel.hpp). A worker stream keeps
// how far the host has waited for it (`waited_through_`: a synchronize(), a ready() that said
// yes, or the same on an event recorded on it) and the name of the library call that last
// enqueued work (`label_work`). `unwaited_work` names that call when the host has not waited for
// its work and nothing was enqueued after it: a host that now touches the memory that work uses
// races with it. Whether the work happens to have finished does not matter, so the answer does
// not depend on timing. Work enqueued after the call (the user's own compute, in stream order)
// clears it: the user orders their accesses on the stream, and the stream cannot see those.
class HostStream final : public StreamImpl, public std::enable_shared_from_this<HostStream> {
 public:
  explicit HostStream(HostExecution execution) : caller_runs_(execution == HostExecution::caller) {
    if (!caller_runs_) {
      worker_ = std::thread([this] { run(); });
    }
  }

  ~HostStream() override {
    if (caller_runs_) {
      return;
    }
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    work_available_.notify_all();
    worker_.join();
  }

  Device device() const noexcept override { return Device::host(); }

  void enqueue(std::function<void()> task) override {
    if (caller_runs_) {
      run_on_caller(task);
      return;
    }
    push(Task{std::move(task), nullptr, false});
  }

  void enqueue_wait(std::function<void()> wait) override {
    if (caller_runs_) {
      run_on_caller(wait);
      return;
    }
    push(Task{std::move(wait), nullptr, true});
  }

  /// A task that runs even after the stream has failed, given the stream's error (or null).
  /// When the stream is idle the point it marks is reached already, and it runs at once, on the
  /// calling thread.
  void enqueue_marker(std::function<void(std::exception_ptr)> marker) {
    if (caller_runs_) {
      const std::lock_guard<std::recursive_mutex> running(caller_mutex_);
      marker(current_error());
      return;
    }
    std::exception_ptr error;
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      if (!queue_.empty() || busy_) {
        queue_.push_back(Task{nullptr, std::move(marker), false});
        ++enqueued_;
        work_available_.notify_one();
        return;
      }
      error = error_;
    }
    marker(error);
  }

  void wait(EventImpl& event) override {
    auto* host_event = dynamic_cast<HostEvent*>(&event);
    COHORT_EXPECTS(host_event != nullptr,
                   "a host stream cannot wait on an event of " + event.device().to_string());
    const std::uint64_t generation = host_event->recorded_generation();
    if (generation == 0 || host_event->completed_cleanly(generation)) {
      return;  // already there: waiting would only cost a task
    }
    enqueue_wait([event_state = host_event->shared_from_this(), generation] {
      event_state->wait_for(generation);
    });
  }

  // Note [Waits run by the synchronizing thread]
  // A task that only waits for something outside the stream (an event, a collective) may run on
  // the thread that calls synchronize() when it reaches the front of the queue with the worker
  // idle: the caller would block anyway, and this saves two thread hand-offs per collective
  // (worker wakes, waits, wakes the caller), which dominate small collectives on a busy host.
  // `busy_` keeps the worker and the synchronizing thread from running tasks at the same time.
  void synchronize() override {
    if (caller_runs_) {
      const std::lock_guard<std::recursive_mutex> running(
          caller_mutex_);  // a task on another thread
      if (const std::exception_ptr error = current_error()) {
        std::rethrow_exception(error);
      }
      return;
    }
    std::unique_lock<std::mutex> lock(mutex_);
    const std::uint64_t target = enqueued_;
    while (completed_ < target) {
      if (!busy_ && !queue_.empty() && queue_.front().waits_only) {
        execute_front(lock);
        continue;
      }
      finished_.wait(lock);
    }
    waited_through_ = std::max(waited_through_, target);
    if (error_) {
      std::rethrow_exception(error_);
    }
  }

  bool ready() override {
    const std::lock_guard<std::mutex> lock(mutex_);
    if (completed_ < enqueued_) {
      return false;
    }
    waited_through_ = enqueued_;
    return true;
  }

  void* native_handle() const noexcept override { return nullptr; }

  void label_work(std::string_view call) override {
    if (caller_runs_) {
      return;  // nothing is ever left pending
    }
    const std::lock_guard<std::mutex> lock(mutex_);
    label_ = call;
    labelled_through_ = enqueued_;
    labelled_tasks_ = tasks_;
  }

  std::optional<std::string_view> unwaited_work() override {
    const std::lock_guard<std::mutex> lock(mutex_);
    if (caller_runs_ || label_.empty() || waited_through_ >= labelled_through_ ||
        tasks_ != labelled_tasks_) {
      return std::nullopt;
    }
    return label_;
  }

  /// The number of entries enqueued so far (Note [Unwaited host work]).
  std::uint64_t enqueued_count() {
    const std::lock_guard<std::mutex> lock(mutex_);
    return enqueued_;
  }

  /// The host has seen the first `count` entries finish.
  void waited_through(std::uint64_t count) {
    const std::lock_guard<std::mutex> lock(mutex_);
    waited_through_ = std::max(waited_through_, count);
  }

 private:
  struct Task {
    std::function<void()> work;                      // skipped once the stream has failed
    std::function<void(std::exception_ptr)> marker;  // always runs
    bool waits_only = false;                         // Note [Waits run by the synchronizing thread]
  };

  std::exception_ptr current_error() {
    const std::lock_guard<std::mutex> lock(mutex_);
    return error_;
  }

  /// Note [Caller-run host streams]
  void run_on_caller(const std::function<void()>& task) {
    const std::lock_guard<std::recursive_mutex> running(caller_mutex_);
    if (const std::exception_ptr error = current_error()) {
      std::rethrow_exception(error);
    }
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      ++enqueued_;
      busy_ = true;
    }
    std::exception_ptr error;
    try {
      task();
    } catch (...) {
      error = std::current_exception();
    }
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      ++completed_;
      busy_ = false;
      if (error && !error_) {
        error_ = error;
      }
    }
    if (error) {
      std::rethrow_exception(error);
    }
  }

  void push(Task task) {
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      queue_.push_back(std::move(task));
      ++enqueued_;
      ++tasks_;
    }
    work_available_.notify_one();
  }

  void run() {
    std::unique_lock<std::mutex> lock(mutex_);
    while (true) {
      work_available_.wait(lock, [&] { return !busy_ && (stopping_ || !queue_.empty()); });
      if (queue_.empty()) {
        return;  // stopping, and every task has run
      }
      execute_front(lock);
    }
  }

  /// Runs the task at the front of the queue on the calling thread; `lock` is held on entry and
  /// on return, released while the task runs.
  void execute_front(std::unique_lock<std::mutex>& lock) {
    Task task = std::move(queue_.front());
    queue_.pop_front();
    busy_ = true;
    const std::exception_ptr stream_error = error_;
    lock.unlock();
    std::exception_ptr error;
    if (task.marker) {
      task.marker(stream_error);
    } else if (!stream_error) {
      try {
        task.work();
      } catch (...) {
        error = std::current_exception();
      }
    }
    task = Task{};  // release captures outside the lock
    lock.lock();
    if (error && !error_) {
      error_ = error;
    }
    busy_ = false;
    ++completed_;
    finished_.notify_all();
    work_available_.notify_one();
  }

  std::mutex mutex_;
  std::condition_variable work_available_;
  std::condition_variable finished_;
  std::deque<Task> queue_;
  std::uint64_t enqueued_ = 0;
  std::uint64_t completed_ = 0;
  std::exception_ptr error_;
  bool stopping_ = false;
  bool busy_ = false;  // a task is running, on the worker or on a synchronizing thread
  // Note [Unwaited host work]
  std::uint64_t tasks_ = 0;           // enqueued work and waits (not event markers)
  std::uint64_t waited_through_ = 0;  // entries the host has seen finish
  std::string_view label_;            // a string literal naming a library call
  std::uint64_t labelled_through_ = 0;
  std::uint64_t labelled_tasks_ = 0;
  const bool caller_runs_;  // Note [Caller-run host streams]
  std::recursive_mutex caller_mutex_;
  std::thread worker_;  // started last, in the constructor's body
};

void HostEvent::record(StreamImpl& stream) {
  auto* host_stream = dynamic_cast<HostStream*>(&stream);
  COHORT_EXPECTS(host_stream != nullptr,
                 "a host event cannot be recorded on a stream of " + stream.device().to_string());
  std::uint64_t generation;
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    generation = ++recorded_;
    recorded_on_ = host_stream->weak_from_this();
    recorded_through_ = host_stream->enqueued_count();
  }
  host_stream->enqueue_marker([self = shared_from_this(), generation](std::exception_ptr error) {
    {
      const std::lock_guard<std::mutex> lock(self->mutex_);
      if (generation > self->completed_) {
        self->completed_ = generation;
        self->completed_at_ = Clock::now();
        self->error_ = std::move(error);
      }
    }
    self->done_.notify_all();
  });
}

void HostEvent::tell_stream_waited() {
  std::shared_ptr<HostStream> stream;
  std::uint64_t through;
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    stream = recorded_on_.lock();
    through = recorded_through_;
  }
  if (stream) {
    stream->waited_through(through);
  }
}

float HostEvent::elapsed_ms_since(EventImpl& start) {
  auto* host_start = dynamic_cast<HostEvent*>(&start);
  COHORT_EXPECTS(host_start != nullptr, "elapsed_ms needs two events of the same device");
  COHORT_EXPECTS(timing_ && host_start->timing_,
                 "elapsed_ms needs events created with timing = true");
  COHORT_EXPECTS(recorded_generation() > 0 && host_start->recorded_generation() > 0,
                 "elapsed_ms needs both events recorded");
  host_start->synchronize();
  synchronize();
  const std::lock_guard<std::mutex> lock_end(mutex_);
  const std::lock_guard<std::mutex> lock_start(host_start->mutex_);
  return std::chrono::duration<float, std::milli>(completed_at_ - host_start->completed_at_)
      .count();
}

}  // namespace
}  // namespace detail

namespace {
std::atomic<std::uint64_t> events_created{0};
std::atomic<std::uint64_t> streams_created{0};
}  // namespace

detail::CreatedCounts detail::created_counts() noexcept {
  return {events_created.load(std::memory_order_relaxed),
          streams_created.load(std::memory_order_relaxed)};
}

// ---- Stream ----

Stream Stream::create(Device device, HostExecution execution) {
  streams_created.fetch_add(1, std::memory_order_relaxed);
  if (device.is_host()) {
    return Stream(std::make_shared<detail::HostStream>(execution));
  }
#if COHORT_WITH_CUDA
  return Stream(detail::make_cuda_stream(device));
#else
  COHORT_FAIL(InvalidArgument, "cannot create a stream on " + device.to_string() +
                                   ": cohort was built without CUDA (COHORT_WITH_CUDA=OFF)");
#endif
}

Stream Stream::wrap_cuda(Device device, void* cuda_stream) {
  COHORT_EXPECTS(device.is_cuda(), "wrap_cuda needs a CUDA device, got " + device.to_string());
#if COHORT_WITH_CUDA
  return Stream(detail::wrap_cuda_stream(device, cuda_stream));
#else
  (void)cuda_stream;
  COHORT_FAIL(InvalidArgument, "cannot wrap a CUDA stream: cohort was built without CUDA");
#endif
}

Device Stream::device() const noexcept {
  return impl_->device();
}
void Stream::enqueue(std::function<void()> task) const {
  impl_->enqueue(std::move(task));
}
void Stream::enqueue_wait(std::function<void()> wait) const {
  impl_->enqueue_wait(std::move(wait));
}
void Stream::wait(const Event& event) const {
  impl_->wait(*event.impl_);
}
void Stream::synchronize() const {
  impl_->synchronize();
}
bool Stream::ready() const {
  return impl_->ready();
}
bool Stream::capturing() const {
  return impl_->capturing();
}
void* Stream::native_handle() const noexcept {
  return impl_->native_handle();
}

void detail::label_host_work(const Stream& stream, std::string_view call) {
  stream.impl_->label_work(call);
}
std::optional<std::string_view> detail::unwaited_host_work(const Stream& stream) {
  return stream.impl_->unwaited_work();
}
const void* detail::stream_key(const Stream& stream) noexcept {
  const void* handle = stream.impl_->native_handle();
  return handle != nullptr ? handle : stream.impl_.get();
}

// ---- Event ----

Event Event::create(Device device, bool timing) {
  events_created.fetch_add(1, std::memory_order_relaxed);
  if (device.is_host()) {
    return Event(std::make_shared<detail::HostEvent>(timing));
  }
#if COHORT_WITH_CUDA
  return Event(detail::make_cuda_event(device, timing));
#else
  COHORT_FAIL(InvalidArgument, "cannot create an event on " + device.to_string() +
                                   ": cohort was built without CUDA (COHORT_WITH_CUDA=OFF)");
#endif
}

Device Event::device() const noexcept {
  return impl_->device();
}
void Event::record(const Stream& stream) {
  impl_->record(*stream.impl_);
}
bool Event::ready() const {
  return impl_->ready();
}
void Event::synchronize() const {
  impl_->synchronize();
}
float Event::elapsed_ms(const Event& start, const Event& end) {
  return end.impl_->elapsed_ms_since(*start.impl_);
}
void* Event::native_handle() const noexcept {
  return impl_->native_handle();
}

}  // namespace cohort
