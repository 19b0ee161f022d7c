#include <cohort/core/device.hpp>

#if COHORT_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

#include <utility>

namespace cohort {

std::string Device::to_string() const {
  return is_host() ? std::string("host") : "cuda:" + std::to_string(index_);
}

bool built_with_cuda() noexcept {
#if COHORT_WITH_CUDA
  return true;
#else
  return false;
#endif
}

namespace {

#if COHORT_WITH_CUDA
/// Probed once: CUDA device discovery is process-wide state.
std::pair<int, cudaError_t> probe_cuda() noexcept {
  static const std::pair<int, cudaError_t> result = [] {
    int count = 0;
    const cudaError_t status = cudaGetDeviceCount(&count);
    (void)cudaGetLastError();
    return std::pair<int, cudaError_t>{status == cudaSuccess ? count : 0, status};
  }();
  return result;
}
#endif

}  // namespace

int cuda_device_count() noexcept {
#if COHORT_WITH_CUDA
  return probe_cuda().first;
#else
  return 0;
#endif
}

std::string cuda_unavailable_reason() {
#if COHORT_WITH_CUDA
  const auto [count, status] = probe_cuda();
  if (count > 0) {
    return {};
  }
  switch (status) {
    case cudaSuccess:
      return "no CUDA device is visible (check CUDA_VISIBLE_DEVICES)";
    case cudaErrorInsufficientDriver:
    case cudaErrorNoDevice:
      return std::string("no usable GPU: ") + cudaGetErrorString(status) +
             " (no NVIDIA driver, or none new enough for this CUDA runtime)";
    default:
      return std::string("CUDA is unavailable: ") + cudaGetErrorName(status) + ": " +
             cudaGetErrorString(status);
  }
#else
  return "cohort was built without CUDA (COHORT_WITH_CUDA=OFF)";
#endif
}

}  // namespace cohort
