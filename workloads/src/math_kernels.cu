// The CUDA kernels behind layers::Math: small, one thread per output element or row; the GEMMs
// are cuBLAS (math.cpp).

#include "math_kernels.hpp"

#include <cohort/core/detail/cuda_launch.hpp>
#include <cohort/core/error.hpp>

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstring>
#include <string>

namespace layers::kernels {
namespace {

constexpr int kThreads = 256;

unsigned blocks_for(std::size_t count) {
  return static_cast<unsigned>((count + kThreads - 1) / kThreads);
}

cudaStream_t as_cuda(void* stream) {
  return static_cast<cudaStream_t>(stream);
}

__global__ void bias_activation_kernel(float* y, const float* bias, int rows, int cols, bool relu) {
  const std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::size_t total = static_cast<std::size_t>(rows) * static_cast<std::size_t>(cols);
  if (i >= total) return;
  const float value = y[i] + bias[i % static_cast<std::size_t>(cols)];
  y[i] = relu && value < 0.0f ? 0.0f : value;
}

__global__ void relu_backward_kernel(float* grad, const float* activation, std::size_t count) {
  const std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < count && activation[i] <= 0.0f) grad[i] = 0.0f;
}

__global__ void column_sums_kernel(const float* x, int rows, int cols, float* out) {
  const int c = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (c >= cols) return;
  float sum = 0.0f;
  for (int r = 0; r < rows; ++r) sum += x[static_cast<std::size_t>(r) * cols + c];
  out[c] = sum;
}

__global__ void softmax_cross_entropy_kernel(const float* logits, const std::int32_t* labels,
                                             int rows, int classes, float grad_scale,
                                             float* grad_logits, double* stats) {
  const int r = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (r >= rows) return;
  const float* row = logits + static_cast<std::size_t>(r) * classes;
  int best = 0;
  float top = row[0];
  for (int c = 1; c < classes; ++c) {
    if (row[c] > top) {
      top = row[c];
      best = c;
    }
  }
  float total = 0.0f;
  for (int c = 0; c < classes; ++c) total += expf(row[c] - top);
  const int label = labels[r];
  const float log_total = logf(total);
  atomicAdd(&stats[0], static_cast<double>(log_total - (row[label] - top)));
  if (best == label) atomicAdd(&stats[1], 1.0);
  if (grad_logits == nullptr) return;
  float* grad = grad_logits + static_cast<std::size_t>(r) * classes;
  for (int c = 0; c < classes; ++c) {
    const float p = expf(row[c] - top) / total;
    grad[c] = (p - (c == label ? 1.0f : 0.0f)) * grad_scale;
  }
}

__global__ void f32_to_bf16_kernel(const float* from, __nv_bfloat16* to, std::size_t count) {
  const std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < count) to[i] = __float2bfloat16_rn(from[i]);
}

__global__ void bf16_to_f32_kernel(const __nv_bfloat16* from, float* to, std::size_t count) {
  const std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < count) to[i] = __bfloat162float(from[i]);
}

__device__ std::uint64_t global_nanoseconds() {
  std::uint64_t now = 0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  return now;
}

__global__ void spin_kernel(std::uint64_t nanoseconds) {
  const std::uint64_t start = global_nanoseconds();
  while (global_nanoseconds() - start < nanoseconds) {
  }
}

}  // namespace

void bias_activation(float* y, const float* bias, int rows, int cols, bool relu, void* stream) {
  const std::size_t total = static_cast<std::size_t>(rows) * static_cast<std::size_t>(cols);
  if (total == 0) return;
  cohort::detail::launch_kernel("bias_activation", bias_activation_kernel, dim3(blocks_for(total)),
                                dim3(kThreads), as_cuda(stream), 0, y, bias, rows, cols, relu);
}

void relu_backward(float* grad, const float* activation, std::size_t count, void* stream) {
  if (count == 0) return;
  cohort::detail::launch_kernel("relu_backward", relu_backward_kernel, dim3(blocks_for(count)),
                                dim3(kThreads), as_cuda(stream), 0, grad, activation, count);
}

void column_sums(const float* x, int rows, int cols, float* out, void* stream) {
  if (cols <= 0) return;
  cohort::detail::launch_kernel("column_sums", column_sums_kernel,
                                dim3(blocks_for(static_cast<std::size_t>(cols))), dim3(kThreads),
                                as_cuda(stream), 0, x, rows, cols, out);
}

void softmax_cross_entropy(const float* logits, const std::int32_t* labels, int rows, int classes,
                           float grad_scale, float* grad_logits, double* stats, void* stream) {
  if (rows <= 0) return;
  cohort::detail::launch_kernel("softmax_cross_entropy", softmax_cross_entropy_kernel,
                                dim3(blocks_for(static_cast<std::size_t>(rows))), dim3(kThreads),
                                as_cuda(stream), 0, logits, labels, rows, classes, grad_scale,
                                grad_logits, stats);
}

void f32_to_bf16(const float* from, std::uint16_t* to, std::size_t count, void* stream) {
  if (count == 0) return;
  cohort::detail::launch_kernel("f32_to_bf16", f32_to_bf16_kernel, dim3(blocks_for(count)),
                                dim3(kThreads), as_cuda(stream), 0, from,
                                reinterpret_cast<__nv_bfloat16*>(to), count);
}

void bf16_to_f32(const std::uint16_t* from, float* to, std::size_t count, void* stream) {
  if (count == 0) return;
  cohort::detail::launch_kernel("bf16_to_f32", bf16_to_f32_kernel, dim3(blocks_for(count)),
                                dim3(kThreads), as_cuda(stream), 0,
                                reinterpret_cast<const __nv_bfloat16*>(from), to, count);
}

void spin(std::uint64_t nanoseconds, void* stream) {
  cohort::detail::launch_kernel("spin", spin_kernel, dim3(1), dim3(1), as_cuda(stream), 0,
                                nanoseconds);
}

}  // namespace layers::kernels
