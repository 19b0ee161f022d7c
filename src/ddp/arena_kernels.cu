// CUDA side of arena_ops.hpp: zero fill and the wire casts (Note [Private casts]).
#include "arena_ops.hpp"

#include <cohort/core/float16.hpp>
#include <cohort/detail/cuda_check.hpp>

#include <cuda_runtime.h>

#include <algorithm>

namespace cohort::detail {

namespace {

constexpr unsigned kThreads = 256;

template <typename From, typename To>
__global__ void convert_kernel(const From* input, To* output, std::size_t count) {
  const std::size_t stride = static_cast<std::size_t>(blockDim.x) * gridDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += stride) {
    output[i] = To(static_cast<float>(input[i]));
  }
}

template <typename From, typename To>
void launch(const void* input, void* output, std::size_t count, cudaStream_t stream) {
  const std::size_t blocks = std::min<std::size_t>((count + kThreads - 1) / kThreads, 65535);
  convert_kernel<From, To><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
      static_cast<const From*>(input), static_cast<To*>(output), count);
  COHORT_CUDA_TRY(cudaGetLastError());
}

}  // namespace

void cuda_fill_zero(void* data, std::size_t bytes, void* cuda_stream) {
  COHORT_CUDA_TRY(cudaMemsetAsync(data, 0, bytes, static_cast<cudaStream_t>(cuda_stream)));
}

void cuda_convert(const void* input, DType input_dtype, void* output, DType output_dtype,
                  std::size_t count, void* cuda_stream) {
  auto stream = static_cast<cudaStream_t>(cuda_stream);
  if (input_dtype == DType::f32 && output_dtype == DType::bf16) {
    launch<float, bfloat16>(input, output, count, stream);
  } else if (input_dtype == DType::f32 && output_dtype == DType::f16) {
    launch<float, half>(input, output, count, stream);
  } else if (input_dtype == DType::bf16) {
    launch<bfloat16, float>(input, output, count, stream);
  } else {
    launch<half, float>(input, output, count, stream);
  }
}

}  // namespace cohort::detail
