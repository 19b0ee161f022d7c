// cohort-doctor --collective: each collective checked and timed across the ranks.

#include "collective.hpp"

#include <cohort/core/error.hpp>
#include <cohort/core/stream.hpp>
#include <cohort/memory/detail/stream_copy.hpp>

#if COHORT_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <sstream>
#include <string>
#include <utility>

namespace cohort::doctor {

namespace {

/// f32 memory on the world's device (CUDA memory for NCCL, host memory otherwise). Uploads and
/// downloads run in `stream`'s order and are waited for: a plain cudaMemcpy runs on the legacy
/// stream, which the collectives' non-blocking stream does not wait for.
class Memory {
 public:
  Memory(Device device, std::size_t count, Stream stream)
      : device_(device), count_(std::max<std::size_t>(count, 1)), stream_(std::move(stream)) {
    if (device.is_host()) {
      host_.assign(count_, 0.0f);
      return;
    }
#if COHORT_WITH_CUDA
    void* data = nullptr;
    COHORT_CHECK(cudaMalloc(&data, count_ * sizeof(float)) == cudaSuccess, OutOfMemory,
                 "cudaMalloc of " + std::to_string(count_ * sizeof(float)) +
                     " bytes for --collective failed: lower --bytes");
    device_data_ = static_cast<float*>(data);
#endif
  }
  ~Memory() {
#if COHORT_WITH_CUDA
    if (device_data_ != nullptr) cudaFree(device_data_);
#endif
  }
  Memory(const Memory&) = delete;
  Memory& operator=(const Memory&) = delete;

  float* data() {
    return device_.is_host() ? host_.data() : device_data_;
  }
  TensorView view(std::size_t offset, std::size_t count) {
    return TensorView(data() + offset, count, DType::f32, device_);
  }
  void upload(const std::vector<float>& values) {
    detail::write_now(data(), values.data(), values.size() * sizeof(float), stream_);
  }
  std::vector<float> download(std::size_t count) {
    std::vector<float> values(count);
    detail::read_after(values.data(), data(), count * sizeof(float), stream_);
    return values;
  }

 private:
  Device device_;
  std::size_t count_;
  Stream stream_;
  std::vector<float> host_;
  float* device_data_ = nullptr;
};

/// Rank r's value at element i: small integers, so every sum is exact in f32.
float contribution(int rank, std::size_t i) {
  return static_cast<float>((static_cast<std::size_t>(rank) + i) % 5 + 1);
}

std::vector<float> pattern(int rank, std::size_t offset, std::size_t count) {
  std::vector<float> values(count);
  for (std::size_t i = 0; i < count; ++i) values[i] = contribution(rank, offset + i);
  return values;
}

float reduced(int ranks, std::size_t i) {
  float sum = 0.0f;
  for (int r = 0; r < ranks; ++r) sum += contribution(r, i);
  return sum;
}

}  // namespace

std::vector<CollectiveResult> run_collectives(World& world, std::size_t bytes, int iterations) {
  Communicator& comm = world.comm();
  const Stream stream = Stream::create(world.device());
  const int n = world.size();
  const int me = world.rank();
  // Whole elements, and a count every rank's share divides.
  const auto ranks = static_cast<std::size_t>(n);
  const std::size_t total = std::max<std::size_t>(ranks, bytes / sizeof(float) / ranks * ranks);
  const std::size_t share = total / ranks;
  Memory input(world.device(), total, stream);
  Memory output(world.device(), total, stream);

  struct Case {
    const char* name;
    // Sets up the buffers, runs the collective once; `check` counts wrong elements after it.
    std::function<void()> prepare;
    std::function<Work()> issue;
    std::function<std::uint64_t()> check;
  };
  const std::vector<Case> cases = {
      {"all_reduce", [&] { output.upload(pattern(me, 0, total)); },
       [&] { return comm.all_reduce(output.view(0, total), ReduceOp::sum, stream); },
       [&] {
         const auto got = output.download(total);
         std::uint64_t wrong = 0;
         for (std::size_t i = 0; i < total; ++i) wrong += got[i] != reduced(n, i) ? 1u : 0u;
         return wrong;
       }},
      {"reduce_scatter", [&] { input.upload(pattern(me, 0, total)); },
       [&] {
         return comm.reduce_scatter(input.view(0, total), output.view(0, share), ReduceOp::sum,
                                    stream);
       },
       [&] {
         const auto got = output.download(share);
         std::uint64_t wrong = 0;
         for (std::size_t i = 0; i < share; ++i) {
           wrong += got[i] != reduced(n, static_cast<std::size_t>(me) * share + i) ? 1u : 0u;
         }
         return wrong;
       }},
      {"all_gather",
       [&] { input.upload(pattern(me, static_cast<std::size_t>(me) * share, share)); },
       [&] { return comm.all_gather(input.view(0, share), output.view(0, total), stream); },
       [&] {
         const auto got = output.download(total);
         std::uint64_t wrong = 0;
         for (std::size_t i = 0; i < total; ++i) {
           wrong += got[i] != contribution(static_cast<int>(i / share), i) ? 1u : 0u;
         }
         return wrong;
       }},
      {"broadcast", [&] { output.upload(pattern(me, 0, total)); },
       [&] { return comm.broadcast(output.view(0, total), 0, stream); },
       [&] {
         const auto got = output.download(total);
         std::uint64_t wrong = 0;
         for (std::size_t i = 0; i < total; ++i) wrong += got[i] != contribution(0, i) ? 1u : 0u;
         return wrong;
       }},
  };

  std::vector<CollectiveResult> results;
  std::vector<float> medians, wrongs;
  for (const Case& c : cases) {
    // Checked once on fresh data, then timed (the values no longer matter).
    c.prepare();
    stream.synchronize();
    comm.barrier(stream).wait();
    Work work = c.issue();
    stream.synchronize();
    work.wait();
    wrongs.push_back(static_cast<float>(c.check()));
    std::vector<double> times;
    for (int i = 0; i < iterations + 2; ++i) {
      const auto begin = std::chrono::steady_clock::now();
      Work timed = c.issue();
      stream.synchronize();
      timed.wait();
      const double us =
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - begin)
              .count();
      if (i >= 2) times.push_back(us);
    }
    std::sort(times.begin(), times.end());
    const std::size_t middle = times.size() / 2;
    medians.push_back(static_cast<float>(
        times.size() % 2 == 1 ? times[middle] : 0.5 * (times[middle - 1] + times[middle])));
  }
  // The slowest rank's median, and the wrong elements of every rank, through the store (host
  // values: an NCCL communicator reduces device memory only).
  std::string mine;
  for (std::size_t k = 0; k < cases.size(); ++k) {
    mine += std::to_string(medians[k]) + " " + std::to_string(wrongs[k]) + " ";
  }
  std::vector<float> slowest(cases.size(), 0.0f), wrong_sum(cases.size(), 0.0f);
  for (const std::string& text : world.group().all_gather("doctor/collectives", mine)) {
    std::istringstream in(text);
    for (std::size_t k = 0; k < cases.size(); ++k) {
      float median = 0.0f, wrong = 0.0f;
      in >> median >> wrong;
      slowest[k] = std::max(slowest[k], median);
      wrong_sum[k] += wrong;
    }
  }
  medians = slowest;
  wrongs = wrong_sum;
  for (std::size_t k = 0; k < cases.size(); ++k) {
    CollectiveResult result;
    result.name = cases[k].name;
    result.ranks = n;
    result.bytes = total * sizeof(float);
    result.time_us = medians[k];
    result.algbw_gbps = result.time_us > 0
                            ? static_cast<double>(result.bytes) / (result.time_us * 1e-6) / 1e9
                            : 0.0;
    result.busbw_gbps = result.algbw_gbps * bus_factor(result.name, n);
    result.wrong = static_cast<std::uint64_t>(wrongs[k]);
    results.push_back(std::move(result));
  }
  return results;
}

}  // namespace cohort::doctor
