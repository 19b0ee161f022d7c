#include <cohort/memory/detail/stream_copy.hpp>

#include <cstring>

#if COHORT_WITH_CUDA
#include <cohort/core/detail/cuda_check.hpp>
#include <cohort/core/detail/cuda_device_scope.hpp>

#include <cuda_runtime_api.h>
#endif

namespace cohort::detail {

#if COHORT_WITH_CUDA

namespace {

cudaStream_t cuda_stream(const Stream& stream) {
  return static_cast<cudaStream_t>(stream.native_handle());
}

/// Copies `bytes` in stream order, then waits for `stream`.
void copy_and_wait(void* destination, const void* source, std::size_t bytes, cudaMemcpyKind kind,
                   const Stream& stream) {
  if (stream.device().is_host()) {
    stream.synchronize();
    std::memcpy(destination, source, bytes);
    return;
  }
  const CudaDeviceScope scope(stream.device().index());
  COHORT_CUDA_TRY(cudaMemcpyAsync(destination, source, bytes, kind, cuda_stream(stream)));
  stream.synchronize();
}

}  // namespace

void write_now(void* destination, const void* source, std::size_t bytes, const Stream& stream) {
  copy_and_wait(destination, source, bytes, cudaMemcpyHostToDevice, stream);
}

void read_after(void* destination, const void* source, std::size_t bytes, const Stream& stream) {
  copy_and_wait(destination, source, bytes, cudaMemcpyDeviceToHost, stream);
}

void copy_to_host_async(void* destination, const void* source, std::size_t bytes,
                        const Stream& stream) {
  if (stream.device().is_host()) {
    stream.enqueue([destination, source, bytes] { std::memcpy(destination, source, bytes); });
    return;
  }
  const CudaDeviceScope scope(stream.device().index());
  COHORT_CUDA_TRY(
      cudaMemcpyAsync(destination, source, bytes, cudaMemcpyDeviceToHost, cuda_stream(stream)));
}

void copy_to_device_async(void* destination, const void* source, std::size_t bytes,
                          const Stream& stream) {
  if (stream.device().is_host()) {
    stream.enqueue([destination, source, bytes] { std::memcpy(destination, source, bytes); });
    return;
  }
  const CudaDeviceScope scope(stream.device().index());
  COHORT_CUDA_TRY(
      cudaMemcpyAsync(destination, source, bytes, cudaMemcpyHostToDevice, cuda_stream(stream)));
}

void copy_async(void* destination, const void* source, std::size_t bytes, const Stream& stream) {
  if (bytes == 0) return;
  if (stream.device().is_host()) {
    stream.enqueue([destination, source, bytes] { std::memcpy(destination, source, bytes); });
    return;
  }
  const CudaDeviceScope scope(stream.device().index());
  COHORT_CUDA_TRY(
      cudaMemcpyAsync(destination, source, bytes, cudaMemcpyDeviceToDevice, cuda_stream(stream)));
}

void zero_async(void* destination, std::size_t bytes, const Stream& stream) {
  if (bytes == 0) {
    return;
  }
  if (stream.device().is_host()) {
    stream.enqueue([destination, bytes] { std::memset(destination, 0, bytes); });
    return;
  }
  const CudaDeviceScope scope(stream.device().index());  // the stream's device, on any thread
  COHORT_CUDA_TRY(cudaMemsetAsync(destination, 0, bytes, cuda_stream(stream)));
}

#else  // every stream is a host stream

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

void copy_to_device_async(void* destination, const void* source, std::size_t bytes,
                          const Stream& stream) {
  stream.enqueue([destination, source, bytes] { std::memcpy(destination, source, bytes); });
}

void copy_async(void* destination, const void* source, std::size_t bytes, const Stream& stream) {
  if (bytes != 0) {
    stream.enqueue([destination, source, bytes] { std::memcpy(destination, source, bytes); });
  }
}

void zero_async(void* destination, std::size_t bytes, const Stream& stream) {
  if (bytes != 0) {
    stream.enqueue([destination, bytes] { std::memset(destination, 0, bytes); });
  }
}

#endif

}  // namespace cohort::detail
