#pragma once

// Helpers for the *_cuda.cpp files of src/memory (CUDA-only).

#include <cohort/core/detail/cuda_check.hpp>
#include <cohort/core/detail/cuda_device_scope.hpp>
#include <cohort/core/device.hpp>
#include <cohort/core/error.hpp>
#include <cohort/memory/memory_report.hpp>

#include <cuda_runtime_api.h>

#include <cstddef>
#include <string>

namespace cohort::detail {

/// Throws InvalidArgument unless `device` is a visible CUDA ordinal.
inline void check_cuda_ordinal(int device) {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    count = 0;
  }
  if (count == 0) {
    COHORT_FAIL(InvalidArgument, "CUDA device " + std::to_string(device) +
                                     " is not usable: " + cuda_unavailable_reason());
  }
  COHORT_EXPECTS(device >= 0 && device < count, "CUDA device " + std::to_string(device) +
                                                    " does not exist: " + std::to_string(count) +
                                                    " device(s) are visible");
}

struct DeviceMemoryInfo {
  std::size_t free_bytes = 0;
  std::size_t total_bytes = 0;
};

/// `cudaMemGetInfo` for `device`.
inline DeviceMemoryInfo device_memory_info(int device) {
  const CudaDeviceScope scope(device);
  DeviceMemoryInfo info;
  COHORT_CUDA_TRY(cudaMemGetInfo(&info.free_bytes, &info.total_bytes));
  return info;
}

/// "1073741824 bytes (1.00 GiB)".
inline std::string bytes_in_words(std::size_t bytes) {
  return std::to_string(bytes) + " bytes (" + format_bytes(bytes) + ")";
}

}  // namespace cohort::detail
