// One rank of the NCCL tests that run as processes, launched by test_comm_gpu with torchrun's
// variables. Several of these share one GPU: each claims its own NCCL host id, so NCCL connects
// them through its socket transport (over lo) as if they were on different machines, and a wrong
// reduce op or dtype mapping shows (with one rank every collective returns its input).
// Checks all-reduce in f32, f16, bf16 and i32 with sum, avg, min and max, reduce-scatter (avg),
// all-gather and broadcast against closed forms; with the argument "timeout" or "abort", an NCCL
// collective that one rank skips, ended by the deadline or by an abort (check_fault); with
// "contexts", that each rank created a CUDA context on its own GPU only, whichever of cohort's
// threads made CUDA calls (check_contexts). Prints "rank R ok".
// Exit status: 0 on success, 1 on a wrong result, 2 on a bad argument, 3 when a cohort call
// failed, 4 without a GPU.
#include <cohort/checkpoint/checkpoint.hpp>
#include <cohort/checkpoint/preemption.hpp>
#include <cohort/comm/world.hpp>
#include <cohort/core/error.hpp>
#include <cohort/core/float16.hpp>
#include <cohort/core/stream.hpp>
#include <cohort/data/distributed_sampler.hpp>
#include <cohort/ddp/data_parallel.hpp>
#include <cohort/memory/buffer.hpp>
#include <cohort/memory/pinned_host.hpp>

#include "support/gpu_ranks.hpp"
#include "support/test_helpers.hpp"

#if COHORT_WITH_CUDA
#include <cohort/memory/detail/stream_copy.hpp>

#include <cuda.h>  // the driver's types; its functions come through cudaGetDriverEntryPoint
#include <cuda_runtime.h>

#include <unistd.h>
#endif

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#if COHORT_WITH_CUDA
namespace {

/// Rank r contributes (r + 1) + (i % 3): small integers whose sums and halves are exact in every
/// dtype checked here.
double contribution(int rank, std::size_t i) {
  return rank + 1 + static_cast<double>(i % 3);
}

double expected(cohort::ReduceOp op, int n, std::size_t i) {
  const double tail = static_cast<double>(i % 3);
  switch (op) {
    case cohort::ReduceOp::sum:
      return n * (n + 1) / 2.0 + n * tail;
    case cohort::ReduceOp::avg:
      return (n + 1) / 2.0 + tail;
    case cohort::ReduceOp::min:
      return 1.0 + tail;
    case cohort::ReduceOp::max:
      return n + tail;
  }
  return 0.0;
}

using cohort_test::from_double;
using cohort_test::to_double;

void check_cuda(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(status));
  }
}

/// Device memory for `count` values of T, freed on scope exit.
template <typename T>
struct DeviceArray {
  explicit DeviceArray(std::size_t n) : count(n) {
    check_cuda(cudaMalloc(&data, count * sizeof(T)), "cudaMalloc");
  }
  ~DeviceArray() { cudaFree(data); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  /// Queued on `stream`, which the collectives then use: a plain cudaMemcpy would run on the
  /// legacy stream, which cohort's non-blocking streams do not wait for. `host` must outlive the
  /// copy (every caller downloads, which synchronizes, before its vector goes).
  void upload(const std::vector<T>& host, const cohort::Stream& stream) {
    check_cuda(cudaMemcpyAsync(data, host.data(), count * sizeof(T), cudaMemcpyHostToDevice,
                               static_cast<cudaStream_t>(stream.native_handle())),
               "upload");
  }
  std::vector<T> download(const cohort::Stream& stream) const {
    std::vector<T> host(count);
    cohort::detail::read_after(host.data(), data, count * sizeof(T), stream);
    return host;
  }
  cohort::TensorView view(cohort::Device device) {
    return cohort::TensorView::of(data, count, device);
  }
  T* data = nullptr;
  std::size_t count;
};

int failures = 0;

void fail(int rank, const std::string& what, std::size_t i, double got, double want) {
  if (++failures <= 5) {
    std::fprintf(stderr, "rank %d: %s element %zu is %g, expected %g\n", rank, what.c_str(), i, got,
                 want);
  }
}

template <typename T>
void check_all_reduce(cohort::World& world, const cohort::Stream& stream, const char* dtype) {
  constexpr std::size_t kCount = 1001;  // odd: vector bodies and tails
  const int n = world.size();
  const int r = world.rank();
  std::vector<T> mine(kCount);
  for (std::size_t i = 0; i < kCount; ++i) mine[i] = from_double<T>(contribution(r, i));
  for (const cohort::ReduceOp op : {cohort::ReduceOp::sum, cohort::ReduceOp::avg,
                                    cohort::ReduceOp::min, cohort::ReduceOp::max}) {
    if (op == cohort::ReduceOp::avg && std::is_integral_v<T>) continue;  // no integer mean
    DeviceArray<T> data(kCount);
    data.upload(mine, stream);
    world.comm().all_reduce(data.view(world.device()), op, stream);
    const auto got = data.download(stream);
    for (std::size_t i = 0; i < kCount; ++i) {
      const double want = expected(op, n, i);
      if (to_double(got[i]) != want) {
        fail(r, std::string("all_reduce ") + dtype + " " + std::string(cohort::to_string(op)), i,
             to_double(got[i]), want);
      }
    }
  }
}

void check_layouts(cohort::World& world, const cohort::Stream& stream) {
  constexpr std::size_t kBlock = 4097;
  const int n = world.size();
  const int r = world.rank();
  const auto total = kBlock * static_cast<std::size_t>(n);
  std::vector<float> mine(total);
  for (std::size_t i = 0; i < total; ++i) mine[i] = static_cast<float>(contribution(r, i));
  DeviceArray<float> all(total);
  DeviceArray<float> block(kBlock);
  all.upload(mine, stream);
  world.comm().reduce_scatter(all.view(world.device()), block.view(world.device()),
                              cohort::ReduceOp::avg, stream);
  auto got = block.download(stream);
  for (std::size_t k = 0; k < kBlock; ++k) {
    const std::size_t i = static_cast<std::size_t>(r) * kBlock + k;
    const double want = expected(cohort::ReduceOp::avg, n, i);
    if (static_cast<double>(got[k]) != want) fail(r, "reduce_scatter", i, got[k], want);
  }
  const std::vector<float> tens(kBlock, static_cast<float>(r + 10));
  block.upload(tens, stream);
  world.comm().all_gather(block.view(world.device()), all.view(world.device()), stream);
  got = all.download(stream);
  for (std::size_t i = 0; i < total; ++i) {
    const double want = static_cast<double>(i / kBlock) + 10.0;
    if (static_cast<double>(got[i]) != want) fail(r, "all_gather", i, got[i], want);
  }
  all.upload(mine, stream);
  world.comm().broadcast(all.view(world.device()), n - 1, stream);
  got = all.download(stream);
  for (std::size_t i = 0; i < total; ++i) {
    const double want = contribution(n - 1, i);
    if (static_cast<double>(got[i]) != want) fail(r, "broadcast", i, got[i], want);
  }
}

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

/// `mode` "timeout": rank 1 skips an all-reduce, and rank 0's must fail with a TimeoutError at
/// its deadline (COHORT_TIMEOUT), not before and not long after, naming rank 1; the failure must
/// then reach rank 1, whose communicator aborts. `mode` "abort": rank 0 aborts its communicator
/// while an all-reduce that rank 1 skipped is in flight; the collective must fail with the
/// abort's reason long before the deadline. After either, a new collective fails at once.
/// Returns the number of failed checks.
int check_fault(cohort::World& world, const cohort::Stream& stream, const std::string& mode) {
  int wrong = 0;
  auto expect = [&](bool ok, const std::string& what) {
    if (!ok) {
      ++wrong;
      std::fprintf(stderr, "rank %d: %s\n", world.rank(), what.c_str());
    }
  };
  DeviceArray<float> data(1024);
  data.upload(std::vector<float>(1024, 1.0f), stream);
  world.comm().all_reduce(data.view(world.device()), cohort::ReduceOp::sum, stream).wait();
  if (world.rank() != 0) {
    // Skips the next collective; hears of rank 0's failure through the store, or of its end.
    try {
      world.store().wait({"fault-checked"}, std::chrono::seconds(120));
    } catch (const cohort::Error&) {
    }
    if (mode == "timeout") {
      const auto heard = Clock::now();
      while (!world.comm().aborted() && seconds_since(heard) < 10.0) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      expect(world.comm().aborted(), "rank 0's timeout did not abort this rank's communicator");
    }
    return wrong;
  }
  const double deadline = std::chrono::duration<double>(world.timeout()).count();
  const auto issued = Clock::now();
  cohort::Work work =
      world.comm().all_reduce(data.view(world.device()), cohort::ReduceOp::sum, stream);
  std::thread aborter;
  if (mode == "abort") {
    aborter = std::thread([&world] {
      std::this_thread::sleep_for(std::chrono::seconds(1));
      world.comm().abort("stopped by comm_gpu_worker");
    });
  }
  std::string message;
  bool timed_out = false;
  try {
    work.wait();
    expect(false, "the all-reduce that rank 1 skipped completed");
  } catch (const cohort::TimeoutError& error) {
    timed_out = true;
    message = error.what();
  } catch (const cohort::Error& error) {
    message = error.what();
  }
  const double waited = seconds_since(issued);
  if (aborter.joinable()) {
    aborter.join();
  }
  if (mode == "timeout") {
    expect(timed_out, "not a TimeoutError: " + message);
    expect(waited >= deadline, "failed after " + std::to_string(waited) + " s, before the " +
                                   std::to_string(deadline) + " s deadline: " + message);
    expect(waited < deadline + 5.0,
           "failed " + std::to_string(waited - deadline) + " s after the deadline: " + message);
    expect(message.find("ranks that had not arrived: rank 1") != std::string::npos,
           "rank 1 is not named: " + message);
  } else {
    expect(!timed_out && message.find("stopped by comm_gpu_worker") != std::string::npos,
           "the failure does not give the abort's reason: " + message);
    expect(waited < 1.0 + 5.0, "failed " + std::to_string(waited) +
                                   " s after issue, the abort came after 1 s: " + message);
  }
  expect(world.comm().aborted(), "the communicator is not aborted");
  const auto again = Clock::now();
  try {
    world.comm().all_reduce(data.view(world.device()), cohort::ReduceOp::sum, stream).wait();
    expect(false, "a collective after the " + mode + " succeeded");
  } catch (const cohort::Error&) {
    expect(seconds_since(again) < 1.0, "a collective after the " + mode + " took " +
                                           std::to_string(seconds_since(again)) + " s to fail");
  }
  world.store().set("fault-checked", "1");
  return wrong;
}

/// Every thread of cohort's that touches CUDA, on the rank's device: the checkpoint writer (an
/// asynchronous save), PreemptionWatch, the sampler, and a thread that never chose a device
/// making every kind of stream and event call (Note [Restoring an unbound thread]). Returns the
/// failures.
int exercise_cohort_threads(cohort::World& world, const cohort::Stream& stream) {
  int wrong = 0;
  cohort::ParamRegistry registry;
  registry.add("weight", {64, 3});
  cohort::DataParallel dp(world, registry, {});
  // One folder for every rank (rank 0's name for it), removed once every rank is done with it.
  if (world.rank() == 0) {
    world.store().set("contexts/folder", "/tmp/cohort-contexts-" + std::to_string(::getpid()));
  }
  const std::string folder = world.store().get("contexts/folder");
  {
    cohort::Checkpointer saver(dp, cohort::without_optimizer, {.directory = folder});
    saver.save_async({1, 0, 0, ""});
    saver.wait();
  }
  world.comm().barrier(stream).wait();
  if (world.rank() == 0) std::filesystem::remove_all(folder);
  {
    cohort::PreemptionWatch watch(world, stream);
    for (int i = 0; i < 3; ++i) {
      if (watch.agreed()) ++wrong;
    }
  }
  std::thread fresh([&] {
    try {
      cohort::SamplerOptions options;
      options.dataset_size = 100;
      options.batch_per_rank = 4;
      options.rank = world.rank();
      options.world_size = world.size();
      cohort::DistributedSampler sampler(options, cohort::Stream::create(world.device()));
      (void)sampler.next_batch();
      (void)sampler.download_permutation();
      const cohort::Stream mine = cohort::Stream::create(world.device());
      cohort::Event event = cohort::Event::create(world.device());
      mine.enqueue([] {});
      event.record(mine);
      mine.wait(event);
      (void)event.ready();
      event.synchronize();
      const cohort::Stream legacy = cohort::Stream::wrap_cuda(world.device(), nullptr);
      legacy.enqueue([] {});
      legacy.synchronize();
      const cohort::Buffer pinned(cohort::make_pinned_host_resource(), 4096);
      mine.synchronize();
    } catch (const std::exception& error) {
      std::fprintf(stderr, "rank %d: a fresh thread's calls failed: %s\n", world.rank(),
                   error.what());
      ++wrong;
    }
  });
  fresh.join();
  return wrong;
}

/// `mode` "contexts" (one rank per GPU, two or more GPUs): after collectives whose completion the
/// watchdog polled, and after every other thread of cohort's made its CUDA calls, no GPU but this
/// rank's has a primary context in this process (Note [Watchdog device], Note [Restoring an
/// unbound thread]). Asks the driver through the runtime, so the program needs no libcuda at
/// link time.
int check_contexts(cohort::World& world, const cohort::Stream& stream) {
  DeviceArray<float> data(4096);
  data.upload(std::vector<float>(4096, 1.0f), stream);
  for (int i = 0; i < 20; ++i) {
    world.comm().all_reduce(data.view(world.device()), cohort::ReduceOp::sum, stream);
  }
  stream.synchronize();  // completion seen by the watchdog's probes, not by Work::wait
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // several watchdog ticks
  int wrong = exercise_cohort_threads(world, stream);
  using GetState = CUresult (*)(CUdevice, unsigned int*, int*);
  using GetDevice = CUresult (*)(CUdevice*, int);
  void* get_state = nullptr;
  void* get_device = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  check_cuda(cudaGetDriverEntryPointByVersion("cuDevicePrimaryCtxGetState", &get_state, 12000,
                                              cudaEnableDefault, &found),
             "cuDevicePrimaryCtxGetState");
  check_cuda(cudaGetDriverEntryPointByVersion("cuDeviceGet", &get_device, 12000, cudaEnableDefault,
                                              &found),
             "cuDeviceGet");
  if (get_state == nullptr || get_device == nullptr) {
    throw std::runtime_error("the driver has no cuDevicePrimaryCtxGetState or cuDeviceGet");
  }
  const int own = world.device().index();
  for (int ordinal = 0; ordinal < cohort::cuda_device_count(); ++ordinal) {
    CUdevice device = 0;
    unsigned int flags = 0;
    int active = 0;
    if (reinterpret_cast<GetDevice>(get_device)(&device, ordinal) != CUDA_SUCCESS ||
        reinterpret_cast<GetState>(get_state)(device, &flags, &active) != CUDA_SUCCESS) {
      throw std::runtime_error("cannot read the primary context of GPU " + std::to_string(ordinal));
    }
    if ((active != 0) != (ordinal == own)) {
      ++wrong;
      std::fprintf(stderr, "rank %d (GPU %d): GPU %d has %s primary context in this process\n",
                   world.rank(), own, ordinal, active != 0 ? "a" : "no");
    }
  }
  return wrong;
}

}  // namespace
#endif

/// No argument: the collectives against their closed forms; else the mode named.
int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (!mode.empty() && mode != "timeout" && mode != "abort" && mode != "contexts") {
    std::fprintf(stderr, "unknown mode '%s': give none, 'timeout', 'abort' or 'contexts'\n",
                 mode.c_str());
    return 2;
  }
#if COHORT_WITH_CUDA
  return cohort_test::run_gpu_rank([&mode](cohort::World& world) {
    const cohort::Stream stream = cohort::Stream::create(world.device());
    if (!mode.empty()) {
      const int failed =
          mode == "contexts" ? check_contexts(world, stream) : check_fault(world, stream, mode);
      return cohort_test::finish_rank(world, failed);
    }
    check_all_reduce<float>(world, stream, "f32");
    check_all_reduce<cohort::half>(world, stream, "f16");
    check_all_reduce<cohort::bfloat16>(world, stream, "bf16");
    check_all_reduce<std::int32_t>(world, stream, "i32");
    check_layouts(world, stream);
    world.comm().barrier(stream).wait();
    return cohort_test::finish_rank(world, failures);
  });
#else
  std::fprintf(stderr, "no GPU: cohort was built without CUDA\n");
  return 4;
#endif
}
