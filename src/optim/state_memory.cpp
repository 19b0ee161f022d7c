#include "state_memory.hpp"

#include <cohort/core/error.hpp>
#include <cohort/memory/host_resource.hpp>

#include <cstring>
#include <map>
#include <mutex>

#if COHORT_WITH_CUDA
#include <cohort/detail/cuda_check.hpp>
#include <cohort/detail/cuda_device_scope.hpp>
#include <cohort/memory/device_pool.hpp>

#include <cuda_runtime_api.h>
#endif

namespace cohort::detail {

std::shared_ptr<MemoryResource> default_state_resource(Device device) {
  if (device.is_host()) {
    static const auto host = std::make_shared<HostResource>();
    return host;
  }
#if COHORT_WITH_CUDA
  static std::mutex mutex;
  static std::map<int, std::shared_ptr<MemoryResource>> pools;
  const std::lock_guard lock(mutex);
  auto& pool = pools[device.index()];
  if (!pool) {
    pool = make_device_pool_resource({.device = device.index()});
  }
  return pool;
#else
  COHORT_FAIL(InvalidArgument, "optimizer state on " + device.to_string() +
                                   " needs cohort built with CUDA");
#endif
}

bool is_managed(const MemoryResource& resource) noexcept {
  return resource.device().is_cuda() && resource.host_accessible() &&
         resource.device_accessible();
}

#if COHORT_WITH_CUDA

CurrentDevice::CurrentDevice(Device device) {
  if (device.is_cuda()) {
    scope_ = std::make_unique<CudaDeviceScope>(device.index());
  }
}

CurrentDevice::~CurrentDevice() = default;

void write_now(void* destination, const void* source, std::size_t bytes, const Stream& stream) {
  if (stream.device().is_host()) {
    stream.synchronize();
    std::memcpy(destination, source, bytes);
    return;
  }
  const CurrentDevice current(stream.device());
  COHORT_CUDA_TRY(cudaMemcpyAsync(destination, source, bytes, cudaMemcpyHostToDevice,
                                  static_cast<cudaStream_t>(stream.native_handle())));
  stream.synchronize();
}

void read_after(void* destination, const void* source, std::size_t bytes, const Stream& stream) {
  if (stream.device().is_host()) {
    stream.synchronize();
    std::memcpy(destination, source, bytes);
    return;
  }
  const CurrentDevice current(stream.device());
  COHORT_CUDA_TRY(cudaMemcpyAsync(destination, source, bytes, cudaMemcpyDeviceToHost,
                                  static_cast<cudaStream_t>(stream.native_handle())));
  stream.synchronize();
}

void copy_to_host_async(void* destination, const void* source, std::size_t bytes,
                        const Stream& stream) {
  if (stream.device().is_host()) {
    stream.enqueue([destination, source, bytes] { std::memcpy(destination, source, bytes); });
    return;
  }
  const CurrentDevice current(stream.device());
  COHORT_CUDA_TRY(cudaMemcpyAsync(destination, source, bytes, cudaMemcpyDeviceToHost,
                                  static_cast<cudaStream_t>(stream.native_handle())));
}

void zero_async(void* destination, std::size_t bytes, const Stream& stream) {
  if (bytes == 0) {
    return;
  }
  if (stream.device().is_host()) {
    stream.enqueue([destination, bytes] { std::memset(destination, 0, bytes); });
    return;
  }
  const CurrentDevice current(stream.device());
  COHORT_CUDA_TRY(
      cudaMemsetAsync(destination, 0, bytes, static_cast<cudaStream_t>(stream.native_handle())));
}

#else

class CudaDeviceScope {};  // never created in a build without CUDA

CurrentDevice::CurrentDevice(Device device) {
  COHORT_EXPECTS(device.is_host(), device.to_string() + " needs cohort built with CUDA");
}

CurrentDevice::~CurrentDevice() = default;

void write_now(void* destination, const void* source, std::size_t bytes, const Stream& stream) {
  stream.synchronize();
  std::memcpy(destination, source, bytes);
}

void read_after(void* destination, const void* source, std::size_t bytes, const Stream& stream) {
  stream.synchronize();
  std::memcpy(destination, source, bytes);
}

void copy_to_host_async(void* destination, const void* source, std::size_t bytes,
                        const Stream& stream) {
  stream.enqueue([destination, source, bytes] { std::memcpy(destination, source, bytes); });
}

void zero_async(void* destination, std::size_t bytes, const Stream& stream) {
  if (bytes != 0) {
    stream.enqueue([destination, bytes] { std::memset(destination, 0, bytes); });
  }
}

#endif

}  // namespace cohort::detail
