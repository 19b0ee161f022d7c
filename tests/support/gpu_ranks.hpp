#pragma once

// Ranks as processes sharing one GPU. NCCL refuses two ranks of one host on one GPU, so each
// rank claims a host of its own (NCCL_HOSTID) and NCCL connects them through its socket transport
// over lo, as if they were on different machines. With one rank every collective returns its
// input, so these runs are what shows a wrong op, dtype or average on a machine with one GPU.

#include "support/process_ranks.hpp"

#include <cohort/comm/world.hpp>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <string>
#include <vector>

namespace cohort_test {

/// Called by a rank program before cohort::init: its own NCCL host (from RANK), sockets over lo,
/// no InfiniBand. A launcher that set these per rank already (gpu-check.sh) is left alone.
inline void claim_nccl_host() {
  const char* rank = std::getenv("RANK");
  const std::string host_id = std::string("cohort-test-rank-") + (rank != nullptr ? rank : "0");
  setenv("NCCL_HOSTID", host_id.c_str(), 0);
  setenv("NCCL_SOCKET_IFNAME", "lo", 0);
  setenv("NCCL_IB_DISABLE", "1", 0);
}

/// The body of a GPU rank program's main: without a GPU returns 4 saying why; else claims an
/// NCCL host, joins the world on NCCL and returns what `body` returns, or 3 with the message
/// when a cohort call threw.
inline int run_gpu_rank(const std::function<int(cohort::World&)>& body) {
  if (cohort::cuda_device_count() == 0) {
    std::fprintf(stderr, "no GPU: %s\n", cohort::cuda_unavailable_reason().c_str());
    return 4;
  }
  claim_nccl_host();
  try {
    cohort::WorldOptions options;
    options.backend = cohort::BackendChoice::nccl;
    cohort::World world = cohort::init(options);
    return body(world);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "%s\n", error.what());
    return 3;
  }
}

/// A GPU rank program's exit status after its checks: 1 when `failures` > 0, else 0 with the
/// line "rank R ok" that `ranks_failed` looks for.
inline int finish_rank(cohort::World& world, int failures) {
  if (failures > 0) {
    std::fprintf(stderr, "rank %d: %d failures\n", world.rank(), failures);
    return 1;
  }
  std::printf("rank %d ok: %s\n", world.rank(), world.describe().c_str());
  return 0;
}

/// Runs `n` ranks of the rank program `relative` (under the test build folder, or beside the test
/// in a GPU bundle) on GPU 0, with `environment` added; `tag` names the output folder.
inline std::vector<ProcessRank> run_gpu_ranks(int n, const std::string& relative,
                                              const std::vector<std::string>& arguments,
                                              std::vector<std::string> environment,
                                              const std::string& tag) {
  environment.insert(environment.begin(),
                     {"COHORT_ALLOW_SHARED_GPU=1", "CUDA_VISIBLE_DEVICES=0", "COHORT_TIMEOUT=60s"});
  return run_process_ranks(n, build_path(relative), arguments, environment, tag);
}

/// "" when every rank exited 0 and printed "rank R ok", else what went wrong and every output.
inline std::string ranks_failed(const std::vector<ProcessRank>& ranks) {
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    if (!ranks[r].exited_with(0) ||
        read_file(ranks[r].output).find("rank " + std::to_string(r) + " ok") == std::string::npos) {
      return "rank " + std::to_string(r) + " failed\n" + report(ranks);
    }
  }
  return "";
}

}  // namespace cohort_test
