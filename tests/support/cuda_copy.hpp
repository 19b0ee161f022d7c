#pragma once

// The tests' one blocking copy between host and device memory, for code that holds no stream:
// the whole device is idle before and after it, so it is ordered with every stream, blocking or
// not. tests/lint/check_cuda_calls.py allows a pageable cudaMemcpy( here and nowhere else (a
// plain cudaMemcpy runs on the legacy stream, which a non-blocking stream does not wait for, and
// a pageable host-to-device copy may return before its data has arrived). Code that holds a
// stream copies in that stream's order instead: cohort::detail::write_now / read_after
// (cohort/memory/detail/stream_copy.hpp), or cudaMemcpyAsync on the stream.

#include <cuda_runtime_api.h>

#include <cstddef>

namespace cohort_test {

/// Copies `bytes` from `from` to `to` (`kind` as for cudaMemcpy) with the current device idle on
/// both sides; the first failing call's status.
inline cudaError_t copy_with_device_idle(void* to, const void* from, std::size_t bytes,
                                         cudaMemcpyKind kind) {
  cudaError_t status = cudaDeviceSynchronize();
  if (status == cudaSuccess) status = cudaMemcpy(to, from, bytes, kind);
  if (status == cudaSuccess) status = cudaDeviceSynchronize();
  return status;
}

}  // namespace cohort_test
