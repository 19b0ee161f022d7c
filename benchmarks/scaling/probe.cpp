#include "scaling/probe.hpp"

#include "common/bench_common.hpp"

#include <layers/math.hpp>

#include <algorithm>
#include <chrono>

namespace scaling {
namespace {

/// The median over `reps` runs of the time per all-reduce of `count` floats on `comm`, in runs of
/// 4 issued back to back (nccl-tests' way: how a step's buckets follow one another), after a
/// warm-up. Every member of `comm` calls it.
double time_all_reduce(cohort::Communicator& comm, layers::Math& math, const cohort::Stream& stream,
                       cohort::Device device, std::size_t count, int reps) {
  cohort::Buffer buffer = math.allocate_bytes(count * sizeof(float));
  const cohort::TensorView view(buffer.data(), count, cohort::DType::f32, device);
  constexpr int kPerRun = 4;
  comm.all_reduce(view, cohort::ReduceOp::sum, stream).wait();  // warm-up
  std::vector<double> times;
  for (int rep = 0; rep < reps; ++rep) {
    comm.barrier(stream).wait();
    stream.synchronize();
    const auto begin = std::chrono::steady_clock::now();
    std::vector<cohort::Work> works;
    for (int i = 0; i < kPerRun; ++i) works.push_back(comm.all_reduce(view, cohort::ReduceOp::sum, stream));
    for (cohort::Work& work : works) work.wait();
    stream.synchronize();
    times.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - begin).count() /
        kPerRun);
  }
  return cohort::bench::median(times);
}

}  // namespace

LinkProbe probe_link(cohort::World& world, std::vector<std::size_t> sizes, int reps) {
  std::sort(sizes.begin(), sizes.end());
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  const cohort::Stream stream = cohort::Stream::create(world.device());
  layers::Math math(stream);
  LinkProbe probe;
  probe.ranks = world.size();
  probe.backend = std::string(cohort::to_string(world.comm().backend()));
  // Across nodes, also the cross-node part alone: the two-level all-reduce sends each rank's
  // 1/local_world_size share over world.cross(), all local ranks at once.
  const bool cross = world.num_nodes() > 1;
  std::vector<float> medians;
  for (const std::size_t bytes : sizes) {
    const std::size_t count = std::max<std::size_t>(1, bytes / sizeof(float));
    medians.push_back(static_cast<float>(
        time_all_reduce(world.comm(), math, stream, world.device(), count, reps)));
    probe.bytes.push_back(static_cast<double>(count * sizeof(float)));
  }
  if (cross) {
    for (const std::size_t bytes : sizes) {
      const std::size_t share = std::max<std::size_t>(
          1, bytes / sizeof(float) / static_cast<std::size_t>(world.local_world_size()));
      medians.push_back(static_cast<float>(
          time_all_reduce(world.cross(), math, stream, world.device(), share, reps)));
    }
  }
  // The slowest rank's median of each size.
  world.comm()
      .all_reduce(cohort::TensorView::of(medians.data(), medians.size(), cohort::Device::host()),
                  cohort::ReduceOp::max, stream)
      .wait();
  stream.synchronize();
  probe.ms.assign(medians.begin(), medians.begin() + static_cast<std::ptrdiff_t>(sizes.size()));
  probe.cross_ms.assign(medians.begin() + static_cast<std::ptrdiff_t>(sizes.size()), medians.end());
  // Least squares of ms = alpha + bytes x ms_per_byte.
  const double n = static_cast<double>(probe.ms.size());
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (std::size_t i = 0; i < probe.ms.size(); ++i) {
    sx += probe.bytes[i];
    sy += probe.ms[i];
    sxx += probe.bytes[i] * probe.bytes[i];
    sxy += probe.bytes[i] * probe.ms[i];
  }
  const double denominator = n * sxx - sx * sx;
  probe.ms_per_byte = denominator > 0 ? std::max(0.0, (n * sxy - sx * sy) / denominator) : 0.0;
  probe.alpha_ms = std::max(0.0, (sy - probe.ms_per_byte * sx) / n);
  return probe;
}

}  // namespace scaling
