#include <cohort/core/detail/current_device.hpp>

#include <cohort/core/error.hpp>

#if COHORT_WITH_CUDA
#include <cohort/core/detail/cuda_device_scope.hpp>
#endif

namespace cohort::detail {

#if COHORT_WITH_CUDA

CurrentDevice::CurrentDevice(Device device) {
  if (device.is_cuda()) {
    scope_ = std::make_unique<CudaDeviceScope>(device.index());
  }
}

#else

class CudaDeviceScope {};  // never created in a build without CUDA

CurrentDevice::CurrentDevice(Device device) {
  COHORT_EXPECTS(device.is_host(), device.to_string() + " needs cohort built with CUDA");
}

#endif

CurrentDevice::~CurrentDevice() = default;

}  // namespace cohort::detail
