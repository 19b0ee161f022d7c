// DataParallel::sync_grads against the raw all-reduces it issues: 4 host ranks as threads (Gloo),
// the same buckets all-reduced (average) over the same gradient arena, once through the engine
// (grad_ready for every parameter, then sync_grads and a wait on the compute stream) and once
// directly on world.comm(). Repetitions alternate between the two after a warm-up, each preceded
// by a barrier; the table gives the medians on rank 0, their ratio, and bus bandwidth
// (algbw x 2(n-1)/n, as nccl-tests reports for all-reduce). "paired" is the median of the
// per-repetition ratios, which is steadier than the ratio of medians on a loaded machine.
//
//     ddp_bench [--repetitions N]
#include "common/bench_common.hpp"

#include <CLI/CLI.hpp>
#include <cli_checks.hpp>

#include <cohort/comm/world.hpp>
#include <cohort/ddp/data_parallel.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;
using cohort::bench::median;

constexpr int kRanks = 4;

struct Result {
  std::size_t model_bytes = 0;
  std::size_t tensors = 0;
  std::size_t buckets = 0;
  double ddp_ms = 0.0;
  double raw_ms = 0.0;
  double paired_ratio = 0.0;  ///< median over repetitions of sync_grads / raw of the same pair
  double stats_comm_ms = 0.0;
};

double since_ms(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

/// `tensors` tensors of assorted sizes adding up to about `bytes` of f32.
cohort::ParamRegistry model(std::size_t bytes, std::size_t tensors) {
  cohort::ParamRegistry registry;
  const std::size_t elements = bytes / 4;
  std::size_t weights = 0;
  for (std::size_t i = 0; i < tensors; ++i) {
    weights += 1 + i % 7;
  }
  std::size_t left = elements;
  for (std::size_t i = 0; i < tensors; ++i) {
    const std::size_t count = i + 1 == tensors ? left : elements / weights * (1 + i % 7);
    left -= count;
    std::string name = "layer";
    name.append(std::to_string(i));
    registry.add(name, {count});
  }
  return registry;
}

Result measure(std::size_t bytes, std::size_t tensors, int repetitions) {
  Result result;
  result.model_bytes = bytes;
  result.tensors = tensors;
  cohort::WorldOptions options;
  options.backend = cohort::BackendChoice::host;
  cohort::run_local(
      kRanks,
      [&](cohort::World& world) {
        const cohort::ParamRegistry registry = model(bytes, tensors);
        cohort::DataParallel dp(world, registry);
        const cohort::Stream raw_stream = cohort::Stream::create(world.device());
        const auto& buckets = dp.plan().buckets;
        float* grads = static_cast<float*>(dp.grad_arena().data());
        for (std::size_t i = 0; i < dp.grad_arena().count(); ++i) {
          grads[i] = 1e-3f * static_cast<float>(i % 1000);
        }
        auto barrier = [&] { world.comm().barrier(raw_stream).wait(); };
        auto run_ddp = [&] {
          barrier();
          const auto start = Clock::now();
          for (std::uint32_t p = static_cast<std::uint32_t>(registry.size()); p-- > 0;) {
            dp.grad_ready(cohort::ParamHandle{p});
          }
          dp.sync_grads();
          dp.compute_stream().synchronize();
          return since_ms(start);
        };
        auto run_raw = [&] {
          barrier();
          const auto start = Clock::now();
          for (const cohort::Bucket& bucket : buckets) {
            world.comm().all_reduce(dp.grad_arena().slice(bucket.slice.offset, bucket.slice.count),
                                    cohort::ReduceOp::avg, raw_stream);
          }
          raw_stream.synchronize();
          return since_ms(start);
        };
        for (int warm = 0; warm < 3; ++warm) {
          run_ddp();
          run_raw();
        }
        std::vector<double> ddp_ms, raw_ms;
        for (int rep = 0; rep < repetitions; ++rep) {
          ddp_ms.push_back(run_ddp());
          raw_ms.push_back(run_raw());
        }
        if (world.rank() == 0) {
          result.buckets = buckets.size();
          result.ddp_ms = median(ddp_ms);
          result.raw_ms = median(raw_ms);
          std::vector<double> ratios;
          for (std::size_t i = 0; i < ddp_ms.size(); ++i) {
            ratios.push_back(ddp_ms[i] / raw_ms[i]);
          }
          result.paired_ratio = median(ratios);
          result.stats_comm_ms = dp.last_step_stats().comm_ms;
        }
      },
      options);
  return result;
}

}  // namespace

int main(int argc, char** argv) {
  int repetitions = 11;
  CLI::App app{
      "ddp_bench: DataParallel::sync_grads against the raw all-reduces of the same "
      "buckets, 4 host ranks (threads), models of 4 and 32 MiB; medians of the "
      "repetitions after 3 warm-ups, and their paired ratio",
      "ddp_bench"};
  cohort::cli::conventions(app);
  app.add_option("-n,--repetitions", repetitions, "timed repetitions of each of the two")
      ->check(cohort::cli::whole(1, 1e6));
  if (const std::optional<int> status = cohort::cli::parse(app, argc, argv)) return *status;
  std::printf("# ddp_bench: sync_grads vs raw bucket all-reduces, %d host ranks (threads, Gloo)\n",
              kRanks);
  std::printf("# machine: %s; median of %d after 3 warm-ups\n",
              cohort::bench::machine_line().c_str(), repetitions);
  std::printf("%10s %8s %8s %12s %12s %8s %8s %12s %14s\n", "model", "tensors", "buckets",
              "sync_grads", "raw", "ratio", "paired", "busbw", "stats comm_ms");
  for (const auto& [bytes, tensors] :
       {std::pair<std::size_t, std::size_t>{std::size_t{4} << 20, 24},
        std::pair<std::size_t, std::size_t>{std::size_t{32} << 20, 48}}) {
    const Result r = measure(bytes, tensors, repetitions);
    const double busbw = cohort::bench::algbw_gbps(static_cast<double>(bytes), r.raw_ms * 1e-3) *
                         cohort::bench::bus_factor(cohort::bench::Collective::all_reduce, kRanks);
    std::printf("%7.0f MiB %8zu %8zu %9.2f ms %9.2f ms %8.3f %8.3f %7.2f GB/s %11.2f ms\n",
                static_cast<double>(bytes) / (1 << 20), r.tensors, r.buckets, r.ddp_ms, r.raw_ms,
                r.ddp_ms / r.raw_ms, r.paired_ratio, busbw, r.stats_comm_ms);
  }
  return 0;
}
