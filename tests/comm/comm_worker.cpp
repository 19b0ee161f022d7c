// One rank of the process-based communicator tests. Reads its rank from the environment as any
// cohort program does (torchrun's variables here), then runs a scenario:
//   check    all-reduce, all-gather and broadcast, verified; prints "rank R ok"
//   kill     like check, but rank 2 kills itself (SIGKILL) in the middle of the third all-reduce:
//            after issuing it, before it can complete
//   bad-init rank 2 sets COHORT_HOST_TRANSPORT to a value init refuses, after the ranks have met
//   hang     like check, but rank 2 sleeps 6 s instead of issuing the third all-reduce: run with
//            a short COHORT_TIMEOUT, the others fail at their deadline
// Exit status: 0 on success, 3 with the error on standard error when a cohort call failed, and
// the line "failed after N ms" timing the failing call from its issue. Either way, once the World
// is gone, the line "threads left: N" counts the threads the process has beyond those it had
// before init, main's included (Note [Host worker teardown]: none of cohort's may remain, so N is
// 1). A sanitizer runtime starts a helper thread of its own at the first thread creation (TSan's
// background thread); a thread started and joined before the count is taken brings it up first.
#include <cohort/comm/world.hpp>
#include <cohort/core/stream.hpp>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

namespace {

/// This process's thread count, from /proc/self/status; -1 where it cannot be read.
int thread_count() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("Threads:", 0) == 0) {
      return std::stoi(line.substr(8));
    }
  }
  return -1;
}

/// Runs `scenario`; returns the exit status, or throws what a cohort call threw. `issued` is when
/// the last collective was issued.
int run(const std::string& scenario, std::chrono::steady_clock::time_point& issued) {
  const char* rank_text = std::getenv("RANK");
  if (scenario == "bad-init" && rank_text != nullptr && std::string(rank_text) == "2") {
    setenv("COHORT_HOST_TRANSPORT", "bogus", 1);
  }
  cohort::WorldOptions options;
  options.backend = cohort::BackendChoice::host;
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
    if (scenario == "hang" && r == 2 && iteration == 2) {
      std::this_thread::sleep_for(std::chrono::seconds(6));
    }
    work.wait();
    const double expected = n * (n + 1) / 2.0;
    if (data.front() != expected || data.back() != expected) {
      std::fprintf(stderr, "rank %d: all_reduce gave %f, expected %f\n", r, data.front(), expected);
      return 1;
    }
  }
  std::vector<std::int64_t> mine{r * 10};
  std::vector<std::int64_t> all(static_cast<std::size_t>(n));
  world.comm()
      .all_gather(std::span<std::int64_t>(mine), std::span<std::int64_t>(all), stream)
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
}

}  // namespace

int main(int argc, char** argv) {
  const std::string scenario = argc > 1 ? argv[1] : "check";
  std::thread([] {}).join();
  const int threads_before = thread_count();
  auto issued = std::chrono::steady_clock::now();
  int status = 3;
  try {
    status = run(scenario, issued);
  } catch (const std::exception& error) {
    const auto elapsed = std::chrono::steady_clock::now() - issued;
    std::fprintf(stderr, "%s\nfailed after %lld ms\n", error.what(),
                 static_cast<long long>(
                     std::chrono::duration_cast<std::chrono::milliseconds>(elapsed).count()));
  }
  const int threads_after = thread_count();
  std::printf("threads left: %d\n",
              threads_before < 0 || threads_after < 0 ? -1 : threads_after - threads_before + 1);
  return status;
}
