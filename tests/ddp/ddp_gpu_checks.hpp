#pragma once

// DataParallel and ZeRO-1 on a GPU, as checks that any rank runs: test_ddp_gpu runs them on ranks
// as threads (one per GPU) and, through ddp_gpu_worker, on two processes sharing one GPU, where a
// wrong average shows (with one rank the average is the input). Each returns "" or what was
// wrong; a failed CUDA call throws. Only for builds with CUDA.

#include "mlp_model.hpp"

#include <cohort/comm/world.hpp>
#include <cohort/core/stream.hpp>
#include <cohort/ddp/data_parallel.hpp>
#include <cohort/memory/device_pool.hpp>
#include <cohort/memory/statistics_adaptor.hpp>
#include <cohort/optim/adamw.hpp>
#include <cohort/optim/sharded_optimizer.hpp>

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

namespace cohort::test {

inline void cuda_ok(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(status));
  }
}

/// `host` copied into `view` in `stream`'s order and not waited for (so `host` must outlive the
/// copy): what follows is ordered after it only through the stream and the events on it.
inline void upload_on(const Stream& stream, const TensorView& view, const void* host) {
  cuda_ok(cudaMemcpyAsync(view.data(), host, view.bytes(), cudaMemcpyHostToDevice,
                          static_cast<cudaStream_t>(stream.native_handle())),
          "upload");
}

/// `view` copied to the host after the work on `stream`.
inline std::vector<float> download(const Stream& stream, const TensorView& view) {
  std::vector<float> host(view.count());
  cuda_ok(cudaMemcpyAsync(host.data(), view.data(), view.bytes(), cudaMemcpyDeviceToHost,
                          static_cast<cudaStream_t>(stream.native_handle())),
          "download");
  stream.synchronize();
  return host;
}

/// Device memory for `count` floats, freed on scope exit.
struct DeviceFloats {
  DeviceFloats(std::size_t n, Device on) : count(n), device(on) {
    cuda_ok(cudaMalloc(&data, count * sizeof(float)), "cudaMalloc");
  }
  ~DeviceFloats() { (void)cudaFree(data); }
  DeviceFloats(const DeviceFloats&) = delete;
  DeviceFloats& operator=(const DeviceFloats&) = delete;
  TensorView view() const { return TensorView::of(data, count, device); }
  float* data = nullptr;
  std::size_t count;
  Device device;
};

/// "" when `got` matches `want` within `tolerance` x (1 + |want|), else the first difference.
inline std::string compare(const std::vector<float>& got, const std::vector<float>& want,
                           float tolerance, const std::string& what) {
  if (got.size() != want.size()) {
    return what + ": " + std::to_string(got.size()) + " values, expected " +
           std::to_string(want.size());
  }
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (!(std::abs(got[i] - want[i]) <= tolerance * (1.0f + std::abs(want[i])))) {
      return what + "[" + std::to_string(i) + "] is " + std::to_string(got[i]) + ", expected " +
             std::to_string(want[i]);
    }
  }
  return "";
}

constexpr std::size_t kGpuBatch = 840;
constexpr int kGpuSteps = 4;
constexpr float kGpuLr = 0.2f;

/// The test MLP's initial values (shifted per rank: the broadcast must replace them), uploaded in
/// DataParallel's init callback.
inline void mlp_upload_initial(DataParallel& dp, const Mlp& mlp, int rank) {
  const MlpTensors p = mlp_initial(static_cast<float>(rank));
  const Stream& stream = dp.compute_stream();
  upload_on(stream, dp.param(mlp.w1), p.w1.data());
  upload_on(stream, dp.param(mlp.b1), p.b1.data());
  upload_on(stream, dp.param(mlp.w2), p.w2.data());
  upload_on(stream, dp.param(mlp.b2), p.b2.data());
  stream.synchronize();  // `p` goes now
}

/// SGD on the test MLP, each rank a slice of the batch, kGpuSteps steps: every parameter against
/// one rank with the whole batch. Gradients are uploaded on the compute stream and never waited
/// for by the host, so only grad_ready's events keep each bucket's all-reduce after its gradients.
/// The last two steps must create no event and no stream, and allocate nothing from `counted`
/// when given (Note [Step events]). `arena` receives the parameters.
inline std::string train_mlp_and_check(DataParallel& dp, const Mlp& mlp, std::vector<float>* arena,
                                       const StatisticsAdaptor* counted) {
  World& world = dp.world();
  const auto n = static_cast<std::size_t>(world.size());
  const auto r = static_cast<std::size_t>(world.rank());
  const std::size_t begin = r * kGpuBatch / n;
  const std::size_t end = (r + 1) * kGpuBatch / n;
  const Stream& compute = dp.compute_stream();
  detail::CreatedCounts before;
  std::size_t allocated_before = 0;
  for (int step = 0; step < kGpuSteps; ++step) {
    if (step == kGpuSteps - 2) {
      // Per process: with ranks as threads, every rank is warm before the reading.
      world.group().barrier("steady-start");
      before = detail::created_counts();
      allocated_before = counted != nullptr ? counted->statistics().allocations.total : 0;
      world.group().barrier("steady-counted");
    }
    const auto w1 = download(compute, dp.param(mlp.w1));
    const auto b1 = download(compute, dp.param(mlp.b1));
    const auto w2 = download(compute, dp.param(mlp.w2));
    const auto b2 = download(compute, dp.param(mlp.b2));
    const MlpTensors g = mlp_gradients(w1.data(), b1.data(), w2.data(), b2.data(), begin, end);
    upload_on(compute, dp.grad(mlp.b2), g.b2.data());
    dp.grad_ready(mlp.b2);
    upload_on(compute, dp.grad(mlp.w2), g.w2.data());
    dp.grad_ready(mlp.w2);
    upload_on(compute, dp.grad(mlp.b1), g.b1.data());
    dp.grad_ready(mlp.b1);
    upload_on(compute, dp.grad(mlp.w1), g.w1.data());
    dp.grad_ready(mlp.w1);
    dp.sync_grads();
    auto params = download(compute, dp.param_arena());  // after the uploads of `g`, too
    const auto grads = download(compute, dp.grad_arena());
    sgd(params.data(), grads.data(), params.size(), kGpuLr);
    upload_on(compute, dp.param_arena(), params.data());
    compute.synchronize();
  }
  world.group().barrier("steady-end");
  const detail::CreatedCounts after = detail::created_counts();
  if (after.events != before.events || after.streams != before.streams) {
    return "the last 2 steps created " + std::to_string(after.events - before.events) +
           " events and " + std::to_string(after.streams - before.streams) +
           " streams; a steady-state step creates none";
  }
  if (counted != nullptr && counted->statistics().allocations.total != allocated_before) {
    return "the last 2 steps allocated " +
           std::to_string(counted->statistics().allocations.total - allocated_before) +
           " times from DataParallel's memory; a steady-state step allocates nothing";
  }
  if (dp.last_step_stats().collectives != dp.plan().buckets.size()) {
    return std::to_string(dp.last_step_stats().collectives) + " collectives in a step of " +
           std::to_string(dp.plan().buckets.size()) + " buckets";
  }
  const MlpTensors want = mlp_reference(kGpuBatch, kGpuSteps, kGpuLr);
  for (const auto& [handle, reference, name] :
       {std::tuple{mlp.w1, &want.w1, "fc1.weight"}, std::tuple{mlp.b1, &want.b1, "fc1.bias"},
        std::tuple{mlp.w2, &want.w2, "fc2.weight"}, std::tuple{mlp.b2, &want.b2, "fc2.bias"}}) {
    std::string wrong = compare(download(compute, dp.param(handle)), *reference, 2e-6f,
                                std::string(name) + " on rank " + std::to_string(r));
    if (!wrong.empty()) {
      return wrong;
    }
  }
  *arena = download(compute, dp.param_arena());
  return "";
}

/// train_mlp_and_check on DataParallel's own arenas, in a device pool whose allocations count.
inline std::string check_sgd_mlp(World& world, std::vector<float>* arena) {
  ParamRegistry registry;
  const Mlp mlp(registry);
  auto counted = std::make_shared<StatisticsAdaptor>(
      make_device_pool_resource({.device = world.device().index()}));
  DataParallel dp(world, registry,
                  {.bucket_bytes = 512,
                   .first_bucket_bytes = 256,
                   .init = [&](DataParallel& d) { mlp_upload_initial(d, mlp, world.rank()); },
                   .memory = counted});
  if (!dp.param_arena().device().is_cuda()) {
    return "the parameter arena is on " + dp.param_arena().device().to_string();
  }
  return train_mlp_and_check(dp, mlp, arena, counted.get());
}

/// bf16 wire compression, all-reduce or reduce-scatter: rank r holds (r + 1) x_i, so the mean is
/// (n + 1) / 2 x_i, within the bf16 bound; and the wire really was 16-bit (bf16 rounding shows,
/// even on one rank where the cast to the wire and back is all that happens, and half the bytes
/// went out).
inline std::string check_bf16_wire(World& world, bool scatter) {
  ParamRegistry registry;
  const auto a = registry.add("a", {3000});
  const auto b = registry.add("b", {1001});
  DataParallelOptions options;
  options.bucket_bytes = 4096;
  options.compression = Compression::bf16;
  if (scatter) {
    options.gradient_sync = GradientSync::reduce_scatter;
  }
  DataParallel dp(world, registry, options);
  std::mt19937 random(5);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> x(dp.grad_arena().count());
  for (float& v : x) v = uniform(random);
  std::vector<float> mine(x);
  for (float& v : mine) v *= static_cast<float>(world.rank() + 1);
  const Stream& compute = dp.compute_stream();
  upload_on(compute, dp.grad_arena(), mine.data());
  dp.grad_ready(a);
  dp.grad_ready(b);
  dp.sync_grads();
  const auto got = download(compute, scatter ? dp.grad_shard() : dp.grad_arena());
  const std::size_t offset = scatter ? dp.shard_offset() : 0;
  const int n = world.size();
  const double u = std::ldexp(1.0, -8);
  const std::string what = std::string(scatter ? "reduce-scatter" : "all-reduce") + " on rank " +
                           std::to_string(world.rank());
  double worst = 0.0;
  for (std::size_t k = 0; k < got.size(); ++k) {
    const double exact = (n + 1) / 2.0 * static_cast<double>(x[offset + k]);
    const double error = std::abs(static_cast<double>(got[k]) - exact);
    if (!(error <= (n + 2) * u * std::abs(exact) + 1e-30)) {
      return what + ": element " + std::to_string(offset + k) + " is " + std::to_string(got[k]) +
             ", expected " + std::to_string(exact);
    }
    if (exact != 0.0) worst = std::max(worst, error / std::abs(exact));
  }
  if (!(worst > u / 64)) {
    return what + ": no bf16 rounding visible (worst relative error " + std::to_string(worst) +
           "): the wire was not 16-bit";
  }
  if (dp.last_step_stats().bytes != dp.grad_arena().count() * 2) {
    return what + ": " + std::to_string(dp.last_step_stats().bytes) + " bytes on the wire for " +
           std::to_string(dp.grad_arena().count()) + " bf16 values";
  }
  return "";
}

/// ZeRO-1 AdamW on an arena of n x 1001 floats, so that every other rank's shard starts at an
/// odd element (the step kernel's unaligned, scalar path) and every shard has a vector tail,
/// against the host AdamW stepping the whole arena with the averaged gradients. Odd elements get
/// tiny gradients (about 1e-9), where eps matters and so does the gradient's scale: a sum
/// instead of an average moves them far more than the tolerance.
inline std::string check_zero1_odd_shards(World& world) {
  constexpr std::size_t kShard = 1001;
  constexpr int kSteps = 3;
  const int n = world.size();
  const std::size_t count = kShard * static_cast<std::size_t>(n);
  const AdamWOptions options{.lr = 1e-2f, .weight_decay = 0.1f};
  std::vector<float> params(count);
  for (std::size_t i = 0; i < count; ++i) {
    params[i] = static_cast<float>(std::sin(0.7 * static_cast<double>(i)));
  }
  // Rank r contributes (r + 1) g_i at each step; their mean is (n + 1) / 2 g_i.
  auto gradient = [](int step, std::size_t i) {
    const double g = std::cos(0.3 * static_cast<double>(i) + step);
    return i % 2 == 1 ? g * 1e-9 : g;
  };
  const Stream stream = Stream::create(world.device());
  const DeviceFloats d_params(count, world.device());
  const DeviceFloats d_grads(count, world.device());
  upload_on(stream, d_params.view(), params.data());
  ShardedOptimizer zero({d_params.view(), d_grads.view(), stream, &world.comm()}, options);

  const Stream host_stream = Stream::create(Device::host());
  std::vector<float> host_params = params;
  std::vector<float> host_grads(count);
  AdamW reference({std::span<float>(host_params), std::span<float>(host_grads), host_stream},
                  options);
  std::vector<float> mine(count);
  for (int step = 0; step < kSteps; ++step) {
    for (std::size_t i = 0; i < count; ++i) {
      mine[i] = static_cast<float>((world.rank() + 1) * gradient(step, i));
      host_grads[i] = static_cast<float>((n + 1) / 2.0 * gradient(step, i));
    }
    upload_on(stream, d_grads.view(), mine.data());
    zero.step();
    stream.synchronize();  // `mine` is refilled next step
    reference.step();
    host_stream.synchronize();  // `host_grads` too
  }
  return compare(download(stream, d_params.view()), host_params, 2e-6f,
                 "ZeRO-1 params on rank " + std::to_string(world.rank()) + " (shards of " +
                     std::to_string(kShard) + ")");
}

}  // namespace cohort::test
