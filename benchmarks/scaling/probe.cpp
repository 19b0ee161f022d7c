#include "scaling/probe.hpp"

#include "common/bench_common.hpp"

#include <layers/math.hpp>

#include <algorithm>
#include <chrono>
#include <sstream>
#include <string>

namespace scaling {
namespace {

/// One timed run on `comm`: after a barrier, `kPerRun` all-reduces of `view` issued back to back
/// (nccl-tests' way: how a step's buckets follow one another). Returns ms per all-reduce. Every
/// member of `comm` calls it.
double time_run(cohort::Communicator& comm, const cohort::Stream& stream,
                const cohort::TensorView& view) {
  constexpr int kPerRun = 4;
  comm.barrier(stream).wait();
  stream.synchronize();
  const auto begin = std::chrono::steady_clock::now();
  std::vector<cohort::Work> works;
  for (int i = 0; i < kPerRun; ++i)
    works.push_back(comm.all_reduce(view, cohort::ReduceOp::sum, stream));
  for (cohort::Work& work : works) work.wait();
  stream.synchronize();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - begin)
             .count() /
         kPerRun;
}

/// One size to time: its buffer on the communicator it runs on, and each run's time.
struct Timed {
  cohort::Communicator* comm = nullptr;
  cohort::Buffer buffer;
  cohort::TensorView view{nullptr, 0, cohort::DType::f32, cohort::Device::host()};
  std::vector<double> ms;
};

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
  std::vector<Timed> timed;
  auto add = [&](cohort::Communicator& comm, std::size_t count) {
    Timed t;
    t.comm = &comm;
    t.buffer = math.allocate_bytes(count * sizeof(float));
    t.view = cohort::TensorView(t.buffer.data(), count, cohort::DType::f32, world.device());
    t.comm->all_reduce(t.view, cohort::ReduceOp::sum, stream).wait();  // warm-up
    timed.push_back(std::move(t));
  };
  for (const std::size_t bytes : sizes) {
    const std::size_t count = std::max<std::size_t>(1, bytes / sizeof(float));
    add(world.comm(), count);
    probe.bytes.push_back(static_cast<double>(count * sizeof(float)));
  }
  if (cross) {
    for (const std::size_t bytes : sizes) {
      add(world.cross(),
          std::max<std::size_t>(
              1, bytes / sizeof(float) / static_cast<std::size_t>(world.local_world_size())));
    }
  }
  // Sizes interleaved within each repetition, so that a burst of load from elsewhere on the
  // machine slows every size a little instead of one size a lot (which tilts the fit's slope).
  for (int rep = 0; rep < reps; ++rep) {
    for (Timed& t : timed) t.ms.push_back(time_run(*t.comm, stream, t.view));
  }
  // The slowest rank's median of each size, through the store: host values, which an NCCL
  // communicator could not reduce.
  std::string mine;
  for (const Timed& t : timed) mine += std::to_string(cohort::bench::median(t.ms)) + " ";
  std::vector<double> medians(timed.size(), 0.0);
  for (const std::string& text : world.group().all_gather("scaling/probe", mine)) {
    std::istringstream in(text);
    for (double& slowest : medians) {
      double value = 0.0;
      in >> value;
      slowest = std::max(slowest, value);
    }
  }
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
