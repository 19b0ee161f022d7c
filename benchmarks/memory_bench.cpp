// Memory resources: what an allocation costs on the host, and what a streaming kernel gets from
// device and managed memory on a GPU.
//
//   memory_bench --benchmark_filter=Host          # allocate + free; the median is the aggregate
//   memory_bench --benchmark_filter=Stream        # GPU: bytes/s and % of a device-to-device copy
//
// Host: a cached allocate + free from HostPoolResource (target: median under 1 us) next to
// malloc/free and HostResource (aligned_alloc) for the same sizes.
// GPU: y = a * x + y over 1 GiB arrays (12 bytes per element: read x and y, write y), timed with
// CUDA events, from cudaMalloc memory and from managed memory in three placements. Each reports
// bytes/s and `pct_of_copy`, its rate as a percent of a measured 1 GiB cudaMemcpyAsync
// device-to-device copy (2 bytes moved per byte copied). Without a GPU they are skipped with the
// reason.

#include <cohort/core/device.hpp>
#include <cohort/core/error.hpp>
#include <cohort/memory/host_pool.hpp>
#include <cohort/memory/host_resource.hpp>

#include "common/benchmark_main.hpp"

#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#if COHORT_WITH_CUDA
#include <cohort/core/device_span.hpp>
#include <cohort/core/stream.hpp>
#include <cohort/memory/buffer.hpp>
#include <cohort/memory/managed.hpp>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <stdexcept>
#endif

namespace {

const std::vector<std::int64_t> kHostSizes = {256, 4096, 64 << 10, 1 << 20};

void BM_HostPoolAllocateFree(benchmark::State& state) {
  static const auto pool = std::make_shared<cohort::HostPoolResource>();
  const auto bytes = static_cast<std::size_t>(state.range(0));
  pool->deallocate(pool->allocate(bytes), bytes);  // warm: the block is cached from here on
  for (auto _ : state) {
    void* pointer = pool->allocate(bytes);
    benchmark::DoNotOptimize(pointer);
    pool->deallocate(pointer, bytes);
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_HostPoolAllocateFree)
    ->ArgsProduct({kHostSizes})
    ->ThreadRange(1, 4)
    ->Repetitions(5)
    ->DisplayAggregatesOnly(true)
    ->UseRealTime();

void BM_HostMallocFree(benchmark::State& state) {
  const auto bytes = static_cast<std::size_t>(state.range(0));
  for (auto _ : state) {
    void* pointer = std::malloc(bytes);
    benchmark::DoNotOptimize(pointer);
    std::free(pointer);
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_HostMallocFree)
    ->ArgsProduct({kHostSizes})
    ->Repetitions(5)
    ->DisplayAggregatesOnly(true)
    ->UseRealTime();

void BM_HostResourceAllocateFree(benchmark::State& state) {
  const auto resource = std::make_shared<cohort::HostResource>();
  const auto bytes = static_cast<std::size_t>(state.range(0));
  for (auto _ : state) {
    void* pointer = resource->allocate(bytes);
    benchmark::DoNotOptimize(pointer);
    resource->deallocate(pointer, bytes);
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_HostResourceAllocateFree)
    ->ArgsProduct({kHostSizes})
    ->Repetitions(5)
    ->DisplayAggregatesOnly(true)
    ->UseRealTime();

#if COHORT_WITH_CUDA

}  // namespace

namespace cohort_bench {
void launch_axpy(float a, cohort::DeviceSpan<const float> x, cohort::DeviceSpan<float> y,
                 void* cuda_stream);  // memory_bench_kernels.cu
}  // namespace cohort_bench

namespace {

constexpr std::size_t kStreamBytes = std::size_t{1} << 30;  // per array
constexpr std::size_t kStreamCount = kStreamBytes / sizeof(float);
constexpr double kBytesMovedPerIteration = 3.0 * static_cast<double>(kStreamBytes);

void check(cudaError_t status, const char* call) {
  if (status != cudaSuccess) {
    throw std::runtime_error(std::string(call) + ": " + cudaGetErrorString(status));
  }
}
#define BENCH_CUDA(call) check((call), #call)

/// Skips `state` without a GPU; true when the benchmark can run.
bool have_gpu(benchmark::State& state) {
  if (cohort::cuda_device_count() > 0) {
    return true;
  }
  static const std::string reason = "no GPU: " + cohort::cuda_unavailable_reason();
  state.SkipWithError(reason.c_str());
  return false;
}

/// Times `body` (work enqueued on `stream`) with CUDA events; seconds.
template <typename Body>
double time_on_stream(cudaStream_t stream, Body&& body) {
  cudaEvent_t start = nullptr;
  cudaEvent_t end = nullptr;
  BENCH_CUDA(cudaEventCreate(&start));
  BENCH_CUDA(cudaEventCreate(&end));
  BENCH_CUDA(cudaEventRecord(start, stream));
  body();
  BENCH_CUDA(cudaEventRecord(end, stream));
  BENCH_CUDA(cudaEventSynchronize(end));
  float milliseconds = 0.0f;
  BENCH_CUDA(cudaEventElapsedTime(&milliseconds, start, end));
  BENCH_CUDA(cudaEventDestroy(start));
  BENCH_CUDA(cudaEventDestroy(end));
  return static_cast<double>(milliseconds) / 1e3;
}

/// The ceiling: bytes/s moved (read + write) by a 1 GiB device-to-device cudaMemcpyAsync, the
/// median of 9 after a warm-up. Measured once per process.
double copy_bytes_per_second() {
  static const double rate = [] {
    void* source = nullptr;
    void* destination = nullptr;
    BENCH_CUDA(cudaMalloc(&source, kStreamBytes));
    BENCH_CUDA(cudaMalloc(&destination, kStreamBytes));
    cudaStream_t stream = nullptr;
    BENCH_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    BENCH_CUDA(cudaMemsetAsync(source, 0, kStreamBytes, stream));
    std::vector<double> seconds;
    for (int i = 0; i < 10; ++i) {
      const double elapsed = time_on_stream(stream, [&] {
        BENCH_CUDA(
            cudaMemcpyAsync(destination, source, kStreamBytes, cudaMemcpyDeviceToDevice, stream));
      });
      if (i > 0) {
        seconds.push_back(elapsed);
      }
    }
    BENCH_CUDA(cudaStreamDestroy(stream));
    BENCH_CUDA(cudaFree(source));
    BENCH_CUDA(cudaFree(destination));
    std::nth_element(seconds.begin(), seconds.begin() + 4, seconds.end());
    return 2.0 * static_cast<double>(kStreamBytes) / seconds[4];
  }();
  return rate;
}

void report(benchmark::State& state, double timed_seconds) {
  const double iterations = static_cast<double>(state.iterations());
  state.SetBytesProcessed(static_cast<std::int64_t>(iterations * kBytesMovedPerIteration));
  const double rate = iterations * kBytesMovedPerIteration / timed_seconds;
  state.counters["pct_of_copy"] = 100.0 * rate / copy_bytes_per_second();
  state.counters["copy_GBps"] = copy_bytes_per_second() / 1e9;
}

void BM_DeviceCopyCeiling(benchmark::State& state) {
  if (!have_gpu(state)) {
    return;
  }
  for (auto _ : state) {
    state.SetIterationTime(2.0 * static_cast<double>(kStreamBytes) / copy_bytes_per_second());
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(2.0 * static_cast<double>(kStreamBytes) *
                                                    static_cast<double>(state.iterations())));
}
BENCHMARK(BM_DeviceCopyCeiling)->UseManualTime()->Iterations(1)->Unit(benchmark::kMillisecond);

void BM_StreamDeviceMalloc(benchmark::State& state) {
  if (!have_gpu(state)) {
    return;
  }
  void* x = nullptr;
  void* y = nullptr;
  cudaStream_t stream = nullptr;
  BENCH_CUDA(cudaMalloc(&x, kStreamBytes));
  BENCH_CUDA(cudaMalloc(&y, kStreamBytes));
  BENCH_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  BENCH_CUDA(cudaMemsetAsync(x, 0, kStreamBytes, stream));
  BENCH_CUDA(cudaMemsetAsync(y, 0, kStreamBytes, stream));
  const cohort::DeviceSpan<const float> xs(static_cast<const float*>(x), kStreamCount);
  const cohort::DeviceSpan<float> ys(static_cast<float*>(y), kStreamCount);
  cohort_bench::launch_axpy(2.0f, xs, ys, stream);  // warm-up
  double timed = 0.0;
  for (auto _ : state) {
    const double seconds =
        time_on_stream(stream, [&] { cohort_bench::launch_axpy(2.0f, xs, ys, stream); });
    state.SetIterationTime(seconds);
    timed += seconds;
  }
  report(state, timed);
  BENCH_CUDA(cudaStreamDestroy(stream));
  BENCH_CUDA(cudaFree(x));
  BENCH_CUDA(cudaFree(y));
}
BENCHMARK(BM_StreamDeviceMalloc)->UseManualTime()->Iterations(20)->Unit(benchmark::kMillisecond);

enum class Placement {
  prefetched,         // prefetched to the device once: resident, the steady state
  host_first_touch,   // written by the host before every kernel, no prefetch: migrates by faults
  preferred_on_host,  // preferred location host, accessed by the device: read remotely
};

void BM_StreamManaged(benchmark::State& state, Placement placement) {
  if (!have_gpu(state)) {
    return;
  }
  const cohort::Device gpu = cohort::Device::cuda(0);
  const cohort::Stream stream = cohort::Stream::create(gpu);
  auto* const cuda_stream = static_cast<cudaStream_t>(stream.native_handle());
  std::shared_ptr<cohort::MemoryResource> managed;
  cohort::Buffer x;
  cohort::Buffer y;
  try {  // refuses more than the device has free (ManagedOptions::allow_oversubscription is off)
    managed = cohort::make_managed_resource({.device = 0});
    x = cohort::Buffer(managed, kStreamBytes);
    y = cohort::Buffer(managed, kStreamBytes);
  } catch (const cohort::Error& error) {
    static std::string message;
    message = error.what();
    state.SkipWithError(message.c_str());
    return;
  }
  const auto touch_on_host = [&] {
    std::fill_n(x.view<float>().data(), kStreamCount, 1.0f);
    std::fill_n(y.view<float>().data(), kStreamCount, 0.0f);
  };
  if (placement == Placement::preferred_on_host) {
    for (const cohort::Buffer* buffer : {&x, &y}) {
      cohort::managed::set_preferred_location(*buffer, cohort::Device::host());
      cohort::managed::set_accessed_by(*buffer, gpu);
    }
  }
  touch_on_host();
  if (placement == Placement::prefetched) {
    cohort::managed::prefetch(x, gpu, stream);
    cohort::managed::prefetch(y, gpu, stream);
  }
  const cohort::DeviceSpan<const float> xs = x.device_view<const float>();
  const cohort::DeviceSpan<float> ys = y.device_view<float>();
  if (placement != Placement::host_first_touch) {
    cohort_bench::launch_axpy(2.0f, xs, ys, cuda_stream);  // warm-up
  }
  stream.synchronize();
  double timed = 0.0;
  for (auto _ : state) {
    if (placement == Placement::host_first_touch) {
      touch_on_host();  // untimed: pages move back to the host
    }
    const double seconds =
        time_on_stream(cuda_stream, [&] { cohort_bench::launch_axpy(2.0f, xs, ys, cuda_stream); });
    state.SetIterationTime(seconds);
    timed += seconds;
  }
  report(state, timed);
}
BENCHMARK_CAPTURE(BM_StreamManaged, prefetched, Placement::prefetched)
    ->UseManualTime()
    ->Iterations(20)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_StreamManaged, host_first_touch, Placement::host_first_touch)
    ->UseManualTime()
    ->Iterations(5)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_StreamManaged, preferred_on_host, Placement::preferred_on_host)
    ->UseManualTime()
    ->Iterations(5)
    ->Unit(benchmark::kMillisecond);

#endif  // COHORT_WITH_CUDA

}  // namespace

int main(int argc, char** argv) {
  return cohort::bench::benchmark_main(
      argc, argv, "memory_bench",
      "memory_bench: what an allocation costs from cohort's host pool against malloc, and on a GPU "
      "what a streaming kernel gets from device and managed memory as a percent of a device copy "
      "(skipped with the reason without one).",
      "  memory_bench --benchmark_filter=Host    # allocate + free\n  memory_bench "
      "--benchmark_filter=Stream  # GPU: bytes/s and % of a device-to-device copy\n");
}
