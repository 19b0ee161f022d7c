#pragma once

// `CurrentDevice` (not public API): a `CudaDeviceScope` that code compiled without CUDA's headers
// can hold. Its code is in src/core/current_device.cpp.

#include <cohort/core/device.hpp>

#include <memory>

namespace cohort::detail {

class CudaDeviceScope;

/// Makes `device` current for the lifetime of the guard (nothing for the host): a
/// `CudaDeviceScope` for CUDA devices, usable from code compiled without CUDA's headers.
/// @throws InvalidArgument for a CUDA device in a build without CUDA.
class CurrentDevice {
 public:
  explicit CurrentDevice(Device device);
  ~CurrentDevice();
  CurrentDevice(const CurrentDevice&) = delete;
  CurrentDevice& operator=(const CurrentDevice&) = delete;

 private:
  std::unique_ptr<CudaDeviceScope> scope_;
};

}  // namespace cohort::detail
