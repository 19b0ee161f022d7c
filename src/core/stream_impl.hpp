#pragma once

// The interfaces behind Stream and Event, with one implementation per kind of device
// (host: stream.cpp; CUDA: stream_cuda.cpp).

#include <cohort/core/device.hpp>

#include <functional>
#include <memory>
#include <optional>
#include <string_view>

namespace cohort::detail {

class EventImpl;

class StreamImpl {
 public:
  virtual ~StreamImpl() = default;
  virtual Device device() const noexcept = 0;
  virtual void enqueue(std::function<void()> task) = 0;
  virtual void enqueue_wait(std::function<void()> wait) = 0;
  virtual void wait(EventImpl& event) = 0;
  virtual void synchronize() = 0;
  virtual bool ready() = 0;
  /// Whether a CUDA graph capture is recording this stream (never for a host stream).
  virtual bool capturing() { return false; }
  /// Note [Unwaited host work] (stream.cpp): only a host worker stream keeps these.
  virtual void label_work(std::string_view /*call*/) {}
  virtual std::optional<std::string_view> unwaited_work() { return std::nullopt; }
  virtual void* native_handle() const noexcept = 0;
};

class EventImpl {
 public:
  virtual ~EventImpl() = default;
  virtual Device device() const noexcept = 0;
  virtual void record(StreamImpl& stream) = 0;
  virtual bool ready() = 0;
  virtual void synchronize() = 0;
  virtual float elapsed_ms_since(EventImpl& start) = 0;
  virtual void* native_handle() const noexcept = 0;
};

#if COHORT_WITH_CUDA
/// A new non-blocking CUDA stream on `device`.
std::shared_ptr<StreamImpl> make_cuda_stream(Device device);
/// A handle to the caller's `cudaStream_t`; nullptr is the legacy default stream.
std::shared_ptr<StreamImpl> wrap_cuda_stream(Device device, void* borrowed_stream);
std::shared_ptr<EventImpl> make_cuda_event(Device device, bool timing);
#endif

}  // namespace cohort::detail
