// What one World costs on the NCCL backend (Note [Sharing NCCL's resources] in
// src/comm/nccl/communicator.cpp): for each rank, the time cohort::init takes, the threads and
// NCCL communicators it starts, the time of the first collective on each of its communicators
// (NCCL connects peers on first use), and the device memory all of it takes, measured with
// cudaMemGetInfo around it once every rank has its CUDA context and nothing else. Run it as the
// ranks of a launcher (cohortrun, or test_comm_gpu's two processes sharing GPU 0); rank 0 prints
// one JSON object on a line of its own, and writes it to FILE with --json FILE:
//
//   {"program": "world_cost", "ranks": 2, "nodes": 1, "nccl": "NCCL 2.28.9",
//    "device_bytes": 123, "ranks_on_gpu": 2, "device_bytes_per_world": 61,
//    "per_rank": [{"rank": 0, "init_s": 0.4, "first_collectives_s": 0.2, "threads_started": 5,
//                  "nccl_communicators": 4}, ...]}
//
// device_bytes is GPU 0's (rank 0's GPU) used memory after minus before, for every rank placed
// on it: device_bytes_per_world divides it by their number.
// Exit status: 0 on success, 3 when a cohort or CUDA call failed, 4 without a GPU.

#include <cohort/comm/detail/nccl_counts.hpp>
#include <cohort/comm/world.hpp>
#include <cohort/core/stream.hpp>
#include <cohort/launch/launch_info.hpp>
#include <cohort/launch/rendezvous.hpp>

#if COHORT_WITH_CUDA
#include <cuda_runtime.h>
#include <nccl.h>
#endif

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#if COHORT_WITH_CUDA
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

void check_cuda(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(status));
  }
}

int thread_count() {
  int count = 0;
  for ([[maybe_unused]] const auto& entry :
       std::filesystem::directory_iterator("/proc/self/task")) {
    ++count;
  }
  return count;
}

std::size_t used_bytes() {
  std::size_t free = 0;
  std::size_t total = 0;
  check_cuda(cudaMemGetInfo(&free, &total), "cudaMemGetInfo");
  return total - free;
}

/// "NCCL 2.28.9", the library loaded.
std::string nccl_version() {
  int version = 0;
  if (ncclGetVersion(&version) != ncclSuccess) return "NCCL (unknown version)";
  return "NCCL " + std::to_string(version / 10000) + "." + std::to_string((version / 100) % 100) +
         "." + std::to_string(version % 100);
}

/// Every rank reaches `name` before any goes on (the store's counter).
void store_barrier(cohort::Store& store, const std::string& name, int ranks) {
  store.add(name, 1);
  const auto give_up = Clock::now() + std::chrono::seconds(60);
  while (store.add(name, 0) < ranks) {
    if (Clock::now() > give_up) throw std::runtime_error("the ranks never all reached " + name);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

int run(const std::string& json_path) {
  // Ranks sharing a GPU each claim an NCCL host of their own, as tests/support/gpu_ranks.hpp
  // does; a launcher that set these already is left alone.
  const char* rank_text = std::getenv("RANK");
  const std::string host_id = std::string("cohort-world-cost-") + (rank_text ? rank_text : "0");
  setenv("NCCL_HOSTID", host_id.c_str(), 0);
  setenv("NCCL_SOCKET_IFNAME", "lo", 0);
  setenv("NCCL_IB_DISABLE", "1", 0);
  const cohort::LaunchInfo launch = cohort::LaunchInfo::from_environment();
  const int gpus = cohort::cuda_device_count();
  const int device = launch.local_rank % gpus;  // as cohort::init places ranks
  check_cuda(cudaSetDevice(device), "cudaSetDevice");
  check_cuda(cudaFree(nullptr), "creating the context");
  std::shared_ptr<cohort::Store> store = cohort::connect_store(launch, std::chrono::seconds(120));
  const int threads_before = thread_count();
  const std::uint64_t communicators_before = cohort::detail::nccl_communicators_created();
  store_barrier(*store, "world_cost/contexts", launch.world_size);
  const std::size_t used_before = launch.rank == 0 ? used_bytes() : 0;
  store_barrier(*store, "world_cost/measured", launch.world_size);

  cohort::WorldOptions options;
  options.backend = cohort::BackendChoice::nccl;
  options.store = store;
  options.launch = launch;
  const auto init_start = Clock::now();
  cohort::World world = cohort::init(options);
  const double init_s = seconds_since(init_start);
  const int threads_started = thread_count() - threads_before;
  const std::uint64_t communicators =
      cohort::detail::nccl_communicators_created() - communicators_before;

  const cohort::Stream stream = cohort::Stream::create(world.device());
  constexpr std::size_t kCount = 1 << 18;  // 1 MiB of floats
  float* data = nullptr;
  check_cuda(cudaMalloc(&data, kCount * sizeof(float)), "cudaMalloc");
  check_cuda(cudaMemsetAsync(data, 0, kCount * sizeof(float),
                             static_cast<cudaStream_t>(stream.native_handle())),
             "cudaMemsetAsync");
  const auto first_start = Clock::now();
  for (cohort::Communicator* comm : {&world.comm(), &world.local(), &world.cross()}) {
    comm->all_reduce(cohort::TensorView::of(data, kCount, world.device()), cohort::ReduceOp::sum,
                     stream);
  }
  stream.synchronize();
  const double first_s = seconds_since(first_start);
  world.comm().barrier(stream).wait();
  stream.synchronize();
  check_cuda(cudaFree(data), "cudaFree");  // its bytes are not the World's
  world.comm().barrier(stream).wait();
  const std::size_t used_after = world.rank() == 0 ? used_bytes() : 0;

  std::ostringstream mine;
  mine << "{\"rank\": " << world.rank() << ", \"device\": " << world.device().index()
       << ", \"init_s\": " << init_s << ", \"first_collectives_s\": " << first_s
       << ", \"threads_started\": " << threads_started
       << ", \"nccl_communicators\": " << communicators << "}";
  world.store().set("world_cost/rank" + std::to_string(world.rank()), mine.str());
  world.store().set("world_cost/device" + std::to_string(world.rank()),
                    std::to_string(world.device().index()));
  if (world.rank() == 0) {
    int on_gpu = 0;
    std::string per_rank;
    for (int r = 0; r < world.size(); ++r) {
      per_rank += (r > 0 ? ", " : "") + world.store().get("world_cost/rank" + std::to_string(r));
      on_gpu += world.store().get("world_cost/device" + std::to_string(r)) ==
                std::to_string(world.device().index());
    }
    const long long bytes =
        static_cast<long long>(used_after) - static_cast<long long>(used_before);
    std::ostringstream json;
    json << "{\"program\": \"world_cost\", \"ranks\": " << world.size()
         << ", \"nodes\": " << world.num_nodes() << ", \"gpus\": " << gpus << ", \"nccl\": \""
         << nccl_version() << "\", \"device_bytes\": " << bytes << ", \"ranks_on_gpu\": " << on_gpu
         << ", \"device_bytes_per_world\": " << (on_gpu > 0 ? bytes / on_gpu : bytes)
         << ", \"per_rank\": [" << per_rank << "]}";
    std::printf("%s\n", json.str().c_str());
    if (!json_path.empty()) std::ofstream(json_path) << json.str() << "\n";
  }
  world.comm().barrier(stream).wait();  // rank 0, which serves the store, leaves last
  std::printf("rank %d ok: %s\n", world.rank(), world.describe().c_str());
  return 0;
}

}  // namespace
#endif

int main(int argc, char** argv) {
  std::string json_path;
  for (int i = 1; i < argc; ++i) {
    const std::string argument = argv[i];
    if (argument == "--json" && i + 1 < argc) {
      json_path = argv[++i];
    } else {
      std::fprintf(stderr, "world_cost: unknown argument '%s' (use --json FILE)\n", argv[i]);
      return 2;
    }
  }
#if COHORT_WITH_CUDA
  if (cohort::cuda_device_count() == 0) {
    std::fprintf(stderr, "no GPU: %s\n", cohort::cuda_unavailable_reason().c_str());
    return 4;
  }
  try {
    return run(json_path);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "world_cost: %s\n", error.what());
    return 3;
  }
#else
  (void)json_path;
  std::fprintf(stderr, "no GPU: cohort was built without CUDA\n");
  return 4;
#endif
}
