#pragma once

/// @file
/// `CudaDeviceScope`: makes a CUDA device current for a scope. Only for code built with CUDA.

#include <cohort/core/detail/cuda_check.hpp>

#include <cuda_runtime_api.h>

namespace cohort::detail {

/// Sets `device` current, restoring the previous device on exit (the thread's binding is state
/// the caller owns, so a helper that needs another device must put it back).
class CudaDeviceScope {
 public:
  explicit CudaDeviceScope(int device) {
    COHORT_CUDA_TRY(cudaGetDevice(&previous_));
    if (previous_ != device) {
      COHORT_CUDA_TRY(cudaSetDevice(device));
      changed_ = true;
    }
  }
  ~CudaDeviceScope() {
    if (changed_) {
      COHORT_CUDA_CHECK_NOEXCEPT(cudaSetDevice(previous_));
    }
  }
  CudaDeviceScope(const CudaDeviceScope&) = delete;
  CudaDeviceScope& operator=(const CudaDeviceScope&) = delete;

 private:
  int previous_ = 0;
  bool changed_ = false;
};

}  // namespace cohort::detail
