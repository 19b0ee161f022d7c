// CUDA streams and events behind cohort::Stream and cohort::Event.

#include "stream_impl.hpp"

#include <cohort/core/detail/cuda_check.hpp>
#include <cohort/core/detail/cuda_device_scope.hpp>
#include <cohort/core/detail/query_status.hpp>
#include <cohort/core/error.hpp>

#include <cuda.h>  // the driver's types; its functions come through cudaGetDriverEntryPoint
#include <cuda_runtime_api.h>

namespace cohort::detail {

static_assert(kCudaSuccess == cudaSuccess && kCudaErrorNotReady == cudaErrorNotReady);
static_assert(kCudaFirstCaptureError == cudaErrorStreamCaptureUnsupported &&
              kCudaLastCaptureError == cudaErrorStreamCaptureWrongThread);

namespace {

/// The driver function `name` (of the CUDA 12 ABI), or nullptr.
void* driver_function(const char* name) noexcept {
  void* function = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
#if CUDART_VERSION >= 12050
  const cudaError_t status =
      cudaGetDriverEntryPointByVersion(name, &function, 12000, cudaEnableDefault, &found);
#else
  const cudaError_t status = cudaGetDriverEntryPoint(name, &function, cudaEnableDefault, &found);
#endif
  if (status != cudaSuccess) {
    (void)cudaGetLastError();  // this call's own failure: nothing to report but "cannot tell"
    return nullptr;
  }
  return found == cudaDriverEntryPointSuccess ? function : nullptr;
}

}  // namespace

bool primary_context_active(int device) noexcept {
  using GetDevice = CUresult (*)(CUdevice*, int);
  using GetState = CUresult (*)(CUdevice, unsigned int*, int*);
  static const auto get_device = reinterpret_cast<GetDevice>(driver_function("cuDeviceGet"));
  static const auto get_state =
      reinterpret_cast<GetState>(driver_function("cuDevicePrimaryCtxGetState"));
  if (get_device == nullptr || get_state == nullptr) {
    return false;  // cannot tell: restoring might create a context (Note [Restoring an unbound
                   // thread])
  }
  CUdevice handle = 0;
  unsigned int flags = 0;
  int active = 0;
  return get_device(&handle, device) == CUDA_SUCCESS &&
         get_state(handle, &flags, &active) == CUDA_SUCCESS && active != 0;
}

namespace {

class CudaEvent;

// Note [Query errors]
// cudaErrorNotReady is no error and sets no pending error, so nothing is cleared here: clearing
// would swallow an unrelated error that an earlier asynchronous launch left pending for its own
// check. A capture status (Note [Queries during a capture]) is this query's own and is cleared;
// it means "not now", not "failed". Any other status is this query's failure (a sticky error
// from a kernel, for instance): it is thrown, attributed to the query.
/// The answer of cudaStreamQuery/cudaEventQuery: not ready, ready, or a CudaError.
bool query_ready(cudaError_t status, const char* call) {
  switch (classify_query(static_cast<int>(status))) {
    case QueryAnswer::ready:
      return true;
    case QueryAnswer::not_ready:
      if (status != cudaErrorNotReady) {
        (void)cudaGetLastError();  // the capture status this query left pending
      }
      return false;
    case QueryAnswer::failed:
      break;
  }
  COHORT_FAIL(CudaError, describe_cuda_error(call, status));
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

  // Note [Every call binds its device]
  // Every call below binds the stream's (or the event's) device for its duration: a call made on
  // a thread with no device bound would otherwise create a context on GPU 0 (Note [Restoring an
  // unbound thread]), and the legacy default stream (cudaStreamLegacy) is the current device's,
  // so a wrapped legacy stream would follow whichever device the calling thread has current.
  void enqueue(std::function<void()> task) override {
    const CudaDeviceScope scope(device_.index());
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

  void synchronize() override {
    const CudaDeviceScope scope(device_.index());
    COHORT_CUDA_TRY(cudaStreamSynchronize(stream_));
  }

  bool ready() override {
    const CudaDeviceScope scope(device_.index());
    const RelaxedCaptureScope relaxed;  // Note [Queries during a capture]
    return query_ready(cudaStreamQuery(stream_), "cudaStreamQuery");
  }

  bool capturing() override {
    const CudaDeviceScope scope(device_.index());
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
    COHORT_EXPECTS(stream.device() == device_,
                   "an event of " + device_.to_string() + " cannot be recorded on a stream of " +
                       stream.device().to_string() + " (CUDA records an event on its own device)");
    const CudaDeviceScope scope(device_.index());  // Note [Every call binds its device]
    COHORT_CUDA_TRY(cudaEventRecord(event_, static_cast<cudaStream_t>(stream.native_handle())));
  }

  bool ready() override {
    const CudaDeviceScope scope(device_.index());
    const RelaxedCaptureScope relaxed;  // Note [Queries during a capture]
    return query_ready(cudaEventQuery(event_), "cudaEventQuery");
  }

  void synchronize() override {
    const CudaDeviceScope scope(device_.index());
    COHORT_CUDA_TRY(cudaEventSynchronize(event_));
  }

  float elapsed_ms_since(EventImpl& start) override {
    COHORT_EXPECTS(dynamic_cast<CudaEvent*>(&start) != nullptr,
                   "elapsed_ms needs two events of the same kind of device");
    float milliseconds = 0.0f;
    const CudaDeviceScope scope(device_.index());
    // cudaEventElapsedTime answers cudaErrorNotReady for events still pending: wait for both.
    COHORT_CUDA_TRY(cudaEventSynchronize(static_cast<cudaEvent_t>(start.native_handle())));
    COHORT_CUDA_TRY(cudaEventSynchronize(event_));
    COHORT_CUDA_TRY(cudaEventElapsedTime(&milliseconds,
                                         static_cast<cudaEvent_t>(start.native_handle()), event_));
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
  const CudaDeviceScope scope(device_.index());  // the event may be another device's
  COHORT_CUDA_TRY(cudaStreamWaitEvent(stream_, static_cast<cudaEvent_t>(event.native_handle()), 0));
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
