#pragma once

// The element-wise conversion DataParallel runs on its arenas, in stream order, on the host (a
// task on the host stream) or on a GPU (a kernel on the CUDA stream). Zeroing an arena is
// detail::zero_async (cohort/memory/detail/stream_copy.hpp).
// On a GPU the wire-compression casts (f32 <-> bf16/f16) are the kernels' one vectorized cast
// kernel (kernels::cuda::cast); the host loops here are their reference.

#include <cohort/core/stream.hpp>
#include <cohort/core/tensor_view.hpp>

#include <cstddef>

namespace cohort::detail {

/// Converts `input` into `output` (same count; f32 to bf16/f16 rounding to nearest even, or
/// bf16/f16 to f32 exactly), after the work already on `stream`.
void convert(TensorView input, TensorView output, const Stream& stream);

}  // namespace cohort::detail
