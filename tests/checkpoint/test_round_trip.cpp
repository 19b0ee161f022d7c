// Save, load and continue: a resumed run ends bitwise equal to an uninterrupted one, for every
// optimizer and dtype, 1 to 8 ranks as threads; and ZeRO-1 state re-split over 4 -> 2 -> 3 -> 4
// ranks.

#include "checkpoint/checkpoint_test_model.hpp"

#include <cohort/checkpoint/checkpoint.hpp>
#include <cohort/optim/sgd.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>
#include <tuple>

namespace {

using cohort::DType;
using cohort_test::OptimizerKind;
using cohort_test::TemporaryFolder;
using cohort_test::TestRun;

constexpr int kSavedStep = 3;
constexpr int kSteps = 6;

/// Every optimizer state array of a run, by name, as bytes of this rank's range.
std::vector<std::pair<std::string, std::vector<unsigned char>>> state_of(const TestRun& run) {
  std::vector<std::pair<std::string, std::vector<unsigned char>>> out;
  if (!run.optimizer) return out;
  run.dp->compute_stream().synchronize();
  for (const cohort::OptimizerStateView& state : run.optimizer->state()) {
    const auto* data = static_cast<const unsigned char*>(state.view.data());
    out.emplace_back(state.name, std::vector<unsigned char>(data, data + state.view.count() * 4));
  }
  return out;
}

struct RoundTripCase {
  OptimizerKind kind;
  DType dtype;
  int ranks;
  bool async;
};

class RoundTrip : public ::testing::TestWithParam<RoundTripCase> {};

TEST_P(RoundTrip, ResumedRunIsBitwiseEqualToUninterruptedOne) {
  const RoundTripCase c = GetParam();
  TemporaryFolder folder;
  const cohort::ParamRegistry registry = cohort_test::test_registry(c.dtype);
  const bool scaler = c.dtype != DType::f32 && c.kind != OptimizerKind::none;
  cohort::run_local(
      c.ranks,
      [&](cohort::World& world) {
        TestRun original(world, registry, c.kind, scaler);
        // No optimizer: `without_optimizer`.
        const auto saver = cohort_test::checkpointer_of(original, {.directory = folder.path()});
        for (int step = 0; step < kSavedStep; ++step) original.step(step);
        const cohort::TrainingState saved{kSavedStep, 2, 96, "blob of rank 0"};
        if (c.async) {
          saver->save_async(saved);
        } else {
          saver->save(saved);
        }
        for (int step = kSavedStep; step < kSteps; ++step)
          original.step(step);  // overlaps the write
        saver->wait();

        TestRun resumed(world, registry, c.kind, scaler);
        // The asynchronous cases load with all-gathered slices of the replicated arrays.
        const auto loader = cohort_test::checkpointer_of(
            resumed, {.directory = folder.path(), .gather_replicated = c.async});
        const std::optional<cohort::TrainingState> state = loader->load();
        ASSERT_TRUE(state.has_value());
        EXPECT_EQ(state->step, kSavedStep);
        EXPECT_EQ(state->epoch, 2u);
        EXPECT_EQ(state->data_position, 96u);
        EXPECT_EQ(state->user_blob, "blob of rank 0");
        for (int step = kSavedStep; step < kSteps; ++step) resumed.step(step);
        EXPECT_EQ(resumed.params(), original.params()) << "rank " << world.rank();
        EXPECT_EQ(state_of(resumed), state_of(original)) << "rank " << world.rank();
        if (original.optimizer) {
          EXPECT_EQ(resumed.optimizer->steps_taken(), original.optimizer->steps_taken());
        }
        if (scaler) {
          const auto a = original.scaler->read(original.dp->compute_stream());
          const auto b = resumed.scaler->read(resumed.dp->compute_stream());
          EXPECT_EQ(a.scale, b.scale);
          EXPECT_EQ(a.growth_tracker, b.growth_tracker);
        }
      },
      cohort_test::host_world());
  EXPECT_TRUE(std::filesystem::exists(folder.path() / "step-000000000003" / "manifest.json"));
}

std::vector<RoundTripCase> round_trip_cases() {
  std::vector<RoundTripCase> cases;
  for (const OptimizerKind kind : {OptimizerKind::none, OptimizerKind::sgd, OptimizerKind::adamw,
                                   OptimizerKind::zero1_sgd, OptimizerKind::zero1_adamw}) {
    for (const DType dtype : {DType::f32, DType::bf16, DType::f16}) {
      for (const int ranks : {2, 3}) cases.push_back({kind, dtype, ranks, ranks == 3});
    }
  }
  for (const int ranks : {1, 4, 5, 8}) {
    cases.push_back({OptimizerKind::zero1_adamw, DType::f32, ranks, ranks % 2 == 0});
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Checkpoint, RoundTrip, ::testing::ValuesIn(round_trip_cases()),
                         [](const ::testing::TestParamInfo<RoundTripCase>& param) {
                           return std::string(cohort_test::name_of(param.param.kind)) + "_" +
                                  std::string(cohort::to_string(param.param.dtype)) + "_" +
                                  std::to_string(param.param.ranks) + "ranks" +
                                  (param.param.async ? "_async" : "");
                         });

/// What the 4-rank run had when it saved: the parameters and every state array, whole.
struct GlobalState {
  std::mutex mutex;
  std::vector<unsigned char> params;
  std::map<std::string, std::vector<float>> state;
  std::vector<unsigned char> final_params;
};

void record(GlobalState& global, const TestRun& run) {
  const std::lock_guard lock(global.mutex);
  global.params = run.params();
  const std::size_t used = run.dp->plan().used_count;
  for (const cohort::OptimizerStateView& view : run.optimizer->state()) {
    std::vector<float>& whole = global.state[view.name];
    whole.resize(used);
    const auto* data = static_cast<const float*>(view.view.data());
    for (std::size_t i = 0; i < view.view.count(); ++i) {
      const std::size_t element = run.optimizer->shard_offset() + i;
      if (element < used) whole[element] = data[i];
    }
  }
}

/// This rank's state shard equals the matching slice of the saved whole (zeros past it).
void expect_matches(GlobalState& global, const TestRun& run) {
  const std::lock_guard lock(global.mutex);
  EXPECT_EQ(run.params(), global.params);
  const std::size_t used = run.dp->plan().used_count;
  for (const cohort::OptimizerStateView& view : run.optimizer->state()) {
    const auto* data = static_cast<const float*>(view.view.data());
    std::size_t mismatches = 0;
    for (std::size_t i = 0; i < view.view.count(); ++i) {
      const std::size_t element = run.optimizer->shard_offset() + i;
      const float expected = element < used ? global.state.at(view.name)[element] : 0.0f;
      if (std::memcmp(&data[i], &expected, sizeof(float)) != 0) ++mismatches;
    }
    EXPECT_EQ(mismatches, 0u) << view.name << " on rank " << run.dp->world().rank() << " of "
                              << run.dp->world().size();
  }
}

class Resharding : public ::testing::TestWithParam<DType> {};

TEST_P(Resharding, Zero1StateResplitsFrom4To2To3To4Ranks) {
  const DType dtype = GetParam();
  TemporaryFolder folder;
  const cohort::ParamRegistry registry = cohort_test::test_registry(dtype);
  // bf16 loads with all-gathered slices of the (replicated) parameters: slices of another world's
  // pieces.
  const cohort::CheckpointOptions options{.directory = folder.path(),
                                          .gather_replicated = dtype == DType::bf16};
  GlobalState global;
  cohort::run_local(
      4,
      [&](cohort::World& world) {
        TestRun run(world, registry, OptimizerKind::zero1_adamw);
        cohort::Checkpointer checkpoints(*run.dp, run.optimizer.get(), options);
        for (int step = 0; step < kSavedStep; ++step) run.step(step);
        checkpoints.save({kSavedStep, 0, 4 * 24, "x"});
        record(global, run);  // each rank its own shard
        for (int step = kSavedStep; step < kSteps; ++step) run.step(step);
        if (world.rank() == 0) {
          const std::lock_guard lock(global.mutex);
          global.final_params = run.params();
        }
      },
      cohort_test::host_world());

  for (const int ranks : {2, 3}) {
    cohort::run_local(
        ranks,
        [&](cohort::World& world) {
          TestRun run(world, registry, OptimizerKind::zero1_adamw);
          cohort::Checkpointer checkpoints(*run.dp, run.optimizer.get(), options);
          const std::optional<cohort::TrainingState> state = checkpoints.load();
          ASSERT_TRUE(state.has_value());
          EXPECT_EQ(state->data_position, 96u);
          EXPECT_EQ(run.optimizer->steps_taken(), kSavedStep);
          expect_matches(global, run);
          checkpoints.save(*state);  // the same step again: replaces `latest`
        },
        cohort_test::host_world());
  }

  cohort::run_local(
      4,
      [&](cohort::World& world) {
        TestRun run(world, registry, OptimizerKind::zero1_adamw);
        cohort::Checkpointer checkpoints(*run.dp, run.optimizer.get(), options);
        ASSERT_TRUE(checkpoints.load().has_value());
        expect_matches(global, run);
        for (int step = kSavedStep; step < kSteps; ++step) run.step(step);
        const std::lock_guard lock(global.mutex);
        EXPECT_EQ(run.params(), global.final_params) << "rank " << world.rank();
      },
      cohort_test::host_world());
}

INSTANTIATE_TEST_SUITE_P(Checkpoint, Resharding, ::testing::Values(DType::f32, DType::bf16),
                         [](const ::testing::TestParamInfo<DType>& param) {
                           return std::string(cohort::to_string(param.param));
                         });

/// The parameters as floats (an f32 arena's used part).
std::vector<float> floats_of(const std::vector<unsigned char>& bytes) {
  std::vector<float> values(bytes.size() / sizeof(float));
  std::memcpy(values.data(), bytes.data(), values.size() * sizeof(float));
  return values;
}

/// The lines of `text` that contain `part`.
std::vector<std::string> lines_with(const std::string& text, const std::string& part) {
  std::vector<std::string> found;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.find(part) != std::string::npos) found.push_back(line);
  }
  return found;
}

// docs/checkpoint.md, "Another number of ranks": a checkpoint loads exactly on any number of
// ranks, and the steps after it are bitwise equal to the uninterrupted run on the same number of
// ranks; on another number each step's mean is summed in another order, so the run stays within
// rounding of it and is not bitwise equal. The resume says so, once, on rank 0.
TEST(Resharding, ResumeOnAnotherWorldSizeSaysSoAndIsWithinRoundingNotBitwise) {
  constexpr int kGlobalBatch = 12;
  TemporaryFolder folder;
  const cohort::ParamRegistry registry = cohort_test::test_registry(DType::f32);
  std::mutex mutex;
  std::vector<unsigned char> uninterrupted;
  cohort::run_local(
      4,
      [&](cohort::World& world) {
        TestRun run(world, registry, OptimizerKind::zero1_adamw);
        cohort::Checkpointer checkpoints(*run.dp, run.optimizer.get(),
                                         {.directory = folder.path()});
        for (int step = 0; step < kSteps; ++step) {
          run.step_on_batch(step, kGlobalBatch);
          if (step + 1 == kSavedStep)
            checkpoints.save({kSavedStep, 0, kSavedStep * kGlobalBatch, ""});
        }
        const std::lock_guard lock(mutex);
        if (world.rank() == 0) uninterrupted = run.params();
      },
      cohort_test::host_world());

  auto resume_on = [&](int ranks, std::string& log) {
    std::vector<unsigned char> params;
    ::testing::internal::CaptureStderr();
    cohort::run_local(
        ranks,
        [&](cohort::World& world) {
          TestRun run(world, registry, OptimizerKind::zero1_adamw);
          cohort::Checkpointer checkpoints(*run.dp, run.optimizer.get(),
                                           {.directory = folder.path()});
          ASSERT_TRUE(checkpoints.load().has_value());
          for (int step = kSavedStep; step < kSteps; ++step) run.step_on_batch(step, kGlobalBatch);
          const std::lock_guard lock(mutex);
          if (world.rank() == 0) params = run.params();
        },
        cohort_test::host_world());
    log = ::testing::internal::GetCapturedStderr();
    return params;
  };
  std::string same_log, other_log;
  EXPECT_EQ(resume_on(4, same_log), uninterrupted) << "4 -> 4 ranks must be bitwise equal";
  EXPECT_TRUE(lines_with(same_log, "ranks").empty()) << same_log;

  const std::vector<float> expected = floats_of(uninterrupted);
  const std::vector<float> resharded = floats_of(resume_on(2, other_log));
  ASSERT_EQ(resharded.size(), expected.size());
  EXPECT_NE(resharded, expected) << "4 -> 2 ranks came out bitwise equal: the docs say it does not";
  double worst = 0.0;
  for (std::size_t i = 0; i < expected.size(); ++i) {
    const double a = resharded[i], b = expected[i];
    worst = std::max(worst, std::abs(a - b) / std::max(1.0, std::abs(b)));
  }
  EXPECT_LT(worst, 1e-5) << "4 -> 2 ranks is further from the 4-rank run than rounding";
  const std::vector<std::string> said = lines_with(other_log, "saved on 4 ranks");
  ASSERT_EQ(said.size(), 1u) << other_log;
  EXPECT_TRUE(said[0].find("rank 0") != std::string::npos) << said[0];
  EXPECT_TRUE(said[0].find("2 ranks") != std::string::npos) << said[0];
  EXPECT_TRUE(said[0].find("not bitwise") != std::string::npos) << said[0];
}

TEST(AsyncSave, ASecondRequestWaitsForTheFirstAndKeepLastPrunes) {
  TemporaryFolder folder;
  const cohort::ParamRegistry registry = cohort_test::test_registry(DType::f32);
  cohort::run_local(
      2,
      [&](cohort::World& world) {
        TestRun run(world, registry, OptimizerKind::adamw);
        cohort::Checkpointer checkpoints(*run.dp, run.optimizer.get(),
                                         {.directory = folder.path(), .keep_last = 2});
        for (int step = 0; step < 5; ++step) {
          run.step(step);
          checkpoints.save_async({step + 1, 0, 0, ""});
        }
        checkpoints.wait();
        EXPECT_FALSE(checkpoints.save_in_flight());
      },
      cohort_test::host_world());
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(folder.path())) {
    names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"latest", "step-000000000004", "step-000000000005"}));
}

// Note [Checkpoint in place]: on the host the writer reads the arrays in place. Here it is held
// before it reads anything, so the first step after save_async must copy all of them to staging
// before it writes, without waiting for the writer; the file then holds the state of the save.
TEST(AsyncSave, TheNextStepStagesWhatTheWriterHasNotReadBeforeItWrites) {
  TemporaryFolder folder;
  const cohort::ParamRegistry registry = cohort_test::test_registry(DType::f32);
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  cohort::run_local(
      2,
      [&](cohort::World& world) {
        TestRun original(world, registry, OptimizerKind::adamw);
        cohort::CheckpointOptions options{.directory = folder.path()};
        options.test_hook = [released](cohort::SavePoint point) {
          if (point == cohort::SavePoint::shard_started) {
            (void)released.wait_for(std::chrono::seconds(10));
          }
        };
        cohort::Checkpointer saver(*original.dp, original.optimizer.get(), options);
        for (int step = 0; step < kSavedStep; ++step) original.step(step);
        saver.save_async({kSavedStep, 0, 0, ""});
        const auto start = std::chrono::steady_clock::now();
        for (int step = kSavedStep; step < kSteps; ++step) original.step(step);
        const auto took = std::chrono::steady_clock::now() - start;
        EXPECT_TRUE(saver.save_in_flight()) << "the writer was not held";
        // Rank 0's steps end after every rank's first step (they all-reduce together).
        if (world.rank() == 0) release.set_value();
        saver.wait();
        EXPECT_LT(took, std::chrono::seconds(5)) << "the steps waited for the held writer";

        TestRun resumed(world, registry, OptimizerKind::adamw);
        cohort::Checkpointer loader(*resumed.dp, resumed.optimizer.get(),
                                    {.directory = folder.path()});
        ASSERT_TRUE(loader.load().has_value());
        for (int step = kSavedStep; step < kSteps; ++step) resumed.step(step);
        EXPECT_EQ(resumed.params(), original.params()) << "rank " << world.rank();
        EXPECT_EQ(state_of(resumed), state_of(original)) << "rank " << world.rank();
      },
      cohort_test::host_world());
}

// Two Checkpointers of one optimizer (say, a local and a remote folder), both saving with their
// writers held: the next step must hand over to both before it writes.
TEST(AsyncSave, TwoCheckpointersOfOneOptimizerBothKeepTheSavedState) {
  TemporaryFolder first_folder, second_folder;
  const cohort::ParamRegistry registry = cohort_test::test_registry(DType::f32);
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  cohort::run_local(
      1,
      [&](cohort::World& world) {
        TestRun run(world, registry, OptimizerKind::adamw);
        auto options_for = [&](const std::filesystem::path& directory) {
          cohort::CheckpointOptions options{.directory = directory};
          options.test_hook = [released](cohort::SavePoint point) {
            if (point == cohort::SavePoint::shard_started) {
              (void)released.wait_for(std::chrono::seconds(10));
            }
          };
          return options;
        };
        cohort::Checkpointer first(*run.dp, run.optimizer.get(), options_for(first_folder.path()));
        cohort::Checkpointer second(*run.dp, run.optimizer.get(),
                                    options_for(second_folder.path()));
        run.step(0);
        const std::vector<unsigned char> params = run.params();
        const auto state = state_of(run);
        first.save_async({1, 0, 0, ""});
        second.save_async({1, 0, 0, ""});
        run.step(1);
        release.set_value();
        first.wait();
        second.wait();
        ASSERT_NE(run.params(), params);
        for (const auto* folder : {&first_folder, &second_folder}) {
          cohort::Checkpointer loader(*run.dp, run.optimizer.get(), {.directory = folder->path()});
          ASSERT_TRUE(loader.load().has_value());
          EXPECT_EQ(run.params(), params) << folder->path();
          EXPECT_EQ(state_of(run), state) << folder->path();
        }
      },
      cohort_test::host_world());
}

// The same with the writer free: a file of several write chunks, and steps right after
// save_async, so that the next step finds the writer part of the way through (where exactly
// depends on the timing, which each round varies); the file must hold the state of the save.
TEST(AsyncSave, StepsDuringTheWriteLeaveTheSavedStateInTheFile) {
  TemporaryFolder folder;
  cohort::ParamRegistry registry;
  registry.add("big", {600'000});  // 7.2 MB of file with AdamW's two moments: 2 write chunks
  cohort::run_local(
      1,
      [&](cohort::World& world) {
        TestRun run(world, registry, OptimizerKind::adamw);
        cohort::Checkpointer checkpoints(*run.dp, run.optimizer.get(),
                                         {.directory = folder.path(), .keep_last = 1});
        int step = 0;
        for (const int pause_ms : {0, 1, 2, 4}) {
          run.step(step++);
          const std::vector<unsigned char> params = run.params();
          const auto state = state_of(run);
          checkpoints.save_async({step, 0, 0, ""});
          std::this_thread::sleep_for(std::chrono::milliseconds(pause_ms));
          // Straight to the update, with the gradients of the last step (filling new ones would
          // give the writer time to finish first).
          run.optimizer->step();
          run.dp->compute_stream().synchronize();
          checkpoints.wait();
          ASSERT_NE(run.params(), params) << "the steps changed nothing";
          cohort::Checkpointer loader(*run.dp, run.optimizer.get(), {.directory = folder.path()});
          ASSERT_TRUE(loader.load().has_value());
          EXPECT_EQ(run.params(), params) << "after a pause of " << pause_ms << " ms";
          EXPECT_EQ(state_of(run), state) << "after a pause of " << pause_ms << " ms";
        }
      },
      cohort_test::host_world());
}

// Note [Checkpoint counters]: save_async copies the optimizer's step counter and the loss
// scaler's state in stream order instead of reading them, so it returns while the compute stream
// is still busy, and the checkpoint still holds their values at that point of the stream.
TEST(AsyncSave, ReturnsWhileTheComputeStreamIsBusy) {
  TemporaryFolder folder;
  cohort::run_local(1, [&](cohort::World& world) {
    cohort::ParamRegistry registry;
    const cohort::ParamHandle w = registry.add("w", {300});
    cohort::DataParallel dp(world, registry, {.host_compute = cohort::HostExecution::worker});
    cohort::Sgd sgd(cohort::target_of(dp), {.lr = 0.1f});
    cohort::LossScaler scaler(world.device(), {.initial_scale = 4.0f, .growth_interval = 1});
    sgd.set_loss_scaler(&scaler);
    cohort::Checkpointer saver(dp, &sgd, {.directory = folder.path()}, &scaler);
    for (int step = 0; step < 3; ++step) {
      dp.grad_ready(w);
      dp.sync_grads();  // zero gradients: finite, so each step counts and the scale grows
      sgd.step();
    }
    // The compute stream is held until the save has returned, or for 10 s at most (a save that
    // waits for the stream then takes that long instead of hanging).
    std::promise<void> release;
    std::shared_future<void> released = release.get_future().share();
    dp.compute_stream().enqueue([released] { (void)released.wait_for(std::chrono::seconds(10)); });
    const auto start = std::chrono::steady_clock::now();
    saver.save_async({7, 0, 0, ""});
    const auto took = std::chrono::steady_clock::now() - start;
    release.set_value();
    saver.wait();
    EXPECT_LT(took, std::chrono::seconds(5)) << "save_async waited for the compute stream";

    cohort::Sgd resumed(cohort::target_of(dp), {.lr = 0.1f});
    cohort::LossScaler resumed_scaler(world.device(), {.initial_scale = 4.0f});
    resumed.set_loss_scaler(&resumed_scaler);
    cohort::Checkpointer loader(dp, &resumed, {.directory = folder.path()}, &resumed_scaler);
    const std::optional<cohort::TrainingState> loaded = loader.load();
    ASSERT_TRUE(loaded.has_value());
    EXPECT_EQ(loaded->step, 7);
    EXPECT_EQ(resumed.steps_taken(), 3);
    EXPECT_EQ(resumed_scaler.read(dp.compute_stream()).scale, 32.0f);  // 4 x 2^3
  });
}

}  // namespace
