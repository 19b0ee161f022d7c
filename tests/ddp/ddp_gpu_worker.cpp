// One rank of the DataParallel GPU suite run as processes, launched by test_ddp_gpu (and by
// gpu-check.sh through cohortrun) with torchrun's variables. Two of these share one GPU, each its
// own NCCL host, so that a wrong average shows on a machine with one GPU. Runs the checks of
// ddp_gpu_checks.hpp: SGD on the test MLP against one rank with the whole batch (every
// parameter, and no event, stream or allocation in a steady step), bf16 wire compression with
// all-reduce and with reduce-scatter, and ZeRO-1 AdamW with shards at odd offsets. Prints
// "rank R ok".
// Exit status: 0 on success, 1 on a wrong result, 3 when a cohort call failed, 4 without a GPU.
#include <cohort/comm/world.hpp>

#include "support/gpu_ranks.hpp"

#if COHORT_WITH_CUDA
#include "ddp_gpu_checks.hpp"
#endif

#include <cstdio>
#include <string>
#include <vector>

int main() {
#if COHORT_WITH_CUDA
  return cohort_test::run_gpu_rank([](cohort::World& world) {
    int failures = 0;
    auto run = [&](const char* name, const std::string& wrong) {
      if (!wrong.empty()) {
        ++failures;
        std::fprintf(stderr, "rank %d: %s: %s\n", world.rank(), name, wrong.c_str());
      }
    };
    std::vector<float> arena;
    run("SGD on the MLP", cohort::test::check_sgd_mlp(world, &arena));
    run("bf16 wire, all-reduce", cohort::test::check_bf16_wire(world, /*scatter=*/false));
    run("bf16 wire, reduce-scatter", cohort::test::check_bf16_wire(world, /*scatter=*/true));
    run("ZeRO-1 at odd offsets", cohort::test::check_zero1_odd_shards(world));
    world.group().barrier("ddp-gpu-worker-done");
    return cohort_test::finish_rank(world, failures);
  });
#else
  std::fprintf(stderr, "no GPU: cohort was built without CUDA\n");
  return 4;
#endif
}
