#pragma once

/// @file
/// `Stream` and `Event`: ordered work and the points that join it, on a CUDA device or the host.
///
/// On a CUDA device a `Stream` is a non-blocking CUDA stream and an `Event` a CUDA event. On the
/// host a `Stream` is a worker thread that runs tasks in the order they were enqueued, and an
/// `Event` marks a point in that order, so code written against streams and events (communication
/// overlapped with compute) runs the same way on both backends.
///
/// A host stream may instead run each task at once on the thread that enqueues it
/// (`HostExecution::caller`): the order is the same, but nothing is left pending when a call
/// returns, so the host may read and write the memory the tasks use without synchronizing.
/// `DataParallel` uses such a stream for host compute unless told otherwise (Note [Host compute
/// runs on the caller] in data_parallel.hpp).
///
/// Both are shared handles: copies refer to the same stream or event, which is destroyed with its
/// last copy (a host stream first finishes the work enqueued on it).

#include <cohort/core/device.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string_view>

namespace cohort {

/// How a host stream runs its tasks (a CUDA stream is always asynchronous).
enum class HostExecution : std::uint8_t {
  /// On the stream's own worker thread, in order, while the enqueuing thread goes on.
  worker,
  /// At once, on the thread that enqueues them: `enqueue` returns when the task has run, and a
  /// `wait` blocks the calling thread until the event has completed.
  caller,
};

class Event;
class Stream;

namespace detail {
class StreamImpl;
class EventImpl;
void label_host_work(const Stream& stream, std::string_view call);
std::optional<std::string_view> unwaited_host_work(const Stream& stream);

/// Events and streams that `Event::create` and `Stream::create` made in this process so far, on
/// every device: tests check with it that a steady-state step makes none (Note [Step events]).
struct CreatedCounts {
  std::uint64_t events = 0;
  std::uint64_t streams = 0;
};
CreatedCounts created_counts() noexcept;
/// Names the queue of work that `stream` is: the same for two handles of one CUDA stream (its
/// `cudaStream_t`) and for copies of one host stream, different for different ones while both
/// live. Work on one key completes in the order it was enqueued.
const void* stream_key(const Stream& stream) noexcept;
}  // namespace detail

class Stream {
 public:
  /// A new stream on `device`; on the host, `execution` says which thread runs its tasks (ignored
  /// for a CUDA device).
  /// @throws InvalidArgument for a CUDA device when cohort was built without CUDA;
  ///         CudaError when the CUDA stream cannot be created.
  static Stream create(Device device, HostExecution execution = HostExecution::worker);

  /// A handle to a CUDA stream that the caller created and keeps alive for as long as the handle
  /// is used; cohort never destroys it. `cuda_stream` is a `cudaStream_t`; nullptr means the
  /// legacy default stream (whose `native_handle()` is then `cudaStreamLegacy`).
  static Stream wrap_cuda(Device device, void* cuda_stream);

  Device device() const noexcept;

  /// Enqueues `task` after the work already on the stream. On the host it runs on the stream's
  /// worker thread; on CUDA it runs on a CUDA callback thread (`cudaLaunchHostFunc`) and must not
  /// call CUDA. A task that throws fails a host stream: later tasks are skipped and
  /// `synchronize()` rethrows the first error. On a `HostExecution::caller` stream the task runs
  /// before `enqueue` returns, and the error of a failed stream is rethrown by this call and by
  /// every later one.
  void enqueue(std::function<void()> task) const;

  /// Enqueues a task that only waits for something outside this stream (and may throw to fail
  /// the stream). On the host it may run on a thread blocked in `synchronize()` instead of the
  /// stream's worker, saving two thread hand-offs; it must not touch what other tasks own.
  void enqueue_wait(std::function<void()> wait) const;

  /// Makes work enqueued on this stream from now on wait until `event` has completed, without
  /// blocking the calling thread.
  /// @throws InvalidArgument when the event belongs to another kind of device.
  void wait(const Event& event) const;

  /// Blocks until all work enqueued so far has finished.
  /// @throws the first error a host task raised; CudaError for a failed CUDA stream.
  void synchronize() const;

  /// Whether all work enqueued so far has finished; never blocks.
  bool ready() const;

  /// Whether a CUDA graph capture (`cudaStreamBeginCapture`) is recording this stream now;
  /// always false for a host stream.
  bool capturing() const;

  /// The `cudaStream_t` of a CUDA stream; nullptr for a host stream.
  void* native_handle() const noexcept;

 private:
  explicit Stream(std::shared_ptr<detail::StreamImpl> impl) : impl_(std::move(impl)) {}
  friend class Event;
  friend void detail::label_host_work(const Stream& stream, std::string_view call);
  friend std::optional<std::string_view> detail::unwaited_host_work(const Stream& stream);
  friend const void* detail::stream_key(const Stream& stream) noexcept;
  std::shared_ptr<detail::StreamImpl> impl_;
};

class Event {
 public:
  /// A new event on `device`; with `timing`, `elapsed_ms` can measure between two such events.
  static Event create(Device device, bool timing = false);

  Device device() const noexcept;

  /// Marks the current end of `stream`'s work; the event completes when that work has.
  /// Recording again moves the mark.
  /// @throws InvalidArgument when the stream belongs to another kind of device.
  void record(const Stream& stream);

  /// Whether the recorded work has finished (true for an event never recorded).
  bool ready() const;

  /// Blocks until the recorded work has finished.
  void synchronize() const;

  /// Milliseconds from `start` to `end`, both recorded, completed and created with `timing`.
  static float elapsed_ms(const Event& start, const Event& end);

  /// The `cudaEvent_t` of a CUDA event; nullptr for a host event.
  void* native_handle() const noexcept;

 private:
  explicit Event(std::shared_ptr<detail::EventImpl> impl) : impl_(std::move(impl)) {}
  friend class Stream;
  std::shared_ptr<detail::EventImpl> impl_;
};

}  // namespace cohort
