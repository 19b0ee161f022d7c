#include "memory_test_kernels.hpp"

#include <cohort/core/detail/cuda_check.hpp>
#include <cohort/core/detail/cuda_launch.hpp>

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>

namespace cohort_test {
namespace {

__global__ void affine_kernel(cohort::DeviceSpan<const float> in, cohort::DeviceSpan<float> out,
                              float scale, float shift) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < in.size(); i += stride) {
    out[i] = scale * in[i] + shift;
  }
}

}  // namespace

void launch_affine(cohort::DeviceSpan<const float> in, cohort::DeviceSpan<float> out, float scale,
                   float shift, const cohort::Stream& stream) {
  COHORT_EXPECTS(in.size() == out.size(), "affine needs sizes that match");
  if (in.empty()) {
    return;
  }
  constexpr std::size_t kThreads = 256;
  constexpr std::size_t kMaxBlocks = 1024;  // grid-stride beyond
  const std::size_t blocks = std::min((in.size() + kThreads - 1) / kThreads, kMaxBlocks);
  auto* const cuda_stream = static_cast<cudaStream_t>(stream.native_handle());
  cohort::detail::launch_kernel("affine", affine_kernel, dim3(static_cast<unsigned>(blocks)),
                                dim3(static_cast<unsigned>(kThreads)), cuda_stream, 0, in, out,
                                scale, shift);
}

}  // namespace cohort_test
