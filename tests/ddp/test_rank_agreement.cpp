// check_ranks_agree (Note [Checking that ranks agree]): equal bytes pass; differing ranks are
// named, grouped by what they hold, in the same error on every rank; a parameter kept outside
// the registry drifts apart while the registry's stay equal.
#include "support/test_helpers.hpp"

#include <cohort/comm/world.hpp>
#include <cohort/core/checksum.hpp>
#include <cohort/ddp/data_parallel.hpp>
#include <cohort/ddp/rank_agreement.hpp>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <mutex>
#include <span>
#include <string>
#include <vector>

namespace {

using ::testing::HasSubstr;

cohort::WorldOptions host_options() {
  cohort::WorldOptions options;
  options.backend = cohort::BackendChoice::host;
  options.timeout = std::chrono::seconds(30);
  return options;
}

/// "<bytes> bytes with checksum <hex>", as the error writes what a rank holds.
std::string holding(const std::vector<float>& values) {
  return std::to_string(values.size() * sizeof(float)) + " bytes with checksum " +
         cohort::checksum_to_hex(
             cohort::Checksum::of(values.data(), values.size() * sizeof(float)));
}

TEST(RankAgreement, EqualBytesPass) {
  cohort::run_local(
      3,
      [](cohort::World& world) {
        std::vector<float> values{1.5f, -2.0f, 3.25f};
        EXPECT_NO_THROW(cohort::check_ranks_agree(world, std::span<float>(values), "values"));
        // Again under the same name: a new round of the same key.
        EXPECT_NO_THROW(cohort::check_ranks_agree(world, std::span<float>(values), "values"));
      },
      host_options());
}

TEST(RankAgreement, DifferingRanksAreNamedTheSameWayOnEveryRank) {
  const std::vector<float> common{1.0f, 2.0f, 3.0f, 4.0f};
  const std::vector<float> odd{1.0f, 2.0f, 3.0f, 4.5f};
  const std::vector<float> shorter{1.0f, 2.0f, 3.0f};
  std::mutex mutex;
  std::vector<std::string> errors(4);
  cohort::run_local(
      4,
      [&](cohort::World& world) {
        std::vector<float> values = world.rank() == 1 ? odd : world.rank() == 3 ? shorter : common;
        try {
          cohort::check_ranks_agree(world, std::span<float>(values), "extra_bias");
          ADD_FAILURE() << "rank " << world.rank() << ": no error";
        } catch (const cohort::InvalidArgument& error) {
          const std::lock_guard lock(mutex);
          errors[static_cast<std::size_t>(world.rank())] = error.what();
        }
      },
      host_options());
  const std::string expected =
      "check_ranks_agree: 'extra_bias' differs across the 4 ranks: "
      "ranks 0 and 2 hold " +
      holding(common) + "; rank 1 holds " + holding(odd) + "; rank 3 holds " + holding(shorter) +
      ". ";
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_THAT(errors[static_cast<std::size_t>(rank)], HasSubstr(expected)) << "rank " << rank;
    EXPECT_THAT(errors[static_cast<std::size_t>(rank)], HasSubstr("outside the ParamRegistry"));
  }
}

TEST(RankAgreement, AParameterOutsideTheRegistryDriftsWhileTheRegistrysStayEqual) {
  // One weight in the registry, one kept beside it; each rank writes its own gradient to both
  // and takes a step. DataParallel averages only the registered one.
  cohort::run_local(
      2,
      [](cohort::World& world) {
        cohort::ParamRegistry registry;
        const cohort::ParamHandle inside = registry.add("inside", {8});
        cohort::DataParallel dp(world, registry);
        std::vector<float> outside(8, 0.5f);
        const auto gradient = static_cast<float>(world.rank() + 1);
        for (float& g : dp.grad(inside).span<float>()) g = gradient;
        dp.grad_ready(inside);
        dp.sync_grads();
        dp.compute_stream().synchronize();
        const std::span<float> params = dp.param(inside).span<float>();
        const std::span<const float> grads = dp.grad(inside).span<float>();
        for (std::size_t i = 0; i < params.size(); ++i) {
          params[i] -= 0.1f * grads[i];
          outside[i] -= 0.1f * gradient;
        }
        EXPECT_NO_THROW(
            cohort::check_ranks_agree(world, dp.param_arena(), "parameters", dp.compute_stream()));
        try {
          cohort::check_ranks_agree(world, std::span<float>(outside), "outside");
          ADD_FAILURE() << "the parameter outside the registry was found equal";
        } catch (const cohort::InvalidArgument& error) {
          EXPECT_THAT(error.what(), HasSubstr("'outside' differs across the 2 ranks: rank 0 "
                                              "holds 32 bytes with checksum "));
          EXPECT_THAT(error.what(), HasSubstr("; rank 1 holds 32 bytes with checksum "));
        }
      },
      host_options());
}

TEST(RankAgreement, DeviceMemoryWithoutItsStreamIsAClearError) {
  float value = 1.0f;
  const cohort::TensorView on_device(&value, 1, cohort::DType::f32, cohort::Device::cuda(0));
  cohort::run_local(
      1,
      [&](cohort::World& world) {
        try {
          cohort::check_ranks_agree(world, on_device, "weights");
          ADD_FAILURE() << "device memory was read without its stream";
        } catch (const cohort::InvalidArgument& error) {
          EXPECT_THAT(error.what(), HasSubstr("'weights' is cuda:0 memory; pass the stream"));
        }
      },
      host_options());
}

}  // namespace
