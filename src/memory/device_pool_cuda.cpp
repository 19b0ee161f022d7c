// The stream-ordered device pool behind make_device_pool_resource (CUDA builds only).

#include "cuda_detail.hpp"

#include <cohort/core/detail/cuda_check.hpp>
#include <cohort/core/error.hpp>
#include <cohort/memory/device_pool.hpp>

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

namespace cohort {
namespace {

class DevicePoolResource final : public MemoryResource {
 public:
  explicit DevicePoolResource(const DevicePoolOptions& options)
      : MemoryResource(Device::cuda(options.device), false, true,
                       "device_pool(" + Device::cuda(options.device).to_string() + ")"),
        ordinal_(options.device) {
    detail::check_cuda_ordinal(ordinal_);
    const detail::CudaDeviceScope scope(ordinal_);
    cudaMemPoolProps properties{};
    properties.allocType = cudaMemAllocationTypePinned;
    properties.handleTypes = cudaMemHandleTypeNone;
    properties.location.type = cudaMemLocationTypeDevice;
    properties.location.id = ordinal_;
    COHORT_CUDA_TRY(cudaMemPoolCreate(&pool_, &properties));
    try {
      std::uint64_t threshold = options.release_threshold_bytes;
      COHORT_CUDA_TRY(cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrReleaseThreshold, &threshold));
      COHORT_CUDA_TRY(cudaStreamCreateWithFlags(&sync_stream_, cudaStreamNonBlocking));
      if (options.initial_pool_bytes > 0) {  // grow once now, keep it by the threshold
        void* block = do_allocate(options.initial_pool_bytes, nullptr);
        COHORT_CUDA_TRY(cudaFreeAsync(block, sync_stream_));
        COHORT_CUDA_TRY(cudaStreamSynchronize(sync_stream_));
      }
    } catch (...) {
      destroy();
      throw;
    }
  }

  ~DevicePoolResource() override { destroy(); }

  DevicePoolResource(const DevicePoolResource&) = delete;
  DevicePoolResource& operator=(const DevicePoolResource&) = delete;

 private:
  void* do_allocate(std::size_t bytes, const Stream* stream) override {
    cudaStream_t cuda_stream = sync_stream_;
    if (stream != nullptr) {
      COHORT_EXPECTS(stream->device() == device(),
                     "cannot allocate from " + name() + " on a stream of " +
                         stream->device().to_string() + "; use a stream of the pool's device");
      cuda_stream = static_cast<cudaStream_t>(stream->native_handle());
    }
    // Every call on the pool binds its device (Note [Every call binds its device]): a thread with
    // none bound would otherwise create a context on GPU 0.
    const detail::CudaDeviceScope scope(ordinal_);
    void* pointer = nullptr;
    const cudaError_t status = cudaMallocFromPoolAsync(&pointer, bytes, pool_, cuda_stream);
    if (status == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      throw_out_of_memory(bytes);
    }
    COHORT_CUDA_TRY(status);
    if (stream == nullptr) {
      const cudaError_t synced = cudaStreamSynchronize(sync_stream_);
      if (synced != cudaSuccess) {
        COHORT_CUDA_CHECK_NOEXCEPT(cudaFree(pointer));
        COHORT_CUDA_TRY(synced);
      }
    }
    return pointer;
  }

  void do_deallocate(void* pointer, std::size_t /*bytes*/, const Stream* stream) noexcept override {
    const detail::CudaDeviceScope scope(ordinal_);
    if (stream != nullptr) {
      COHORT_CUDA_CHECK_NOEXCEPT(
          cudaFreeAsync(pointer, static_cast<cudaStream_t>(stream->native_handle())));
    } else {
      // Every use has finished (the synchronous contract): any stream will do, and the private
      // one keeps the block in the pool for reuse.
      COHORT_CUDA_CHECK_NOEXCEPT(cudaFreeAsync(pointer, sync_stream_));
    }
  }

  std::size_t do_release_unused() override {
    const detail::CudaDeviceScope scope(ordinal_);
    const std::size_t before = pool_attribute(cudaMemPoolAttrReservedMemCurrent);
    COHORT_CUDA_TRY(cudaMemPoolTrimTo(pool_, 0));
    const std::size_t after = pool_attribute(cudaMemPoolAttrReservedMemCurrent);
    return before > after ? before - after : 0;
  }

  /// A pool counter, or 0 when CUDA cannot say (only used for messages and trimming).
  std::size_t pool_attribute(cudaMemPoolAttr attribute) const noexcept {
    std::uint64_t value = 0;
    if (cudaMemPoolGetAttribute(pool_, attribute, &value) != cudaSuccess) {
      (void)cudaGetLastError();
      return 0;
    }
    return static_cast<std::size_t>(value);
  }

  [[noreturn]] void throw_out_of_memory(std::size_t bytes) const {
    std::string message = "cannot allocate " + detail::bytes_in_words(bytes) + " from " + name() +
                          ": the pool uses " +
                          detail::bytes_in_words(pool_attribute(cudaMemPoolAttrUsedMemCurrent)) +
                          " and reserves " +
                          detail::bytes_in_words(pool_attribute(cudaMemPoolAttrReservedMemCurrent));
    try {
      const detail::DeviceMemoryInfo info = detail::device_memory_info(ordinal_);
      message += "; the device has " + detail::bytes_in_words(info.free_bytes) + " free of " +
                 detail::bytes_in_words(info.total_bytes);
    } catch (const Error&) {
      // the numbers above are what we can give
    }
    COHORT_FAIL(OutOfMemory, message);
  }

  void destroy() noexcept {
    if (sync_stream_ == nullptr && pool_ == nullptr) {
      return;
    }
    const detail::CudaDeviceScope scope(ordinal_);
    if (sync_stream_ != nullptr) {
      COHORT_CUDA_CHECK_NOEXCEPT(cudaStreamSynchronize(sync_stream_));
      COHORT_CUDA_CHECK_NOEXCEPT(cudaStreamDestroy(sync_stream_));
      sync_stream_ = nullptr;
    }
    if (pool_ != nullptr) {
      // With frees still in flight, the driver releases the pool once they complete.
      COHORT_CUDA_CHECK_NOEXCEPT(cudaMemPoolDestroy(pool_));
      pool_ = nullptr;
    }
  }

  int ordinal_;
  cudaMemPool_t pool_ = nullptr;
  cudaStream_t sync_stream_ = nullptr;  // for the synchronous overloads
};

}  // namespace

std::shared_ptr<MemoryResource> make_device_pool_resource(const DevicePoolOptions& options) {
  return std::make_shared<DevicePoolResource>(options);
}

}  // namespace cohort
