#pragma once

// Launchers of the CUDA kernels behind layers::Math (math_kernels.cu). `stream` is a
// cudaStream_t; every launch is asynchronous on it, and a failed launch throws cohort::CudaError
// (Note [Checking a launch] in cohort/core/detail/cuda_launch.hpp). Only math.cpp includes this
// file.

#include <cstddef>
#include <cstdint>

namespace layers::kernels {

void bias_activation(float* y, const float* bias, int rows, int cols, bool relu, void* stream);
void relu_backward(float* grad, const float* activation, std::size_t count, void* stream);
void column_sums(const float* x, int rows, int cols, float* out, void* stream);
void softmax_cross_entropy(const float* logits, const std::int32_t* labels, int rows, int classes,
                           float grad_scale, float* grad_logits, double* stats, void* stream);
/// bf16 is passed as its 16 bits.
void f32_to_bf16(const float* from, std::uint16_t* to, std::size_t count, void* stream);
void bf16_to_f32(const std::uint16_t* from, float* to, std::size_t count, void* stream);
/// Spins one thread block until `nanoseconds` have passed on the GPU's global timer.
void spin(std::uint64_t nanoseconds, void* stream);

}  // namespace layers::kernels
