#pragma once

/// @file
/// Checks for CUDA runtime calls. Only for code built with the CUDA backend: this header includes
/// the CUDA runtime, and host-only users never include it.

#include <cohort/core/error.hpp>
#include <cohort/core/logging.hpp>

#include <cuda_runtime_api.h>

#include <string>

namespace cohort::detail {

/// "cudaMalloc(...) failed: cudaErrorMemoryAllocation: out of memory".
inline std::string describe_cuda_error(const char* call, cudaError_t status) {
  std::string text = call;
  text.append(" failed: ");
  text.append(cudaGetErrorName(status));
  text.append(": ");
  text.append(cudaGetErrorString(status));
  return text;
}

}  // namespace cohort::detail

/// Calls a CUDA runtime function; on failure clears the error and throws `cohort::CudaError`
/// naming the call, the error's name and text, file and line (`OutOfMemory` for allocation
/// failures).
#define COHORT_CUDA_TRY(call)                                                      \
  do {                                                                             \
    const cudaError_t cohort_status_ = (call);                                     \
    if (cohort_status_ != cudaSuccess) [[unlikely]] {                              \
      (void)cudaGetLastError();                                                    \
      if (cohort_status_ == cudaErrorMemoryAllocation) {                           \
        COHORT_FAIL(::cohort::OutOfMemory,                                         \
                    ::cohort::detail::describe_cuda_error(#call, cohort_status_)); \
      }                                                                            \
      COHORT_FAIL(::cohort::CudaError,                                             \
                  ::cohort::detail::describe_cuda_error(#call, cohort_status_));   \
    }                                                                              \
  } while (0)

/// For destructors and other noexcept paths: logs a failed call instead of throwing.
#define COHORT_CUDA_CHECK_NOEXCEPT(call)                                                        \
  do {                                                                                          \
    const cudaError_t cohort_status_ = (call);                                                  \
    if (cohort_status_ != cudaSuccess) [[unlikely]] {                                           \
      (void)cudaGetLastError();                                                                 \
      COHORT_LOG(error) << ::cohort::detail::describe_cuda_error(#call, cohort_status_) << " (" \
                        << __FILE__ << ':' << __LINE__ << ')';                                  \
    }                                                                                           \
  } while (0)
