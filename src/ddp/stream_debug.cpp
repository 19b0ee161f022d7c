#include "stream_debug.hpp"

#include <cohort/core/env.hpp>
#include <cohort/core/error.hpp>

#if COHORT_WITH_CUDA
#include <cohort/core/detail/cuda_check.hpp>
#include <cohort/core/detail/cuda_device_scope.hpp>

#include <cuda_runtime_api.h>

#include <cstring>
#include <vector>
#endif

#include <string>

namespace cohort::detail {

bool debug_streams_enabled() {
  return env::boolean(env::kDebugStreams);
}

void check_host_waited(const Stream& compute, std::string_view parameter) {
  const std::optional<std::string_view> call = unwaited_host_work(compute);
  if (!call) {
    return;
  }
  COHORT_FAIL(InvalidArgument,
              std::string(env::kDebugStreams) + ": grad_ready('" + std::string(parameter) +
                  "') on the host after " + std::string(*call) +
                  " enqueued work on the compute stream, which runs on a thread of its own "
                  "(host_compute = HostExecution::worker, or a stream you passed), and the host "
                  "has not waited for that work since: the gradient was written, and the "
                  "parameters read, while it could still be running, which trains silently "
                  "wrong. Call dp.compute_stream().synchronize() after " +
                  std::string(*call) +
                  " and before the host touches the arenas, enqueue your compute on "
                  "dp.compute_stream(), or leave host_compute at its default "
                  "(HostExecution::caller), which runs that work before each call returns");
}

void check_gradient_settled(const TensorView& gradient, const Stream& compute,
                            std::string_view parameter, bool stream_given) {
#if COHORT_WITH_CUDA
  if (!gradient.device().is_cuda() || gradient.bytes() == 0 || compute.capturing()) {
    return;
  }
  const CudaDeviceScope scope(gradient.device().index());
  auto* stream = static_cast<cudaStream_t>(compute.native_handle());
  std::vector<std::byte> at_mark(gradient.bytes());
  std::vector<std::byte> settled(gradient.bytes());
  COHORT_CUDA_TRY(cudaMemcpyAsync(at_mark.data(), gradient.data(), gradient.bytes(),
                                  cudaMemcpyDeviceToHost, stream));
  COHORT_CUDA_TRY(cudaStreamSynchronize(stream));
  // Every stream of the device, the one that wrote the gradient included, reaches its end.
  COHORT_CUDA_TRY(cudaDeviceSynchronize());
  COHORT_CUDA_TRY(cudaMemcpyAsync(settled.data(), gradient.data(), gradient.bytes(),
                                  cudaMemcpyDeviceToHost, stream));
  COHORT_CUDA_TRY(cudaStreamSynchronize(stream));
  if (std::memcmp(at_mark.data(), settled.data(), at_mark.size()) == 0) {
    return;
  }
  COHORT_FAIL(InvalidArgument,
              std::string(env::kDebugStreams) + ": grad_ready('" + std::string(parameter) +
                  "'): the gradient changed after it was marked ready: work on a stream that " +
                  (stream_given ? "is neither the stream passed to grad_ready nor the compute "
                                  "stream"
                                : "the compute stream does not wait for") +
                  " was still writing it, so its all-reduce would average a half-written "
                  "gradient. Write gradients with work on dp.compute_stream(), or pass the "
                  "stream that writes them: dp.grad_ready(handle, stream)");
#else
  (void)gradient;
  (void)compute;
  (void)parameter;
  (void)stream_given;
#endif
}

}  // namespace cohort::detail
