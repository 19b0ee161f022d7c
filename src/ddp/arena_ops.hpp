#pragma once

// Element-wise operations DataParallel runs on its arenas, in stream order, on the host (a task
// on the host stream) or on a GPU (a kernel or memset on the CUDA stream).
//
// Note [Private casts]
// The wire-compression casts (f32 <-> bf16/f16) are a small kernel of this folder's own
// (arena_kernels.cu), written so the data-parallel engine does not depend on the shared kernels
// library (kernels/) while that is being written. Replace them with the shared cast kernels once
// those exist; the host loops here are the reference.

#include <cohort/comm/types.hpp>
#include <cohort/core/stream.hpp>

#include <cstddef>

namespace cohort::detail {

/// Sets every element of `data` to zero, after the work already on `stream`.
void fill_zero(TensorView data, const Stream& stream);

/// Converts `input` into `output` (same count; f32 to bf16/f16 rounding to nearest even, or
/// bf16/f16 to f32 exactly), after the work already on `stream`.
void convert(TensorView input, TensorView output, const Stream& stream);

#if COHORT_WITH_CUDA
// CUDA launches (arena_kernels.cu); `cuda_stream` is a cudaStream_t.
void cuda_fill_zero(void* data, std::size_t bytes, void* cuda_stream);
void cuda_convert(const void* input, DType input_dtype, void* output, DType output_dtype,
                  std::size_t count, void* cuda_stream);
#endif

}  // namespace cohort::detail
