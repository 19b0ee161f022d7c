#pragma once

// Element-wise operations DataParallel runs on its arenas, in stream order, on the host (a task
// on the host stream) or on a GPU (a kernel or memset on the CUDA stream).
// On a GPU the wire-compression casts (f32 <-> bf16/f16) are the kernels' one vectorized cast
// kernel (kernels::cuda::cast); the host loops here are their reference.

#include <cohort/core/stream.hpp>
#include <cohort/core/tensor_view.hpp>

#include <cstddef>

namespace cohort::detail {

/// Sets every element of `data` to zero, after the work already on `stream`.
void fill_zero(TensorView data, const Stream& stream);

/// Converts `input` into `output` (same count; f32 to bf16/f16 rounding to nearest even, or
/// bf16/f16 to f32 exactly), after the work already on `stream`.
void convert(TensorView input, TensorView output, const Stream& stream);

}  // namespace cohort::detail
