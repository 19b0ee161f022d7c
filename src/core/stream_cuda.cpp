// CUDA streams and events behind cohort::Stream and cohort::Event.

#include "stream_impl.hpp"

#include <cohort/core/detail/cuda_check.hpp>
#include <cohort/core/detail/cuda_device_scope.hpp>
#include <cohort/core/error.hpp>

#include <cuda_runtime_api.h>

namespace cohort::detail {
namespace {

class CudaEvent;

/// The answer of cudaStreamQuery/cudaEventQuery: not ready, ready, or a CudaError.
// Note [Query errors]
// cudaErrorNotReady is no error and sets no pending error, so nothing is cleared here: clearing
// would swallow an unrelated error that an earlier asynchronous launch left pending for its own
// check. Any other status is this query's failure (a sticky error from a kernel, for
// instance): it is thrown, attributed to the query.
bool query_ready(cudaError_t status, const char* call) {
  if (status == cudaErrorNotReady) {
    return false;
  }
  if (status != cudaSuccess) {
    COHORT_FAIL(CudaError, describe_cuda_error(call, status));
  }
  return true;
}

class CudaStream final : public StreamImpl {
 public:
  /// A new stream on `device`.
  explicit CudaStream(Device device) : device_(device) {
    const CudaDeviceScope scope(device_.index());
    COHORT_CUDA_TRY(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    owned_ = true;
  }
  /// The caller's stream. A null handle means the legacy default stream, which is named by
  /// its explicit handle so that native_handle() stays non-null (null means a host stream) and
  /// the meaning does not change under --default-stream per-thread.
  CudaStream(Device device, cudaStream_t borrowed)
      : device_(device), stream_(borrowed != nullptr ? borrowed : cudaStreamLegacy) {}
  ~CudaStream() override {
    if (owned_) {
      const CudaDeviceScope scope(device_.index());
      COHORT_CUDA_CHECK_NOEXCEPT(cudaStreamDestroy(stream_));
    }
  }
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;

  Device device() const noexcept override { return device_; }

  void enqueue(std::function<void()> task) override {
    auto* heap_task = new std::function<void()>(std::move(task));
    const cudaError_t status = cudaLaunchHostFunc(
        stream_,
        [](void* data) {
          auto* callback = static_cast<std::function<void()>*>(data);
          try {
            (*callback)();
          } catch (const std::exception& error) {
            COHORT_LOG(error) << "a task on a CUDA stream threw: " << error.what();
          } catch (...) {
            COHORT_LOG(error) << "a task on a CUDA stream threw an unknown exception";
          }
          delete callback;
        },
        heap_task);
    if (status != cudaSuccess) {
      delete heap_task;
      COHORT_CUDA_TRY(status);
    }
  }

  void enqueue_wait(std::function<void()> wait) override { enqueue(std::move(wait)); }

  void wait(EventImpl& event) override;

  void synchronize() override { COHORT_CUDA_TRY(cudaStreamSynchronize(stream_)); }

  bool ready() override {
    const CudaDeviceScope scope(device_.index());
    return query_ready(cudaStreamQuery(stream_), "cudaStreamQuery");
  }

  bool capturing() override {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    COHORT_CUDA_TRY(cudaStreamIsCapturing(stream_, &status));
    return status != cudaStreamCaptureStatusNone;
  }
  void* native_handle() const noexcept override { return stream_; }

 private:
  Device device_;
  cudaStream_t stream_ = nullptr;
  bool owned_ = false;
};

class CudaEvent final : public EventImpl {
 public:
  CudaEvent(Device device, bool timing) : device_(device) {
    const CudaDeviceScope scope(device_.index());
    COHORT_CUDA_TRY(
        cudaEventCreateWithFlags(&event_, timing ? cudaEventDefault : cudaEventDisableTiming));
  }
  ~CudaEvent() override {
    // Any thread may drop the last handle (the watchdog does): bind the event's device, or
    // this thread would create a context on device 0.
    const CudaDeviceScope scope(device_.index());
    COHORT_CUDA_CHECK_NOEXCEPT(cudaEventDestroy(event_));
  }
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;

  Device device() const noexcept override { return device_; }

  void record(StreamImpl& stream) override {
    COHORT_EXPECTS(dynamic_cast<CudaStream*>(&stream) != nullptr,
                   "a CUDA event cannot be recorded on a stream of " + stream.device().to_string());
    COHORT_CUDA_TRY(cudaEventRecord(event_, static_cast<cudaStream_t>(stream.native_handle())));
  }

  bool ready() override {
    const CudaDeviceScope scope(device_.index());
    return query_ready(cudaEventQuery(event_), "cudaEventQuery");
  }

  void synchronize() override { COHORT_CUDA_TRY(cudaEventSynchronize(event_)); }

  float elapsed_ms_since(EventImpl& start) override {
    COHORT_EXPECTS(dynamic_cast<CudaEvent*>(&start) != nullptr,
                   "elapsed_ms needs two events of the same kind of device");
    float milliseconds = 0.0f;
    // cudaEventElapsedTime answers cudaErrorNotReady for events still pending: wait for both.
    COHORT_CUDA_TRY(cudaEventSynchronize(static_cast<cudaEvent_t>(start.native_handle())));
    COHORT_CUDA_TRY(cudaEventSynchronize(event_));
    COHORT_CUDA_TRY(cudaEventElapsedTime(
        &milliseconds, static_cast<cudaEvent_t>(start.native_handle()), event_));
    return milliseconds;
  }

  void* native_handle() const noexcept override { return event_; }

 private:
  Device device_;
  cudaEvent_t event_ = nullptr;
};

void CudaStream::wait(EventImpl& event) {
  COHORT_EXPECTS(dynamic_cast<CudaEvent*>(&event) != nullptr,
                 "a CUDA stream cannot wait on an event of " + event.device().to_string());
  COHORT_CUDA_TRY(
      cudaStreamWaitEvent(stream_, static_cast<cudaEvent_t>(event.native_handle()), 0));
}

}  // namespace

std::shared_ptr<StreamImpl> make_cuda_stream(Device device) {
  return std::make_shared<CudaStream>(device);
}

std::shared_ptr<StreamImpl> wrap_cuda_stream(Device device, void* borrowed_stream) {
  return std::make_shared<CudaStream>(device, static_cast<cudaStream_t>(borrowed_stream));
}

std::shared_ptr<EventImpl> make_cuda_event(Device device, bool timing) {
  return std::make_shared<CudaEvent>(device, timing);
}

}  // namespace cohort::detail
