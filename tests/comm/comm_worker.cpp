// One rank of the process-based communicator tests. Reads its rank from the environment as any
// cohort program does (torchrun's variables here), then runs a scenario:
//   check    all-reduce, all-gather and broadcast, verified; prints "rank R ok"
//   kill     like check, but rank 2 kills itself (SIGKILL) in the middle of the third all-reduce:
//            after issuing it, before it can complete
// Exit status: 0 on success, 3 with the error on standard error when a cohort call failed, and
// the line "failed after N ms" timing the failing call from its issue.
#include <cohort/comm/world.hpp>
#include <cohort/core/stream.hpp>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

int main(int argc, char** argv) {
  const std::string scenario = argc > 1 ? argv[1] : "check";
  auto issued = std::chrono::steady_clock::now();
  try {
    cohort::WorldOptions options;
    options.backend = cohort::BackendChoice::gloo;
    cohort::World world = cohort::init(options);
    const cohort::Stream stream = cohort::Stream::create(cohort::Device::host());
    const int n = world.size();
    const int r = world.rank();
    for (int iteration = 0; iteration < 5; ++iteration) {
      std::vector<double> data(1 << 16, r + 1.0);
      issued = std::chrono::steady_clock::now();
      cohort::Work work =
          world.comm().all_reduce(std::span<double>(data), cohort::ReduceOp::sum, stream);
      if (scenario == "kill" && r == 2 && iteration == 2) {
        std::raise(SIGKILL);
      }
      work.wait();
      const double expected = n * (n + 1) / 2.0;
      if (data.front() != expected || data.back() != expected) {
        std::fprintf(stderr, "rank %d: all_reduce gave %f, expected %f\n", r, data.front(),
                     expected);
        return 1;
      }
    }
    std::vector<std::int64_t> mine{r * 10};
    std::vector<std::int64_t> all(static_cast<std::size_t>(n));
    world.comm().all_gather(std::span<std::int64_t>(mine), std::span<std::int64_t>(all), stream)
        .wait();
    for (int q = 0; q < n; ++q) {
      if (all[static_cast<std::size_t>(q)] != q * 10) {
        std::fprintf(stderr, "rank %d: all_gather block %d is %lld\n", r, q,
                     static_cast<long long>(all[static_cast<std::size_t>(q)]));
        return 1;
      }
    }
    std::vector<float> shared{r == 0 ? 3.5f : 0.0f};
    world.comm().broadcast(std::span<float>(shared), 0, stream).wait();
    if (shared[0] != 3.5f) {
      std::fprintf(stderr, "rank %d: broadcast gave %f\n", r, static_cast<double>(shared[0]));
      return 1;
    }
    std::printf("rank %d ok: %s\n", r, world.describe().c_str());
    return 0;
  } catch (const std::exception& error) {
    const auto elapsed = std::chrono::steady_clock::now() - issued;
    std::fprintf(stderr, "%s\nfailed after %lld ms\n", error.what(),
                 static_cast<long long>(
                     std::chrono::duration_cast<std::chrono::milliseconds>(elapsed).count()));
    return 3;
  }
}
