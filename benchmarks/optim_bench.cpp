// Fused optimizer steps: bytes/s and percent of a measured copy ceiling.
//
//   optim_bench --benchmark_filter=Host     # the host loops, one core
//   optim_bench --benchmark_filter=Cuda     # a GPU (skipped with the reason without one)
//
// Bytes are those the step must move (Note [Fused optimizer step] in cohort/optim/optimizer.hpp):
//   AdamW, f32 params:        read p, g, m, v; write p, m, v                     = 28 B/param
//   AdamW, bf16 params+grads: read g(2), master, m, v; write master, m, v, p(2)  = 28 B/param
//   SGD with momentum, f32:   read p, g, buf; write p, buf                       = 20 B/param
// The ceiling is a copy of a 512 MiB buffer (memcpy on the host, cudaMemcpyAsync device to device
// on a GPU), counting 2 bytes moved per byte copied. Counters: bytes_per_second, pct_of_copy.
// Targets: AdamW at least 50% of single-core memcpy on the host, 90% of the copy on a GPU.

#include <cohort/core/device.hpp>
#include <cohort/core/float16.hpp>
#include <cohort/core/stream.hpp>
#include <cohort/optim/adamw.hpp>
#include <cohort/optim/sgd.hpp>

#include "common/benchmark_main.hpp"

#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <vector>

#if COHORT_WITH_CUDA
#include <cohort/core/error.hpp>

#include <cuda_runtime_api.h>
#endif

namespace {

constexpr std::size_t kCopyBytes = std::size_t{512} << 20;
const std::vector<std::int64_t> kParams = {1 << 20, 16 << 20, 64 << 20};

template <typename Copy>
double measure_copy(Copy copy) {
  copy();  // warm: pages touched, caches and clocks up
  double best = 0.0;
  for (int i = 0; i < 5; ++i) {
    const auto start = std::chrono::steady_clock::now();
    copy();
    const std::chrono::duration<double> seconds = std::chrono::steady_clock::now() - start;
    best = std::max(best, 2.0 * static_cast<double>(kCopyBytes) / seconds.count());
  }
  return best;
}

double host_copy_bytes_per_second() {
  static const double rate = [] {
    std::vector<char> from(kCopyBytes, 1);
    std::vector<char> to(kCopyBytes, 2);
    return measure_copy([&] {
      std::memcpy(to.data(), from.data(), kCopyBytes);
      benchmark::ClobberMemory();
    });
  }();
  return rate;
}

/// bytes/s (from the timing Google Benchmark uses: real or manual time) and its percent of the
/// copy ceiling, from `seconds`, the time the iterations took.
void report(benchmark::State& state, double bytes_per_step, double seconds, double ceiling) {
  state.SetBytesProcessed(static_cast<std::int64_t>(bytes_per_step) * state.iterations());
  const double rate = bytes_per_step * static_cast<double>(state.iterations()) / seconds;
  state.counters["pct_of_copy"] = 100.0 * rate / ceiling;
  state.counters["copy_GBps"] = ceiling / 1e9;
}

/// Seconds since construction.
class Stopwatch {
 public:
  double seconds() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }

 private:
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

void BM_HostCopy(benchmark::State& state) {
  std::vector<char> from(kCopyBytes, 1);
  std::vector<char> to(kCopyBytes, 2);
  const double ceiling = host_copy_bytes_per_second();
  double seconds = 0.0;
  for (auto _ : state) {
    const Stopwatch watch;
    std::memcpy(to.data(), from.data(), kCopyBytes);
    benchmark::ClobberMemory();
    seconds += watch.seconds();
  }
  report(state, 2.0 * static_cast<double>(kCopyBytes), seconds, ceiling);
}
BENCHMARK(BM_HostCopy)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(0.5);

template <typename Param, typename Optimizer, typename Options>
void host_step(benchmark::State& state, const Options& options, double bytes_per_param) {
  const auto count = static_cast<std::size_t>(state.range(0));
  const auto stream = cohort::Stream::create(cohort::Device::host());
  std::vector<Param> params(count, Param(0.5f));
  std::vector<Param> grads(count, Param(0.25f));
  Optimizer optimizer({std::span<Param>(params), std::span<Param>(grads), stream}, options);
  optimizer.step();  // warm: state pages touched
  stream.synchronize();
  const double ceiling = host_copy_bytes_per_second();
  double seconds = 0.0;
  for (auto _ : state) {
    const Stopwatch watch;
    optimizer.step();
    stream.synchronize();
    seconds += watch.seconds();
  }
  report(state, bytes_per_param * static_cast<double>(count), seconds, ceiling);
}

void BM_HostAdamWF32(benchmark::State& state) {
  host_step<float, cohort::AdamW>(state, cohort::AdamWOptions{}, 28.0);
}
void BM_HostAdamWBf16Master(benchmark::State& state) {
  host_step<cohort::bfloat16, cohort::AdamW>(state, cohort::AdamWOptions{}, 28.0);
}
void BM_HostSgdMomentumF32(benchmark::State& state) {
  host_step<float, cohort::Sgd>(state, cohort::SgdOptions{.momentum = 0.9f}, 20.0);
}
BENCHMARK(BM_HostAdamWF32)->ArgsProduct({kParams})->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_HostAdamWBf16Master)
    ->ArgsProduct({kParams})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_HostSgdMomentumF32)
    ->ArgsProduct({kParams})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

#if COHORT_WITH_CUDA

bool skip_without_gpu(benchmark::State& state) {
  if (cohort::cuda_device_count() > 0) {
    return false;
  }
  const std::string reason = "no GPU: " + cohort::cuda_unavailable_reason();
  state.SkipWithError(reason.c_str());
  return true;
}

void cuda_try(cudaError_t status) {
  if (status != cudaSuccess) {
    throw cohort::CudaError(cudaGetErrorString(status));
  }
}

/// Device-to-device copy ceiling, timed with events.
double cuda_copy_bytes_per_second(const cohort::Stream& stream) {
  static const double rate = [&] {
    void* from = nullptr;
    void* to = nullptr;
    cuda_try(cudaMalloc(&from, kCopyBytes));
    cuda_try(cudaMalloc(&to, kCopyBytes));
    auto* native = static_cast<cudaStream_t>(stream.native_handle());
    auto start = cohort::Event::create(stream.device(), true);
    auto end = cohort::Event::create(stream.device(), true);
    double best = 0.0;
    for (int i = 0; i < 6; ++i) {
      start.record(stream);
      cuda_try(cudaMemcpyAsync(to, from, kCopyBytes, cudaMemcpyDeviceToDevice, native));
      end.record(stream);
      end.synchronize();
      const double seconds = static_cast<double>(cohort::Event::elapsed_ms(start, end)) / 1e3;
      if (i > 0) {
        best = std::max(best, 2.0 * static_cast<double>(kCopyBytes) / seconds);
      }
    }
    cuda_try(cudaFree(from));
    cuda_try(cudaFree(to));
    return best;
  }();
  return rate;
}

template <typename Param, typename Optimizer, typename Options>
void cuda_step(benchmark::State& state, const Options& options, double bytes_per_param) {
  if (skip_without_gpu(state)) {
    return;
  }
  const auto count = static_cast<std::size_t>(state.range(0));
  const auto device = cohort::Device::cuda(0);
  const auto stream = cohort::Stream::create(device);
  void* params_memory = nullptr;
  void* grads_memory = nullptr;
  cuda_try(cudaMalloc(&params_memory, count * sizeof(Param)));
  cuda_try(cudaMalloc(&grads_memory, count * sizeof(Param)));
  auto* params = static_cast<Param*>(params_memory);
  auto* grads = static_cast<Param*>(grads_memory);
  cuda_try(cudaMemset(params, 0, count * sizeof(Param)));
  cuda_try(cudaMemset(grads, 0, count * sizeof(Param)));
  {
    Optimizer optimizer({cohort::TensorView::of(params, count, device),
                         cohort::TensorView::of(grads, count, device), stream},
                        options);
    optimizer.step();
    stream.synchronize();
    auto start = cohort::Event::create(device, true);
    auto end = cohort::Event::create(device, true);
    const double ceiling = cuda_copy_bytes_per_second(stream);
    double seconds = 0.0;
    for (auto _ : state) {
      start.record(stream);
      optimizer.step();
      end.record(stream);
      end.synchronize();
      const double elapsed = static_cast<double>(cohort::Event::elapsed_ms(start, end)) / 1e3;
      state.SetIterationTime(elapsed);
      seconds += elapsed;
    }
    report(state, bytes_per_param * static_cast<double>(count), seconds, ceiling);
  }
  cuda_try(cudaFree(params));
  cuda_try(cudaFree(grads));
}

void BM_CudaAdamWF32(benchmark::State& state) {
  cuda_step<float, cohort::AdamW>(state, cohort::AdamWOptions{}, 28.0);
}
void BM_CudaAdamWBf16Master(benchmark::State& state) {
  cuda_step<cohort::bfloat16, cohort::AdamW>(state, cohort::AdamWOptions{}, 28.0);
}
void BM_CudaSgdMomentumF32(benchmark::State& state) {
  cuda_step<float, cohort::Sgd>(state, cohort::SgdOptions{.momentum = 0.9f}, 20.0);
}
BENCHMARK(BM_CudaAdamWF32)->ArgsProduct({kParams})->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_CudaAdamWBf16Master)
    ->ArgsProduct({kParams})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_CudaSgdMomentumF32)
    ->ArgsProduct({kParams})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

#endif

}  // namespace

int main(int argc, char** argv) {
  return cohort::bench::benchmark_main(
      argc, argv, "optim_bench",
      "optim_bench: fused optimizer steps (AdamW and SGD, f32 and bf16) in bytes per second and as "
      "a percent of a measured copy ceiling; on the host one core, on a GPU the device (skipped "
      "with the reason without one).",
      "  optim_bench --benchmark_filter=Host     # the host loops, one core\n  optim_bench "
      "--benchmark_filter=Cuda     # a GPU\n");
}
