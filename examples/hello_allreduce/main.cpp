/// hello_allreduce: every rank all-reduces a vector holding its rank and checks the sum.
///
///     cohortrun --nproc-per-node 4 ./hello_allreduce          # one node, this launcher
///     torchrun --nproc-per-node 4 ./hello_allreduce           # or torchrun, srun, mpirun
///
/// On GPUs the vector lives in device memory and NCCL reduces it; on the host, Gloo does.

#include <cohort/comm/world.hpp>
#include <cohort/core/error.hpp>
#include <cohort/launch/launch_info.hpp>
#include <cohort/memory/buffer.hpp>
#include <cohort/memory/device_pool.hpp>
#include <cohort/memory/host_resource.hpp>

#include <cstdio>
#include <cstring>
#include <vector>

#if COHORT_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

int main() {
  try {
    cohort::World world = cohort::init();
    const cohort::Device device = world.device();
    const cohort::Stream stream = cohort::Stream::create(device);
    constexpr std::size_t kCount = 1 << 20;

    // The rank's vector, in the memory its backend reduces: host memory, or device memory.
    std::shared_ptr<cohort::MemoryResource> resource;
    if (device.is_host()) {
      resource = std::make_shared<cohort::HostResource>();
    } else {
      cohort::DevicePoolOptions options;
      options.device = device.index();
      resource = cohort::make_device_pool_resource(options);
    }
    cohort::Buffer buffer(resource, kCount * sizeof(float), stream);
    std::vector<float> host(kCount, static_cast<float>(world.rank()));

    // Copies in the stream's order, so the all-reduce sees the upload and the download sees
    // the result (a plain cudaMemcpy runs on the legacy stream, unordered with `stream`).
    auto copy = [&](void* to, const void* from, bool to_device) {
      if (device.is_host()) {
        stream.enqueue([=] { std::memcpy(to, from, kCount * sizeof(float)); });
        return;
      }
#if COHORT_WITH_CUDA
      COHORT_CHECK(
          cudaMemcpyAsync(to, from, kCount * sizeof(float),
                          to_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost,
                          static_cast<cudaStream_t>(stream.native_handle())) == cudaSuccess,
          cohort::CudaError, "cudaMemcpyAsync failed");
#else
      (void)to_device;
#endif
    };
    copy(buffer.data(), host.data(), true);
    world.comm().all_reduce(cohort::TensorView(buffer.data(), kCount, cohort::DType::f32, device),
                            cohort::ReduceOp::sum, stream);
    copy(host.data(), buffer.data(), false);
    stream.synchronize();

    const int n = world.size();
    const float expected = static_cast<float>(n * (n - 1) / 2);
    std::size_t wrong = 0;
    for (float value : host) {
      wrong += value != expected ? 1 : 0;
    }
    std::printf(
        "%s: all_reduce of %zu floats gave %g everywhere%s (expected 0 + 1 + ... + %d = %g)\n",
        world.describe().c_str(), kCount, static_cast<double>(host[0]),
        wrong == 0 ? "" : " -- WRONG", n - 1, static_cast<double>(expected));
    return wrong == 0 ? 0 : 1;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "hello_allreduce: %s\n", error.what());
    cohort::record_failure(std::string("hello_allreduce: ") + error.what());  // torchrun's summary
    return 1;
  }
}
