// One rank of the process-based DataParallel test, launched once per rank by test_ddp_processes
// with torchrun's variables. Trains the test MLP data-parallel, checks it against one rank with
// the whole batch computed in this process, and prints "rank R params <hash>" (the hash of the
// parameter arena's bytes, which every rank must share) and "rank R ok".
// Exit status: 0 on success, 1 when the parameters are off, 3 when a cohort call failed.
#include "mlp_model.hpp"

#include <cohort/comm/world.hpp>
#include <cohort/ddp/data_parallel.hpp>

#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <vector>

int main() {
  try {
    cohort::WorldOptions options;
    options.backend = cohort::BackendChoice::host;
    cohort::World world = cohort::init(options);
    cohort::ParamRegistry registry;
    const cohort::test::Mlp mlp(registry);
    cohort::DataParallel dp(
        world, registry,
        {.bucket_bytes = 512, .first_bucket_bytes = 256, .init = [&](cohort::DataParallel& d) {
           cohort::test::mlp_init(d, mlp, static_cast<float>(world.rank()));
         }});
    constexpr std::size_t kBatch = 840;
    constexpr int kSteps = 4;
    constexpr float kLr = 0.2f;
    const std::vector<float> arena = cohort::test::mlp_train(dp, mlp, kBatch, kSteps, kLr);
    const cohort::test::MlpTensors got = cohort::test::mlp_unpack(dp, mlp);
    const cohort::test::MlpTensors want = cohort::test::mlp_reference(kBatch, kSteps, kLr);
    for (std::size_t i = 0; i < want.w1.size(); ++i) {
      if (std::abs(got.w1[i] - want.w1[i]) > 2e-6f * (1.0f + std::abs(want.w1[i]))) {
        std::fprintf(stderr, "rank %d: fc1.weight[%zu] is %.9g, expected %.9g\n", world.rank(), i,
                     static_cast<double>(got.w1[i]), static_cast<double>(want.w1[i]));
        return 1;
      }
    }
    std::uint64_t hash = 14695981039346656037ull;
    for (const float value : arena) {
      std::uint32_t bits;
      std::memcpy(&bits, &value, sizeof(bits));
      hash = (hash ^ bits) * 1099511628211ull;
    }
    std::printf("rank %d params %016" PRIx64 "\n", world.rank(), hash);
    std::printf("rank %d ok: %s\n", world.rank(), world.describe().c_str());
    return 0;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "%s\n", error.what());
    return 3;
  }
}
