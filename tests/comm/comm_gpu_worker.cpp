// One rank of the NCCL tests that run as processes, launched by test_comm_gpu with torchrun's
// variables. Several of these share one GPU: each claims its own NCCL host id, so NCCL connects
// them through its socket transport (over lo) as if they were on different machines, and a wrong
// reduce op or dtype mapping shows (with one rank every collective returns its input).
// Checks all-reduce in f32, f16, bf16 and i32 with sum, avg, min and max, reduce-scatter (avg),
// all-gather and broadcast against closed forms, and prints "rank R ok".
// Exit status: 0 on success, 1 on a wrong result, 3 when a cohort call failed, 4 without a GPU.
#include <cohort/comm/world.hpp>
#include <cohort/core/float16.hpp>
#include <cohort/core/stream.hpp>

#include "support/test_helpers.hpp"

#if COHORT_WITH_CUDA
#include <cuda_runtime.h>
#endif

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <stdexcept>
#include <type_traits>
#include <string>
#include <vector>

#if COHORT_WITH_CUDA
namespace {

/// Rank r contributes (r + 1) + (i % 3): small integers whose sums and halves are exact in every
/// dtype checked here.
double contribution(int rank, std::size_t i) { return rank + 1 + static_cast<double>(i % 3); }

double expected(cohort::ReduceOp op, int n, std::size_t i) {
  const double tail = static_cast<double>(i % 3);
  switch (op) {
    case cohort::ReduceOp::sum: return n * (n + 1) / 2.0 + n * tail;
    case cohort::ReduceOp::avg: return (n + 1) / 2.0 + tail;
    case cohort::ReduceOp::min: return 1.0 + tail;
    case cohort::ReduceOp::max: return n + tail;
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
    stream.synchronize();
    std::vector<T> host(count);
    check_cuda(cudaMemcpy(host.data(), data, count * sizeof(T), cudaMemcpyDeviceToHost),
               "download");
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
    std::fprintf(stderr, "rank %d: %s element %zu is %g, expected %g\n", rank, what.c_str(), i,
                 got, want);
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

}  // namespace
#endif

int main() {
#if COHORT_WITH_CUDA
  if (cohort::cuda_device_count() == 0) {
    std::fprintf(stderr, "no GPU: %s\n", cohort::cuda_unavailable_reason().c_str());
    return 4;
  }
  // Each process its own NCCL "host", so that ranks sharing a GPU connect through sockets; a
  // launcher that set NCCL_HOSTID per rank already (gpu-check.sh) is left alone.
  const char* rank_text = std::getenv("RANK");
  const std::string host_id = std::string("cohort-test-rank-") + (rank_text ? rank_text : "0");
  setenv("NCCL_HOSTID", host_id.c_str(), 0);
  setenv("NCCL_SOCKET_IFNAME", "lo", 0);
  setenv("NCCL_IB_DISABLE", "1", 0);  // the socket transport, even where InfiniBand is present
  try {
    cohort::WorldOptions options;
    options.backend = cohort::BackendChoice::nccl;
    cohort::World world = cohort::init(options);
    const cohort::Stream stream = cohort::Stream::create(world.device());
    check_all_reduce<float>(world, stream, "f32");
    check_all_reduce<cohort::half>(world, stream, "f16");
    check_all_reduce<cohort::bfloat16>(world, stream, "bf16");
    check_all_reduce<std::int32_t>(world, stream, "i32");
    check_layouts(world, stream);
    world.comm().barrier(stream).wait();
    if (failures > 0) {
      std::fprintf(stderr, "rank %d: %d wrong values\n", world.rank(), failures);
      return 1;
    }
    std::printf("rank %d ok: %s\n", world.rank(), world.describe().c_str());
    return 0;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "%s\n", error.what());
    return 3;
  }
#else
  std::fprintf(stderr, "no GPU: cohort was built without CUDA\n");
  return 4;
#endif
}
