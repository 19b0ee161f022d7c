// Files larger than one write chunk, of sizes that are no multiple of the O_DIRECT alignment: the
// direct front, the buffered tail and the checksums of pieces that cross chunk boundaries (Note
// [Checkpoint direct I/O]), with direct I/O on and off; and the deletion of old checkpoints in
// the background (Note [Checkpoint deletion]).

#include "checkpoint/checkpoint_test_model.hpp"

#include <cohort/checkpoint/checkpoint.hpp>
#include <cohort/optim/adamw.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <mutex>

namespace {

using cohort::DType;
using cohort_test::contains;
using cohort_test::TemporaryFolder;

constexpr int kRanks = 2;
// 2 ranks x 3 arrays (parameters, AdamW's two moments) of 1,234,567 f32: each rank's file holds
// about 7.4 MB, almost two write chunks, and its pieces end at odd offsets.
constexpr std::uint64_t kElements = 1'234'567;

cohort::ParamRegistry large_registry() {
  cohort::ParamRegistry registry;
  registry.add("big.weight", {kElements});
  return registry;
}

/// A 2-rank AdamW model whose parameters (and, after `steps` steps, moments) depend on `seed`.
struct LargeRun {
  std::unique_ptr<cohort::DataParallel> dp;
  std::unique_ptr<cohort::AdamW> optimizer;

  LargeRun(cohort::World& world, const cohort::ParamRegistry& registry, double seed, int steps) {
    dp = std::make_unique<cohort::DataParallel>(
        world, registry, cohort::DataParallelOptions{.init = [seed](cohort::DataParallel& d) {
          cohort_test::TestRun::fill(
              d.param_arena().slice(0, d.plan().used_count),
              [seed](std::size_t e) { return std::sin(seed + 1e-3 * static_cast<double>(e)); });
        }});
    optimizer =
        std::make_unique<cohort::AdamW>(cohort::target_of(*dp), cohort::AdamWOptions{.lr = 1e-2f});
    for (int step = 0; step < steps; ++step) {
      cohort_test::TestRun::fill(
          dp->grad_arena().slice(0, dp->plan().used_count),
          [&](std::size_t e) { return std::cos(0.3 * step + 7e-4 * static_cast<double>(e)); });
      dp->grad_ready(cohort::ParamHandle{0});
      dp->sync_grads();
      optimizer->step();
    }
    dp->compute_stream().synchronize();
  }

  /// Parameters and both moments, as bytes.
  std::vector<unsigned char> state() const {
    dp->compute_stream().synchronize();
    std::vector<unsigned char> bytes;
    auto append = [&](cohort::TensorView view) {
      const auto* data = static_cast<const unsigned char*>(view.data());
      bytes.insert(bytes.end(), data, data + std::min<std::size_t>(view.bytes(), kElements * 4));
    };
    append(dp->param_arena());
    for (const cohort::OptimizerStateView& array : optimizer->state()) append(array.view);
    return bytes;
  }
};

class LargeFiles : public ::testing::TestWithParam<bool> {};

TEST_P(LargeFiles, RoundTripBitwiseAndAFlippedByteInTheSecondChunkIsCaught) {
  const bool direct_io = GetParam();
  TemporaryFolder folder;
  const cohort::ParamRegistry registry = large_registry();
  std::mutex mutex;
  std::vector<std::vector<unsigned char>> saved(kRanks);
  cohort::run_local(
      kRanks,
      [&](cohort::World& world) {
        LargeRun run(world, registry, 0.5, 3);
        cohort::Checkpointer checkpoints(*run.dp, run.optimizer.get(),
                                         {.directory = folder.path(), .direct_io = direct_io});
        checkpoints.save({3, 0, 0, "blob"});
        const std::lock_guard lock(mutex);
        saved[static_cast<std::size_t>(world.rank())] = run.state();
      },
      cohort_test::host_world());
  const auto file = folder.path() / "step-000000000003" / "rank-1.bin";
  ASSERT_GT(std::filesystem::file_size(file), std::size_t{5} << 20);
  EXPECT_NE(std::filesystem::file_size(file) % 4096, 0u);

  auto load = [&](std::string& error) {
    std::vector<std::vector<unsigned char>> loaded(kRanks);
    cohort::run_local(
        kRanks,
        [&](cohort::World& world) {
          LargeRun run(world, registry, 2.0, 1);  // other values everywhere
          cohort::Checkpointer checkpoints(*run.dp, run.optimizer.get(),
                                           {.directory = folder.path()});
          std::string failure;
          try {
            EXPECT_EQ(checkpoints.load()->user_blob, "blob");
          } catch (const cohort::CheckpointError& caught) {
            failure = caught.what();
          }
          const std::lock_guard lock(mutex);
          if (world.rank() == 0) error = failure;
          loaded[static_cast<std::size_t>(world.rank())] = run.state();
        },
        cohort_test::host_world());
    return loaded;
  };
  std::string error;
  EXPECT_EQ(load(error), saved);
  EXPECT_EQ(error, "");

  {  // one bit, past the first write chunk (4 MiB)
    std::fstream stream(file, std::ios::in | std::ios::out | std::ios::binary);
    const std::streamoff at = (std::streamoff{4} << 20) + 4099;
    stream.seekg(at);
    char byte = 0;
    stream.read(&byte, 1);
    byte = static_cast<char>(byte ^ 0x04);
    stream.seekp(at);
    stream.write(&byte, 1);
  }
  load(error);
  EXPECT_TRUE(contains(error, "rank-1.bin: bytes")) << error;
  EXPECT_TRUE(contains(error, "fail their checksum")) << error;
}

INSTANTIATE_TEST_SUITE_P(Checkpoint, LargeFiles, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& param) {
                           return std::string(param.param ? "direct_io" : "buffered");
                         });

// Old checkpoints and a crashed save's leftovers (its folder, its temporary `latest`) are hidden at
// once and deleted by the time the Checkpointer is gone, including `.deleting-` folders a crash
// left behind.
TEST(CheckpointDeletion, OldCheckpointsAndLeftoversAreGone) {
  TemporaryFolder folder;
  std::filesystem::create_directories(folder.path() / ".deleting-step-000000000001" / "inner");
  std::filesystem::create_directories(folder.path() / ".incomplete-step-000000000007");
  std::ofstream(folder.path() / ".latest.tmp-999999") << "step-000000000007\n";  // a crash's
  const cohort::ParamRegistry registry = cohort_test::test_registry(DType::f32);
  cohort::run_local(
      kRanks,
      [&](cohort::World& world) {
        cohort_test::TestRun run(world, registry, cohort_test::OptimizerKind::adamw);
        cohort::Checkpointer checkpoints(*run.dp, run.optimizer.get(),
                                         {.directory = folder.path(), .keep_last = 1});
        for (int step = 1; step <= 3; ++step) {
          run.step(step);
          checkpoints.save({step, 0, 0, ""});
          if (world.rank() == 0) {
            EXPECT_FALSE(std::filesystem::exists(folder.path() /
                                                 ("step-00000000000" + std::to_string(step - 1))));
          }
        }
      },
      cohort_test::host_world());
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(folder.path())) {
    names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"latest", "step-000000000003"}));
}

}  // namespace
