// One rank of the multi-node tests (tests/multinode/*.sh), started by cohortrun on a fake host.
//   layout       prints "layout <rank> host=<host> node=<n>/<nodes> local=<l>/<size>
//                local=<global ranks of World::local> cross=<global ranks of World::cross>
//                sum=<all-reduced sum of ranks>", each list found by an all_gather on that
//                communicator, so it is what the communicators really hold
//   steps N MS   N all-reduces of 256 KiB, MS milliseconds apart, printing "step i" as each
//                ends (the fault tests cut links in the middle)
// Exit status: 0 on success; 3 with the error on standard error when a cohort call failed.
#include <cohort/comm/world.hpp>
#include <cohort/core/stream.hpp>

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>
#include <thread>
#include <vector>

namespace {

std::string members(cohort::Communicator& comm, int rank, const cohort::Stream& stream) {
  std::vector<std::int64_t> mine{rank};
  std::vector<std::int64_t> all(static_cast<std::size_t>(comm.size()));
  comm.all_gather(std::span<std::int64_t>(mine), std::span<std::int64_t>(all), stream).wait();
  std::string text;
  for (const std::int64_t member : all) {
    if (!text.empty()) text += ',';
    text += std::to_string(member);
  }
  return text;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string scenario = argc > 1 ? argv[1] : "layout";
  try {
    cohort::WorldOptions options;
    options.backend = cohort::BackendChoice::host;
    cohort::World world = cohort::init(options);
    const cohort::Stream stream = cohort::Stream::create(cohort::Device::host());
    const int r = world.rank();
    if (scenario == "layout") {
      std::vector<double> sum{static_cast<double>(r)};
      world.comm().all_reduce(std::span<double>(sum), cohort::ReduceOp::sum, stream).wait();
      char host[256] = {};
      gethostname(host, sizeof(host) - 1);
      const std::string local = members(world.local(), r, stream);
      const std::string cross = members(world.cross(), r, stream);
      std::printf("layout %d host=%s node=%d/%d local=%d/%d local=%s cross=%s sum=%g\n", r, host,
                  world.node_rank(), world.num_nodes(), world.local_rank(),
                  world.local_world_size(), local.c_str(), cross.c_str(), sum[0]);
      return 0;
    }
    if (scenario == "steps" && argc == 4) {
      const int steps = std::atoi(argv[2]);
      const auto pause = std::chrono::milliseconds(std::atoi(argv[3]));
      std::vector<float> data(1 << 16);
      for (int step = 0; step < steps; ++step) {
        world.comm().all_reduce(std::span<float>(data), cohort::ReduceOp::sum, stream).wait();
        std::printf("step %d\n", step);
        std::fflush(stdout);
        std::this_thread::sleep_for(pause);
      }
      return 0;
    }
    std::fprintf(stderr, "node_worker: unknown scenario (layout | steps N MS)\n");
    return 2;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "node_worker: %s\n", error.what());
    return 3;
  }
}
