#pragma once

/// @file
/// `launch_kernel`: a kernel launch checked by the status of that launch alone. Only for `.cu`
/// files (it needs cuda_runtime.h's launch templates).
///
/// Note [Checking a launch]
/// A launch is checked by the status cudaLaunchKernelEx returns for it, never by cudaGetLastError
/// (or cudaPeekAtLastError) after a `<<<...>>>` launch: those return whatever error any earlier
/// call on the thread left pending, so an ignored failure elsewhere (an out-of-memory a caller
/// handled, a query that failed) would be reported as this kernel's, and clearing it would hide
/// it from its own check. kernels/cuda_kernels.cu's Note [Launch errors] is the same rule; the
/// lint tests/lint/check_cuda_calls.py refuses the other way.

#include <cohort/core/detail/cuda_check.hpp>

#include <cuda_runtime.h>

#include <cstddef>
#include <string>
#include <utility>

namespace cohort::detail {

/// Launches `kernel` on `grid` blocks of `block` threads on `stream`, with `dynamic_shared_bytes`
/// of dynamic shared memory; throws CudaError naming `name` when the launch fails.
template <typename... Params, typename... Args>
void launch_kernel(const char* name, void (*kernel)(Params...), dim3 grid, dim3 block,
                   cudaStream_t stream, std::size_t dynamic_shared_bytes, Args&&... args) {
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = dynamic_shared_bytes;
  config.stream = stream;
  const cudaError_t status = cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
  if (status != cudaSuccess) [[unlikely]] {
    (void)cudaGetLastError();  // this launch's own error, which the runtime also left pending
    COHORT_FAIL(CudaError, std::string("launching the ") + name +
                               " kernel: " + describe_cuda_error("cudaLaunchKernelEx", status));
  }
}

}  // namespace cohort::detail
