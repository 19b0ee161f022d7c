// The CUDA probe of a build without CUDA: there is nothing to ask, only why there is no GPU.

#include "probe.hpp"

#include <cohort/core/device.hpp>

namespace cohort::doctor {

void probe_cuda(Report& report) {
  report.built_with_cuda = false;
  report.gpu_count = 0;
  report.gpu_unavailable_reason = cuda_unavailable_reason();
}

}  // namespace cohort::doctor
