#include "sharded_ops.hpp"

#include <cohort/core/error.hpp>
#include <cohort/kernels/launch.hpp>

#if COHORT_WITH_CUDA
#include <cohort/detail/cuda_check.hpp>
#include <cohort/detail/cuda_device_scope.hpp>

#include <cuda_runtime_api.h>
#endif

#include <cstring>
#include <string>

namespace cohort::detail {

void add_on(const Stream& stream, TensorView from, TensorView to) {
  if (stream.device().is_host()) {
    stream.enqueue([from, to] { kernels::host::add(from, to); });
    return;
  }
#if COHORT_WITH_CUDA
  const CudaDeviceScope scope(stream.device().index());
  kernels::cuda::add(from, to, stream.native_handle());
#else
  COHORT_FAIL(InvalidArgument,
              "cannot add on " + stream.device().to_string() + ": cohort was built without CUDA");
#endif
}

void copy_on(const Stream& stream, TensorView from, TensorView to) {
  COHORT_EXPECTS(from.dtype() == to.dtype() && from.count() == to.count(),
                 "copy_on needs views of the same dtype and count");
  if (from.count() == 0) return;
  if (stream.device().is_host()) {
    stream.enqueue([from, to] { std::memcpy(to.data(), from.data(), from.bytes()); });
    return;
  }
#if COHORT_WITH_CUDA
  const CudaDeviceScope scope(stream.device().index());
  COHORT_CUDA_TRY(cudaMemcpyAsync(to.data(), from.data(), from.bytes(), cudaMemcpyDeviceToDevice,
                                  static_cast<cudaStream_t>(stream.native_handle())));
#else
  COHORT_FAIL(InvalidArgument,
              "cannot copy on " + stream.device().to_string() + ": cohort was built without CUDA");
#endif
}

}  // namespace cohort::detail
