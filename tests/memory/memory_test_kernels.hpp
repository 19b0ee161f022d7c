#pragma once

// The one kernel the memory tests need (memory_test_kernels.cu).

#include <cohort/core/device_span.hpp>
#include <cohort/core/stream.hpp>

namespace cohort_test {

/// out[i] = scale * in[i] + shift, enqueued on `stream` (a CUDA stream); sizes must match.
void launch_affine(cohort::DeviceSpan<const float> in, cohort::DeviceSpan<float> out, float scale,
                   float shift, const cohort::Stream& stream);

}  // namespace cohort_test
