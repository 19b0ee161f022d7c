// The Checkpointer as a program uses it: leaving an optimizer's state out only when asked to
// (`without_optimizer`), errors a restart cannot fix and the exit status they map to, and the
// training state kept in step with a DistributedSampler.

#include "checkpoint/checkpoint_test_model.hpp"

#include <cohort/checkpoint/checkpoint.hpp>
#include <cohort/checkpoint/exit_status.hpp>
#include <cohort/data/distributed_sampler.hpp>
#include <cohort/optim/sgd.hpp>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using cohort::CheckpointError;
using cohort::DType;
using cohort::UnloadableCheckpoint;
using cohort_test::contains;
using cohort_test::OptimizerKind;
using cohort_test::TemporaryFolder;
using cohort_test::TestRun;

// docs/checkpoint.md, "The optimizer's state": a null optimizer is not a way to say "no optimizer
// state" (it silently restarted AdamW's moments on every resume).
TEST(CheckpointOptimizer, ANullOptimizerIsAnErrorNamingTheChoices) {
  TemporaryFolder folder;
  const cohort::ParamRegistry registry = cohort_test::test_registry(DType::f32);
  cohort::run_local(
      1,
      [&](cohort::World& world) {
        TestRun run(world, registry, OptimizerKind::adamw);
        cohort::Optimizer* none = nullptr;
        const std::string error = cohort_test::message_of<cohort::InvalidArgument>(
            [&] { cohort::Checkpointer checkpoints(*run.dp, none, {.directory = folder.path()}); });
        EXPECT_TRUE(contains(error, "cohort::without_optimizer")) << error;
        EXPECT_TRUE(contains(error, "the optimizer")) << error;
      },
      cohort_test::host_world());
}

// A Checkpointer built without_optimizer while an optimizer steps the parameters would leave its
// state out: refused at once, naming the optimizer and the remedy.
TEST(CheckpointOptimizer, WithoutOptimizerWhileAnOptimizerStepsTheParametersIsAnError) {
  TemporaryFolder folder;
  const cohort::ParamRegistry registry = cohort_test::test_registry(DType::f32);
  cohort::run_local(
      1,
      [&](cohort::World& world) {
        TestRun run(world, registry, OptimizerKind::zero1_adamw);
        const std::string error = cohort_test::message_of<cohort::InvalidArgument>([&] {
          cohort::Checkpointer checkpoints(*run.dp, cohort::without_optimizer,
                                           {.directory = folder.path()});
        });
        EXPECT_TRUE(contains(error, "a ZeRO-1 adamw optimizer steps these parameters")) << error;
        EXPECT_TRUE(contains(error, "exp_avg")) << error;
        EXPECT_TRUE(contains(error, "Checkpointer(dp, &optimizer, options)")) << error;
      },
      cohort_test::host_world());
}

// The optimizer built after the Checkpointer: every save and load refuses while it lives, and
// nothing is written; without it, the parameters alone save and load again.
TEST(CheckpointOptimizer, AnOptimizerBuiltAfterwardsStopsSavesAndLoadsWithoutOptimizer) {
  TemporaryFolder folder;
  const cohort::ParamRegistry registry = cohort_test::test_registry(DType::f32);
  cohort::run_local(
      2,
      [&](cohort::World& world) {
        TestRun run(world, registry, OptimizerKind::none);
        cohort::Checkpointer checkpoints(*run.dp, cohort::without_optimizer,
                                         {.directory = folder.path()});
        run.step(0);
        checkpoints.save({1, 0, 0, ""});
        {
          cohort::Sgd sgd(cohort::target_of(*run.dp), {.lr = 0.1f, .momentum = 0.9f});
          for (const auto& attempt :
               std::vector<std::function<void()>>{[&] {
                                                    checkpoints.save({2, 0, 0, ""});
                                                  },
                                                  [&] {
                                                    checkpoints.save_async({2, 0, 0, ""});
                                                  },
                                                  [&] { (void)checkpoints.load(); }}) {
            const std::string error = cohort_test::message_of<cohort::InvalidArgument>(attempt);
            EXPECT_TRUE(contains(error,
                                 "with cohort::without_optimizer while an sgd optimizer steps "
                                 "these parameters: its state (momentum_buffer"))
                << error;
          }
        }
        EXPECT_FALSE(std::filesystem::exists(folder.path() / "step-000000000002"));
        checkpoints.save({2, 0, 0, ""});
        ASSERT_TRUE(checkpoints.load().has_value());
      },
      cohort_test::host_world());
}

// Parameters alone, where no optimizer steps them (an evaluation), load from a checkpoint that
// holds an optimizer's state too.
TEST(CheckpointOptimizer, WithoutOptimizerLoadsTheParametersOfAnyCheckpoint) {
  TemporaryFolder folder;
  const cohort::ParamRegistry registry = cohort_test::test_registry(DType::f32);
  std::vector<unsigned char> saved;
  cohort::run_local(
      2,
      [&](cohort::World& world) {
        TestRun run(world, registry, OptimizerKind::adamw);
        cohort::Checkpointer checkpoints(*run.dp, run.optimizer.get(),
                                         {.directory = folder.path()});
        for (int step = 0; step < 3; ++step) run.step(step);
        checkpoints.save({3, 0, 0, ""});
        if (world.rank() == 0) saved = run.params();
      },
      cohort_test::host_world());
  cohort::run_local(
      2,
      [&](cohort::World& world) {
        TestRun evaluation(world, registry, OptimizerKind::none);
        cohort::Checkpointer checkpoints(*evaluation.dp, cohort::without_optimizer,
                                         {.directory = folder.path()});
        ASSERT_TRUE(checkpoints.load().has_value());
        EXPECT_EQ(evaluation.params(), saved);
      },
      cohort_test::host_world());
}

/// Saves steps 2 and 4 of a model without optimizer state.
void save_without_optimizer(const std::filesystem::path& folder) {
  const cohort::ParamRegistry registry = cohort_test::test_registry(DType::f32);
  cohort::run_local(
      2,
      [&](cohort::World& world) {
        TestRun run(world, registry, OptimizerKind::none);
        cohort::Checkpointer checkpoints(*run.dp, cohort::without_optimizer, {.directory = folder});
        for (int step = 0; step < 4; ++step) {
          run.step(step);
          if (step % 2 == 1) checkpoints.save({step + 1, 0, 0, ""});
        }
      },
      cohort_test::host_world());
}

/// Loads `folder` into a 2-rank AdamW model; returns rank 0's error (empty: it loaded) and the
/// exit status `exit_status_for` gives it.
std::pair<std::string, int> load_into_adamw(const std::filesystem::path& folder, bool fallback) {
  const cohort::ParamRegistry registry = cohort_test::test_registry(DType::f32);
  std::string error;
  int status = 0;
  cohort::run_local(
      2,
      [&](cohort::World& world) {
        TestRun run(world, registry, OptimizerKind::adamw);
        cohort::Checkpointer checkpoints(*run.dp, run.optimizer.get(),
                                         {.directory = folder, .fallback = fallback});
        try {
          (void)checkpoints.load();
        } catch (const UnloadableCheckpoint& failure) {
          if (world.rank() == 0) error = failure.what(), status = cohort::exit_status_for(failure);
        } catch (const std::exception& failure) {
          if (world.rank() == 0) error = std::string("not UnloadableCheckpoint: ") + failure.what();
        }
      },
      cohort_test::host_world());
  return {error, status};
}

// Checkpoints saved before the program had an optimizer never load into it: an
// UnloadableCheckpoint (exit status 78) that says what to do, with and without fallback.
TEST(CheckpointUnloadable, SavedBeforeTheOptimizerExistedSaysWhatToDo) {
  TemporaryFolder folder;
  save_without_optimizer(folder.path());
  auto [error, status] = load_into_adamw(folder.path(), /*fallback=*/false);
  EXPECT_EQ(status, cohort::kConfigErrorExitStatus) << error;
  EXPECT_TRUE(contains(error, "step-000000000004: it holds no optimizer state")) << error;
  EXPECT_TRUE(contains(error, "cohort::without_optimizer, or before the program had an optimizer"))
      << error;
  EXPECT_TRUE(contains(error, "restart cannot fix this")) << error;
  EXPECT_TRUE(contains(error, "set CheckpointOptions::fallback")) << error;
  EXPECT_TRUE(contains(error, "here: step-000000000002")) << error;
  EXPECT_TRUE(contains(error, "use a new checkpoint directory")) << error;

  std::tie(error, status) = load_into_adamw(folder.path(), /*fallback=*/true);
  EXPECT_EQ(status, cohort::kConfigErrorExitStatus) << error;
  EXPECT_TRUE(contains(error, "can load into this program, and a restart cannot fix this"))
      << error;
  EXPECT_TRUE(contains(error, "step-000000000004: it holds no optimizer state")) << error;
  EXPECT_TRUE(contains(error, "step-000000000002: it holds no optimizer state")) << error;
  EXPECT_TRUE(contains(error, "start with a new checkpoint directory")) << error;
}

// A damaged `latest` without fallback blocks every start: the error names the older checkpoint
// that loads and how; with fallback it loads.
TEST(CheckpointUnloadable, DamagedLatestWithoutFallbackSaysHowToLoadThePrevious) {
  TemporaryFolder folder;
  const cohort::ParamRegistry registry = cohort_test::test_registry(DType::f32);
  cohort::run_local(
      2,
      [&](cohort::World& world) {
        TestRun run(world, registry, OptimizerKind::adamw);
        cohort::Checkpointer checkpoints(*run.dp, run.optimizer.get(),
                                         {.directory = folder.path()});
        for (int step = 0; step < 4; ++step) {
          run.step(step);
          if (step % 2 == 1) checkpoints.save({step + 1, 0, 0, ""});
        }
      },
      cohort_test::host_world());
  const auto file = folder.path() / "step-000000000004" / "rank-1.bin";
  std::filesystem::resize_file(file, std::filesystem::file_size(file) - 8);
  auto [error, status] = load_into_adamw(folder.path(), /*fallback=*/false);
  EXPECT_EQ(status, cohort::kConfigErrorExitStatus) << error;
  EXPECT_TRUE(contains(error, "(truncated)")) << error;
  EXPECT_TRUE(contains(error, "set CheckpointOptions::fallback")) << error;
  EXPECT_TRUE(contains(error, "here: step-000000000002")) << error;
  EXPECT_EQ(load_into_adamw(folder.path(), /*fallback=*/true).first, "");
}

// A failure to read is not the checkpoint's content: a restart may get past it (status 1).
TEST(CheckpointUnloadable, AFailureToReadStaysACheckpointErrorARestartMayFix) {
  TemporaryFolder folder;
  save_without_optimizer(folder.path());
  const auto manifest = folder.path() / "step-000000000004" / "manifest.json";
  std::filesystem::remove(manifest);
  std::filesystem::create_directory(manifest);  // reading it fails (EISDIR)
  const cohort::ParamRegistry registry = cohort_test::test_registry(DType::f32);
  cohort::run_local(
      2,
      [&](cohort::World& world) {
        TestRun run(world, registry, OptimizerKind::none);
        cohort::Checkpointer checkpoints(*run.dp, cohort::without_optimizer,
                                         {.directory = folder.path()});
        try {
          (void)checkpoints.load();
          ADD_FAILURE() << "loaded a checkpoint whose manifest is a folder";
        } catch (const UnloadableCheckpoint& failure) {
          ADD_FAILURE() << "an I/O error is not an UnloadableCheckpoint: " << failure.what();
        } catch (const CheckpointError& failure) {
          EXPECT_TRUE(contains(failure.what(), "manifest.json")) << failure.what();
          EXPECT_EQ(cohort::exit_status_for(failure), cohort::kFailedExitStatus);
        }
      },
      cohort_test::host_world());
}

// Note [Exit statuses] in exit_status.hpp.
TEST(CheckpointExitStatus, OnlyErrorsARestartCannotFixMapTo78) {
  EXPECT_EQ(cohort::exit_status_for(UnloadableCheckpoint("a changed model")), 78);
  EXPECT_EQ(cohort::exit_status_for(cohort::InvalidArgument("--global-batch 7 on 2 ranks")), 78);
  EXPECT_EQ(cohort::exit_status_for(CheckpointError("cannot read: Input/output error")), 1);
  EXPECT_EQ(cohort::exit_status_for(cohort::TimeoutError("rank 1 never arrived")), 1);
  EXPECT_EQ(cohort::exit_status_for(cohort::Error("a peer died")), 1);
  EXPECT_EQ(cohort::exit_status_for(std::runtime_error("anything else")), 1);
  EXPECT_FALSE(cohort::restart_can_fix(UnloadableCheckpoint("x")));
  EXPECT_TRUE(cohort::restart_can_fix(std::bad_alloc()));
}

cohort::SamplerOptions sampler_options(std::uint32_t batch_per_rank, int rank, int ranks) {
  return {.dataset_size = 1000,
          .batch_per_rank = batch_per_rank,
          .rank = rank,
          .world_size = ranks,
          .seed = 7,
          .shuffle = true,
          .last_batch = cohort::LastBatch::drop,
          .resource = nullptr};
}

// The state after a step, from a 2-rank sampler, puts a 3-rank sampler of the same global batch
// at the batch the 2 ranks would have taken next, across an epoch's end.
TEST(TrainingStateSampler, AtAndSeekResumeTheNextBatchOnAnyNumberOfRanks) {
  const cohort::Stream stream = cohort::Stream::create(cohort::Device::host());
  cohort::DistributedSampler two(sampler_options(6, 0, 2), stream);  // global batch 12
  for (int step = 0; step < 85; ++step) (void)two.next_batch();      // 83 steps an epoch
  const cohort::TrainingState state = cohort::TrainingState::at(85, two, "blob");
  EXPECT_EQ(state.step, 85);
  EXPECT_EQ(state.epoch, 1u);
  EXPECT_EQ(state.data_position, 2u * 12u);
  EXPECT_EQ(state.user_blob, "blob");
  std::set<std::int64_t> expected;
  for (int rank = 0; rank < 2; ++rank) {
    cohort::DistributedSampler of_rank(sampler_options(6, rank, 2), stream);
    for (const auto index : of_rank.host_indices({1, 2})) expected.insert(index);
  }
  std::set<std::int64_t> resumed;
  for (int rank = 0; rank < 3; ++rank) {
    cohort::DistributedSampler three(sampler_options(4, rank, 3), stream);
    state.seek(three);
    EXPECT_EQ(three.position(), (cohort::SamplerPosition{1, 2}));
    for (const auto index : three.host_indices(three.position())) resumed.insert(index);
  }
  EXPECT_EQ(resumed, expected);
}

TEST(TrainingStateSampler, SeekRefusesAPositionOfAnotherGlobalBatch) {
  const cohort::Stream stream = cohort::Stream::create(cohort::Device::host());
  cohort::DistributedSampler sampler(sampler_options(4, 0, 2), stream);  // global batch 8
  const cohort::TrainingState saved{5, 0, 5 * 12, ""};                   // 5 batches of 12
  const std::string error =
      cohort_test::message_of<cohort::InvalidArgument>([&] { saved.seek(sampler); });
  EXPECT_TRUE(contains(error, "sample 60 of epoch 0")) << error;
  EXPECT_TRUE(contains(error, "global batches of 8 samples (4 per rank x 2 ranks)")) << error;
  EXPECT_EQ(sampler.position(), (cohort::SamplerPosition{0, 0}));
}

}  // namespace
