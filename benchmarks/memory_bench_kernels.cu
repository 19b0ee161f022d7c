// The streaming kernel of memory_bench: y = a * x + y, 12 bytes moved per element.

#include <cohort/core/detail/cuda_check.hpp>
#include <cohort/core/detail/cuda_launch.hpp>
#include <cohort/core/device_span.hpp>

#include <cuda_runtime.h>

#include <cstddef>

namespace cohort_bench {
namespace {

__global__ void axpy_kernel(float a, const float4* x, float4* y, std::size_t count4,
                            const float* x_tail, float* y_tail, std::size_t tail) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  const std::size_t first = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (std::size_t i = first; i < count4; i += stride) {
    const float4 xi = x[i];
    float4 yi = y[i];
    yi.x = a * xi.x + yi.x;
    yi.y = a * xi.y + yi.y;
    yi.z = a * xi.z + yi.z;
    yi.w = a * xi.w + yi.w;
    y[i] = yi;
  }
  if (first < tail) {
    y_tail[first] = a * x_tail[first] + y_tail[first];
  }
}

int streaming_blocks() {
  static const int blocks = [] {
    int device = 0;
    int processors = 0;
    COHORT_CUDA_TRY(cudaGetDevice(&device));
    COHORT_CUDA_TRY(cudaDeviceGetAttribute(&processors, cudaDevAttrMultiProcessorCount, device));
    return processors * 8;  // 8 blocks of 256 threads per SM: full occupancy for this kernel
  }();
  return blocks;
}

}  // namespace

/// y = a * x + y on `cuda_stream` (a cudaStream_t). Both spans are 256-byte aligned buffers.
void launch_axpy(float a, cohort::DeviceSpan<const float> x, cohort::DeviceSpan<float> y,
                 void* cuda_stream) {
  const std::size_t count4 = x.size() / 4;
  const std::size_t tail = x.size() % 4;
  cohort::detail::launch_kernel("axpy", axpy_kernel, dim3(streaming_blocks()), dim3(256),
                                static_cast<cudaStream_t>(cuda_stream), 0, a,
                                reinterpret_cast<const float4*>(x.data()),
                                reinterpret_cast<float4*>(y.data()), count4, x.data() + 4 * count4,
                                y.data() + 4 * count4, tail);
}

}  // namespace cohort_bench
