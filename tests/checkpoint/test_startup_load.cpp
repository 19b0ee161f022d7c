// Start-up loads and live loads that meet a damaged checkpoint (Note [Start-up load] and Note
// [Checkpoint load] in checkpoint.hpp, Note [Putting back] in checkpoint_load.cpp): a start-up
// load reads straight into the arenas and, on a bad checksum, falls back to the previous
// checkpoint and holds it bitwise, or, with nothing good, throws and leaves every byte as it was
// initialized; a live load changes nothing at all.

#include "checkpoint/checkpoint_test_model.hpp"

#include <cohort/checkpoint/checkpoint.hpp>
#include <cohort/checkpoint/manifest.hpp>
#include <cohort/launch/store.hpp>

#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

namespace fs = std::filesystem;
using cohort::CheckpointError;
using cohort::DType;
using cohort::LoadReport;
using cohort::UnloadableCheckpoint;
using cohort_test::contains;
using cohort_test::OptimizerKind;
using cohort_test::TemporaryFolder;
using cohort_test::TestRun;

/// Every byte of one rank's state: the whole parameter arena (padding included), each optimizer
/// state array, the steps taken and the base learning rate.
struct StateBytes {
  std::vector<unsigned char> params;
  std::vector<std::vector<unsigned char>> optimizer;
  std::int64_t steps = -1;
  float learning_rate = 0;
  bool operator==(const StateBytes&) const = default;
};

std::vector<unsigned char> bytes_of(const cohort::TensorView& view) {
  const auto* data = static_cast<const unsigned char*>(view.data());
  return {data, data + view.count() * cohort::size_of(view.dtype())};
}

StateBytes state_of(TestRun& run) {
  run.dp->compute_stream().synchronize();
  StateBytes state;
  state.params = bytes_of(run.dp->param_arena());
  if (run.optimizer) {
    for (const cohort::OptimizerStateView& array : run.optimizer->state()) {
      state.optimizer.push_back(bytes_of(array.view));
    }
    state.steps = run.optimizer->steps_taken();
    state.learning_rate = run.optimizer->learning_rate();
  }
  return state;
}

struct Case {
  const char* name;
  OptimizerKind kind;
  DType dtype;
  int save_ranks;
  int load_ranks;
  const char* damaged;  ///< the array whose piece in rank-<file_rank>.bin gets a flipped bit
  int file_rank;
};

std::ostream& operator<<(std::ostream& out, const Case& c) {
  return out << c.name;
}

const Case kCases[] = {
    {"adamw_params", OptimizerKind::adamw, DType::f32, 2, 2, "params", 1},
    {"adamw_moment", OptimizerKind::adamw, DType::f32, 2, 2, "optimizer/exp_avg_sq", 0},
    {"zero1_adamw_3_ranks", OptimizerKind::zero1_adamw, DType::f32, 3, 3, "optimizer/exp_avg", 2},
    {"adamw_bf16_master", OptimizerKind::adamw, DType::bf16, 2, 2, "optimizer/master", 1},
    {"zero1_adamw_bf16_params", OptimizerKind::zero1_adamw, DType::bf16, 4, 4, "params", 2},
    {"sgd_one_rank", OptimizerKind::sgd, DType::f32, 1, 1, "params", 0},
    {"no_optimizer", OptimizerKind::none, DType::f32, 2, 2, "params", 0},
    {"adamw_2_to_3_ranks", OptimizerKind::adamw, DType::f32, 2, 3, "params", 1},
};

/// Saves checkpoints at steps 2 and 4; returns each rank's state as step 2 saved it.
std::vector<StateBytes> save_two(const fs::path& folder, const Case& c) {
  const cohort::ParamRegistry registry = cohort_test::test_registry(c.dtype);
  std::vector<StateBytes> at_two(static_cast<std::size_t>(c.save_ranks));
  cohort::run_local(
      c.save_ranks,
      [&](cohort::World& world) {
        TestRun run(world, registry, c.kind);
        auto checkpoints = cohort_test::checkpointer_of(run, {.directory = folder, .keep_last = 0});
        for (int step = 0; step < 4; ++step) {
          run.step(step);
          if (step % 2 == 1)
            checkpoints->save({step + 1, 0, 0, "state " + std::to_string(step + 1)});
          if (step == 1) at_two[static_cast<std::size_t>(world.rank())] = state_of(run);
        }
      },
      cohort_test::host_world());
  return at_two;
}

/// Flips one bit in the middle of `array`'s piece in rank-<file_rank>.bin of `checkpoint`.
void damage(const fs::path& checkpoint, const std::string& array, int file_rank) {
  std::ifstream in(checkpoint / "manifest.json");
  std::stringstream text;
  text << in.rdbuf();
  const cohort::Manifest manifest = cohort::parse_manifest(text.str());
  const cohort::ManifestArray* found = manifest.find_array(array);
  ASSERT_NE(found, nullptr) << array;
  const std::string file = "rank-" + std::to_string(file_rank) + ".bin";
  for (const cohort::ManifestPiece& piece : found->pieces) {
    if (manifest.files[piece.file].name != file || piece.count == 0) continue;
    const std::uint64_t at = piece.byte_offset + piece.count * cohort::size_of(found->dtype) / 2;
    std::fstream stream(checkpoint / file, std::ios::in | std::ios::out | std::ios::binary);
    stream.seekg(static_cast<std::streamoff>(at));
    char byte = 0;
    stream.read(&byte, 1);
    byte = static_cast<char>(byte ^ 0x04);
    stream.seekp(static_cast<std::streamoff>(at));
    stream.write(&byte, 1);
    return;
  }
  FAIL() << array << " has no piece in " << file;
}

/// One rank's view of a load into a new run (or, with `steps_first`, into a run that trained
/// that many steps first).
struct Outcome {
  StateBytes before;  ///< just before load()
  StateBytes after;
  std::string error;
  bool unloadable = false;
  std::int64_t step = -1;
  std::optional<LoadReport> report;
};

std::vector<Outcome> load_into_run(const fs::path& folder, const Case& c,
                                   cohort::CheckpointOptions options, int steps_first = 0) {
  const cohort::ParamRegistry registry = cohort_test::test_registry(c.dtype);
  std::vector<Outcome> outcomes(static_cast<std::size_t>(c.load_ranks));
  options.directory = folder;
  cohort::run_local(
      c.load_ranks,
      [&](cohort::World& world) {
        TestRun run(world, registry, c.kind);
        for (int step = 0; step < steps_first; ++step) run.step(100 + step);
        auto checkpoints = cohort_test::checkpointer_of(run, options);
        Outcome& outcome = outcomes[static_cast<std::size_t>(world.rank())];
        outcome.before = state_of(run);
        try {
          if (auto state = checkpoints->load()) outcome.step = state->step;
        } catch (const UnloadableCheckpoint& error) {
          outcome.error = error.what();
          outcome.unloadable = true;
        } catch (const CheckpointError& error) {
          outcome.error = error.what();
        }
        outcome.after = state_of(run);
        outcome.report = checkpoints->last_load();
      },
      cohort_test::host_world());
  return outcomes;
}

/// Elements of the test model's parameters (the arena's used part).
std::size_t used_elements(const Case& c) {
  const cohort::ParamRegistry registry = cohort_test::test_registry(c.dtype);
  std::size_t used = 0;
  for (const auto& param : registry.params()) {
    std::size_t count = 1;
    for (const auto extent : param.shape) count *= extent;
    used += count;
  }
  return used;
}

class StartupLoad : public ::testing::TestWithParam<Case> {};

// The latest checkpoint fails a checksum during a start-up load: the older one loads, and every
// rank ends with exactly the state that checkpoint saved (parameters, optimizer state, steps).
TEST_P(StartupLoad, FallsBackToThePreviousOnABadChecksumAndHoldsItBitwise) {
  const Case& c = GetParam();
  TemporaryFolder folder;
  const std::vector<StateBytes> saved = save_two(folder.path(), c);
  damage(folder.path() / "step-000000000004", c.damaged, c.file_rank);
  const std::vector<Outcome> outcomes = load_into_run(folder.path(), c, {.fallback = true});
  for (std::size_t rank = 0; rank < outcomes.size(); ++rank) {
    const Outcome& outcome = outcomes[rank];
    EXPECT_EQ(outcome.error, "") << "rank " << rank;
    EXPECT_EQ(outcome.step, 2) << "rank " << rank;
    ASSERT_TRUE(outcome.report.has_value());
    EXPECT_TRUE(outcome.report->at_startup);
    EXPECT_EQ(outcome.report->candidates_failed, 1);
    EXPECT_EQ(outcome.report->folder.filename(), "step-000000000002");
    if (c.save_ranks == c.load_ranks) {
      EXPECT_TRUE(outcome.after == saved[rank]) << "rank " << rank << " does not hold step 2";
    } else {
      // Resharded: the replicated state is the same on every rank; its padding differs.
      const std::size_t bytes = used_elements(c) * cohort::size_of(c.dtype);
      StateBytes expected = saved[0];
      StateBytes got = outcome.after;
      expected.params.resize(bytes);
      got.params.resize(bytes);
      for (auto& array : expected.optimizer) array.resize(used_elements(c) * 4);
      for (auto& array : got.optimizer) array.resize(used_elements(c) * 4);
      EXPECT_TRUE(got == expected) << "rank " << rank << " does not hold step 2";
    }
  }
}

// The latest checkpoint fails a checksum and there is nothing to fall back to (fallback off, or
// every older one damaged too): the load throws the checkpoint's error on every rank, and every
// byte of the state is what it was before the load, though it read into the arenas.
TEST_P(StartupLoad, WithNothingGoodItThrowsAndLeavesTheStateAsInitializedBitwise) {
  const Case& c = GetParam();
  TemporaryFolder folder;
  save_two(folder.path(), c);
  damage(folder.path() / "step-000000000004", c.damaged, c.file_rank);
  for (const bool fallback : {false, true}) {
    if (fallback) damage(folder.path() / "step-000000000002", c.damaged, c.file_rank);
    const std::vector<Outcome> outcomes = load_into_run(folder.path(), c, {.fallback = fallback});
    for (std::size_t rank = 0; rank < outcomes.size(); ++rank) {
      const Outcome& outcome = outcomes[rank];
      EXPECT_TRUE(outcome.unloadable) << "rank " << rank << ": " << outcome.error;
      EXPECT_TRUE(contains(outcome.error, "fail their checksum: the file is damaged"));
      EXPECT_TRUE(contains(outcome.error, "step-000000000004"));
      if (fallback) {
        EXPECT_TRUE(contains(outcome.error, "no checkpoint under"));
        EXPECT_TRUE(contains(outcome.error, "step-000000000002"));
      } else {
        EXPECT_TRUE(contains(outcome.error, "CheckpointOptions::fallback"));
      }
      EXPECT_TRUE(outcome.after == outcome.before)
          << "rank " << rank << " (fallback " << fallback << ") was changed by a failed load";
      EXPECT_EQ(outcome.after.steps, c.kind == OptimizerKind::none ? -1 : 0);
      EXPECT_FALSE(outcome.report.has_value());
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, StartupLoad, ::testing::ValuesIn(kCases),
                         [](const auto& param_info) { return std::string(param_info.param.name); });

class LiveLoad : public ::testing::TestWithParam<Case> {};

// A load into a run that has trained (a rollback) checks every byte before it writes one: with
// the latest checkpoint damaged and no fallback, or every checkpoint damaged, nothing changes.
TEST_P(LiveLoad, ABadChecksumChangesNothingBitwise) {
  const Case& c = GetParam();
  if (c.kind == OptimizerKind::none) GTEST_SKIP() << "a live load is one after optimizer steps";
  TemporaryFolder folder;
  save_two(folder.path(), c);
  damage(folder.path() / "step-000000000004", c.damaged, c.file_rank);
  for (const bool fallback : {false, true}) {
    if (fallback) damage(folder.path() / "step-000000000002", c.damaged, c.file_rank);
    const std::vector<Outcome> outcomes =
        load_into_run(folder.path(), c, {.fallback = fallback}, /*steps_first=*/3);
    for (std::size_t rank = 0; rank < outcomes.size(); ++rank) {
      const Outcome& outcome = outcomes[rank];
      EXPECT_TRUE(contains(outcome.error, "fail their checksum")) << outcome.error;
      EXPECT_EQ(outcome.before.steps, 3);
      EXPECT_TRUE(outcome.after == outcome.before)
          << "rank " << rank << " (fallback " << fallback << ") was changed by a failed live load";
    }
  }
  // Undamaged, the same live load succeeds and says it was live.
  TemporaryFolder intact;
  const std::vector<StateBytes> saved = save_two(intact.path(), c);
  const std::vector<Outcome> outcomes = load_into_run(intact.path(), c, {}, /*steps_first=*/3);
  for (std::size_t rank = 0; rank < outcomes.size(); ++rank) {
    EXPECT_EQ(outcomes[rank].step, 4);
    ASSERT_TRUE(outcomes[rank].report.has_value());
    EXPECT_FALSE(outcomes[rank].report->at_startup);
    EXPECT_EQ(outcomes[rank].report->direct_bytes, 0U);
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, LiveLoad, ::testing::ValuesIn(kCases),
                         [](const auto& param_info) { return std::string(param_info.param.name); });

// The rule (Note [Start-up load]): a load is a start-up load before the optimizer's first step and
// before this Checkpointer saved or loaded; and it reads straight into the arenas only what it can
// put back without a copy.
TEST(StartupLoadRule, StartUpUntilAStepASaveOrALoad) {
  const Case c{"adamw", OptimizerKind::adamw, DType::f32, 2, 2, "params", 0};
  TemporaryFolder folder;
  save_two(folder.path(), c);
  const cohort::ParamRegistry registry = cohort_test::test_registry(c.dtype);
  std::mutex mutex;
  std::vector<std::string> failures;
  auto expect = [&](bool condition, const std::string& what) {
    if (condition) return;
    const std::lock_guard lock(mutex);
    failures.push_back(what);
  };
  cohort::run_local(
      2,
      [&](cohort::World& world) {
        {
          TestRun run(world, registry, c.kind);
          cohort::Checkpointer checkpoints(*run.dp, run.optimizer.get(),
                                           {.directory = folder.path()});
          checkpoints.load();
          expect(checkpoints.last_load()->at_startup, "a new run's first load is a start-up load");
          // Every array of AdamW on two host ranks can be put back: all of it straight in.
          expect(checkpoints.last_load()->staged_bytes == 0, "nothing through staging");
          expect(checkpoints.last_load()->direct_bytes > 0, "bytes straight into the arenas");
          checkpoints.load();
          expect(!checkpoints.last_load()->at_startup, "a second load is live");
        }
        {
          TestRun run(world, registry, c.kind);
          run.step(0);
          cohort::Checkpointer checkpoints(*run.dp, run.optimizer.get(),
                                           {.directory = folder.path()});
          checkpoints.load();
          expect(!checkpoints.last_load()->at_startup, "a load after a step is live");
        }
        {
          TestRun run(world, registry, c.kind);
          const fs::path mine = folder.path() / "saved-first";
          cohort::Checkpointer checkpoints(*run.dp, run.optimizer.get(), {.directory = mine});
          checkpoints.save({0, 0, 0, ""});
          checkpoints.load();
          expect(!checkpoints.last_load()->at_startup, "a load after a save is live");
        }
        {
          TestRun run(world, registry, OptimizerKind::none);
          cohort::Checkpointer checkpoints(*run.dp, cohort::without_optimizer,
                                           {.directory = folder.path()});
          checkpoints.load();
          expect(checkpoints.last_load()->at_startup, "without an optimizer, the first load");
        }
      },
      cohort_test::host_world());
  for (const std::string& failure : failures) ADD_FAILURE() << failure;
}

// What the load chose for the replicated arrays and why is in `last_load()`: measured by default,
// or as `gather_replicated` says.
TEST(StartupLoadRule, TheReplicatedReadIsChosenAndSaysWhy) {
  const Case c{"adamw", OptimizerKind::adamw, DType::f32, 2, 2, "params", 0};
  TemporaryFolder folder;
  const std::vector<StateBytes> saved = save_two(folder.path(), c);
  for (const std::optional<bool> gather :
       {std::optional<bool>(), std::optional<bool>(true), std::optional<bool>(false)}) {
    const std::vector<Outcome> outcomes =
        load_into_run(folder.path(), c, {.gather_replicated = gather});
    for (const Outcome& outcome : outcomes) {
      ASSERT_TRUE(outcome.report.has_value());
      const LoadReport& report = *outcome.report;
      EXPECT_EQ(outcome.step, 4);
      const std::string text = report.describe();
      if (!gather && cohort_test::expected_host_backend() == cohort::Backend::shm) {
        // Note [Replicated reads]: one host's shared memory gathers without a probe.
        EXPECT_EQ(report.replicated.read, cohort::ReplicatedRead::slice_then_gather) << text;
        EXPECT_TRUE(contains(report.replicated.why, "shared memory")) << text;
        EXPECT_EQ(report.speeds.read_bytes_per_second, 0) << text;
      } else if (!gather) {
        EXPECT_TRUE(contains(report.replicated.why, "measured")) << text;
        EXPECT_GT(report.speeds.read_bytes_per_second, 0) << text;
        EXPECT_GT(report.speeds.gather_bytes_per_second, 0) << text;
        EXPECT_EQ(report.speeds.ranks, 2);
      } else {
        EXPECT_EQ(report.replicated.read, *gather ? cohort::ReplicatedRead::slice_then_gather
                                                  : cohort::ReplicatedRead::read_all)
            << text;
        EXPECT_TRUE(contains(report.replicated.why, "gather_replicated")) << text;
      }
      EXPECT_TRUE(contains(text, "at start-up")) << text;
    }
  }
  // One rank: nothing to choose, and the parameters go through staging (no other rank holds a
  // copy to put back from); AdamW's moments still go straight in.
  const Case one{"one", OptimizerKind::adamw, DType::f32, 2, 1, "params", 0};
  const std::vector<Outcome> outcomes = load_into_run(folder.path(), one, {});
  ASSERT_TRUE(outcomes[0].report.has_value());
  EXPECT_EQ(outcomes[0].report->replicated.read, cohort::ReplicatedRead::read_all);
  EXPECT_TRUE(contains(outcomes[0].report->replicated.why, "one rank"));
  EXPECT_GT(outcomes[0].report->staged_bytes, 0U);  // the parameters (the arena's used part)
  EXPECT_EQ(outcomes[0].report->direct_bytes, 2 * outcomes[0].report->staged_bytes);
}

// Note [Checkpointer keys]: a second Checkpointer of the same directory in the same world reads
// only its own reports. The first one's load fails on rank 1 (a damaged piece rank 1 reads) and
// leaves rank 1's failure in the store; the file is mended and a second Checkpointer loads, with
// rank 1 late on purpose: rank 0 must wait for rank 1's new report, not take the old failure.
TEST(CheckpointerKeys, ASecondCheckpointerOfTheDirectoryDoesNotReadTheFirstOnesReports) {
  const Case c{"keys", OptimizerKind::adamw, DType::f32, 2, 2, "params", 1};
  TemporaryFolder folder;
  const std::vector<StateBytes> saved = save_two(folder.path(), c);
  const fs::path latest = folder.path() / "step-000000000004";
  damage(latest, c.damaged, c.file_rank);
  const cohort::ParamRegistry registry = cohort_test::test_registry(c.dtype);
  std::vector<std::string> first_errors(2), second_errors(2);
  std::vector<std::int64_t> steps(2, -1);
  // Ranks that read different reports wait on different collectives: fail in seconds, not hang.
  cohort::WorldOptions options = cohort_test::host_world();
  options.timeout = std::chrono::seconds(20);
  cohort::run_local(
      2,
      [&](cohort::World& world) {
        const auto rank = static_cast<std::size_t>(world.rank());
        TestRun run(world, registry, c.kind);
        {
          auto first = cohort_test::checkpointer_of(run, {.directory = folder.path()});
          try {
            first->load();
          } catch (const CheckpointError& error) {
            first_errors[rank] = error.what();
          }
        }
        cohort::store_barrier(world.store(), "test/keys/failed", 2, world.timeout());
        if (rank == 0) damage(latest, c.damaged, c.file_rank);  // the same bit again: mended
        cohort::store_barrier(world.store(), "test/keys/mended", 2, world.timeout());
        auto second = cohort_test::checkpointer_of(run, {.directory = folder.path()});
        if (rank == 1) std::this_thread::sleep_for(std::chrono::milliseconds(300));
        try {
          if (auto state = second->load()) steps[rank] = state->step;
        } catch (const CheckpointError& error) {
          second_errors[rank] = error.what();
        }
      },
      options);
  // The precondition: rank 1 is the rank whose report failed the first load.
  ASSERT_TRUE(contains(first_errors[0], "rank 1: ")) << first_errors[0];
  ASSERT_TRUE(contains(first_errors[1], "fail their checksum")) << first_errors[1];
  for (std::size_t rank = 0; rank < 2; ++rank) {
    EXPECT_EQ(second_errors[rank], "") << "rank " << rank;
    EXPECT_EQ(steps[rank], 4) << "rank " << rank;
  }
}

}  // namespace
