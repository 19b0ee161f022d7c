// Damaged checkpoints and saves stopped part-way: each load either succeeds on a checkpoint that
// is whole, or fails with an error naming the file and the problem, having changed nothing.

#include "checkpoint/checkpoint_test_model.hpp"

#include <cohort/checkpoint/checkpoint.hpp>

#include <gtest/gtest.h>

#include <sys/mount.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>
#include <stdexcept>

namespace {

using cohort::CheckpointError;
using cohort::DType;
using cohort_test::contains;
using cohort_test::OptimizerKind;
using cohort_test::TemporaryFolder;
using cohort_test::TestRun;

constexpr int kRanks = 2;

/// Saves checkpoints at steps 2 and 4 of a 2-rank AdamW run with ZeRO-1.
void save_two(const std::filesystem::path& folder) {
  const cohort::ParamRegistry registry = cohort_test::test_registry(DType::f32);
  cohort::run_local(
      kRanks,
      [&](cohort::World& world) {
        TestRun run(world, registry, OptimizerKind::zero1_adamw);
        cohort::Checkpointer checkpoints(*run.dp, run.optimizer.get(), {.directory = folder});
        for (int step = 0; step < 4; ++step) {
          run.step(step);
          if (step % 2 == 1)
            checkpoints.save({step + 1, 0, 0, "state " + std::to_string(step + 1)});
        }
      },
      cohort_test::host_world());
}

/// Loads into a fresh 2-rank model whose parameters are first set to a sentinel; returns the
/// error text (empty when the load succeeded), the loaded step, and whether parameters stayed
/// at the sentinel.
struct LoadOutcome {
  std::string error;
  std::int64_t step = -1;
  bool untouched = false;
};

LoadOutcome try_load(const std::filesystem::path& folder, bool fallback = false,
                     bool allow_resharding = true, int ranks = kRanks, bool other_model = false) {
  const cohort::ParamRegistry registry = cohort_test::test_registry(DType::f32, other_model);
  LoadOutcome outcome;
  std::mutex mutex;
  std::vector<bool> failed(static_cast<std::size_t>(ranks));
  cohort::run_local(
      ranks,
      [&](cohort::World& world) {
        TestRun run(world, registry, OptimizerKind::zero1_adamw);
        TestRun::fill(run.dp->param_arena(), [](std::size_t) { return 42.0; });
        const std::vector<unsigned char> sentinel = run.params();
        cohort::Checkpointer checkpoints(
            *run.dp, run.optimizer.get(),
            {.directory = folder, .fallback = fallback, .allow_resharding = allow_resharding});
        std::string error;
        std::int64_t step = -1;
        try {
          if (auto state = checkpoints.load()) step = state->step;
        } catch (const CheckpointError& failure) {
          error = failure.what();
        }
        const bool untouched = run.params() == sentinel && run.optimizer->steps_taken() == 0;
        const std::lock_guard lock(mutex);
        failed[static_cast<std::size_t>(world.rank())] = !error.empty();
        if (world.rank() == 0) {
          outcome.error = error;
          outcome.step = step;
          outcome.untouched = untouched;
        }
      },
      cohort_test::host_world());
  // Every rank fails, or none does.
  EXPECT_EQ(std::count(failed.begin(), failed.end(), failed[0]), ranks);
  return outcome;
}

std::filesystem::path newest(const std::filesystem::path& folder) {
  return folder / "step-000000000004";
}

TEST(CheckpointFaults, IntactCheckpointLoadsTheNewest) {
  TemporaryFolder folder;
  save_two(folder.path());
  const LoadOutcome outcome = try_load(folder.path());
  EXPECT_EQ(outcome.error, "");
  EXPECT_EQ(outcome.step, 4);
}

TEST(CheckpointFaults, NoCheckpointIsAFreshStart) {
  TemporaryFolder folder;
  const LoadOutcome outcome = try_load(folder.path() / "none-yet");
  EXPECT_EQ(outcome.error, "");
  EXPECT_EQ(outcome.step, -1);
  EXPECT_TRUE(outcome.untouched);
}

TEST(CheckpointFaults, TruncatedFileIsNamedAndNothingChanges) {
  TemporaryFolder folder;
  save_two(folder.path());
  const auto file = newest(folder.path()) / "rank-1.bin";
  std::filesystem::resize_file(file, std::filesystem::file_size(file) - 10);
  LoadOutcome outcome = try_load(folder.path());
  EXPECT_TRUE(contains(outcome.error, "rank-1.bin has"));
  EXPECT_TRUE(contains(outcome.error, "(truncated)"));
  EXPECT_TRUE(contains(outcome.error, "step-000000000004"));
  EXPECT_TRUE(outcome.untouched);
  outcome = try_load(folder.path(), /*fallback=*/true);
  EXPECT_EQ(outcome.error, "");
  EXPECT_EQ(outcome.step, 2);
}

TEST(CheckpointFaults, FlippedByteFailsItsChecksum) {
  TemporaryFolder folder;
  save_two(folder.path());
  const auto file = newest(folder.path()) / "rank-0.bin";
  {
    std::fstream stream(file, std::ios::in | std::ios::out | std::ios::binary);
    stream.seekg(100);
    char byte = 0;
    stream.read(&byte, 1);
    byte = static_cast<char>(byte ^ 0x10);
    stream.seekp(100);
    stream.write(&byte, 1);
  }
  LoadOutcome outcome = try_load(folder.path());
  EXPECT_TRUE(contains(outcome.error, "rank-0.bin: bytes 0 to"));
  EXPECT_TRUE(contains(outcome.error, "fail their checksum"));
  EXPECT_TRUE(outcome.untouched);
  EXPECT_EQ(try_load(folder.path(), true).step, 2);
}

TEST(CheckpointFaults, MissingShardIsNamed) {
  TemporaryFolder folder;
  save_two(folder.path());
  std::filesystem::remove(newest(folder.path()) / "rank-1.bin");
  const LoadOutcome outcome = try_load(folder.path());
  EXPECT_TRUE(contains(outcome.error, "rank-1.bin is missing"));
  EXPECT_TRUE(outcome.untouched);
}

TEST(CheckpointFaults, OtherModelIsRefusedNamingTheParameter) {
  TemporaryFolder folder;
  save_two(folder.path());
  const LoadOutcome outcome = try_load(folder.path(), false, true, kRanks, /*other_model=*/true);
  EXPECT_TRUE(contains(outcome.error, "saved from another model: parameter 2 is head.weight"));
  EXPECT_TRUE(outcome.untouched);
}

TEST(CheckpointFaults, OtherWorldSizeWithoutReshardingIsRefused) {
  TemporaryFolder folder;
  save_two(folder.path());
  const LoadOutcome outcome = try_load(folder.path(), false, /*allow_resharding=*/false, 3);
  EXPECT_TRUE(contains(outcome.error, "saved on 2 ranks and this world has 3"));
  EXPECT_TRUE(outcome.untouched);
}

TEST(CheckpointFaults, NewerFormatAndDamagedManifestAreRefused) {
  TemporaryFolder folder;
  save_two(folder.path());
  const auto manifest = newest(folder.path()) / "manifest.json";
  std::ostringstream read;
  read << std::ifstream(manifest).rdbuf();
  const std::string text = read.str();
  const auto at = text.find("\"format_version\": 1");
  ASSERT_NE(at, std::string::npos);
  std::ofstream(manifest) << text.substr(0, at) << "\"format_version\": 7" << text.substr(at + 19);
  LoadOutcome outcome = try_load(folder.path());
  EXPECT_TRUE(contains(outcome.error, "format version 7"));
  EXPECT_TRUE(outcome.untouched);
  std::ofstream(manifest) << text.substr(0, text.size() / 2);
  outcome = try_load(folder.path());
  EXPECT_TRUE(contains(outcome.error, "manifest.json: malformed checkpoint manifest"));
  EXPECT_EQ(try_load(folder.path(), true).step, 2);
}

/// A third save, stopped at `point` (on `rank`), leaves step 4 as what the next start loads.
void expect_stopped_save_keeps_previous(cohort::SavePoint point, int stopping_rank) {
  TemporaryFolder folder;
  save_two(folder.path());
  const cohort::ParamRegistry registry = cohort_test::test_registry(DType::f32);
  cohort::run_local(
      kRanks,
      [&](cohort::World& world) {
        TestRun run(world, registry, OptimizerKind::zero1_adamw);
        cohort::CheckpointOptions options{.directory = folder.path()};
        options.test_hook = [&](cohort::SavePoint reached) {
          if (reached == point && world.rank() == stopping_rank)
            throw std::runtime_error("stopped here");
        };
        cohort::Checkpointer checkpoints(*run.dp, run.optimizer.get(), options);
        run.step(0);
        const std::string error = cohort_test::message_of<CheckpointError>([&] {
          checkpoints.save({6, 0, 0, ""});
        });
        EXPECT_TRUE(contains(error, "stopped here")) << error;
        EXPECT_TRUE(contains(error, "step-000000000006 was not saved")) << error;
      },
      cohort_test::host_world());
  const LoadOutcome outcome = try_load(folder.path());
  EXPECT_EQ(outcome.error, "");
  EXPECT_EQ(outcome.step, 4);
}

TEST(CheckpointFaults, SaveStoppedBeforeAFileIsWrittenKeepsThePrevious) {
  expect_stopped_save_keeps_previous(cohort::SavePoint::shard_started, 1);
}

TEST(CheckpointFaults, SaveStoppedBetweenFilesKeepsThePrevious) {
  expect_stopped_save_keeps_previous(cohort::SavePoint::shard_written, 1);
}

TEST(CheckpointFaults, SaveStoppedBeforeRenameKeepsThePrevious) {
  expect_stopped_save_keeps_previous(cohort::SavePoint::before_rename, 0);
}

TEST(CheckpointFaults, SaveStoppedBeforeLatestMovesKeepsThePrevious) {
  expect_stopped_save_keeps_previous(cohort::SavePoint::before_latest, 0);
}

TEST(CheckpointFaults, UnwritableDirectoryIsAClearError) {
  TemporaryFolder folder;
  const auto blocked = folder.path() / "file-not-folder";
  std::ofstream(blocked) << "x";
  const cohort::ParamRegistry registry = cohort_test::test_registry(DType::f32);
  cohort::run_local(
      kRanks,
      [&](cohort::World& world) {
        TestRun run(world, registry, OptimizerKind::sgd);
        cohort::Checkpointer checkpoints(*run.dp, run.optimizer.get(),
                                         {.directory = blocked / "sub"});
        const std::string error = cohort_test::message_of<CheckpointError>([&] {
          checkpoints.save({1, 0, 0, ""});
        });
        EXPECT_TRUE(contains(error, "cannot prepare")) << error;
      },
      cohort_test::host_world());
}

/// A tmpfs of `size` mounted at `at` for the test's lifetime (unmounted on every exit path).
class SmallFileSystem {
 public:
  SmallFileSystem(const std::filesystem::path& at, const std::string& size) : at_(at) {
    std::filesystem::create_directories(at);
    const std::string options = "size=" + size;
    if (::mount("tmpfs", at.c_str(), "tmpfs", 0, options.c_str()) == 0) {
      mounted_ = true;
    } else {
      error_ = std::strerror(errno);
    }
  }
  ~SmallFileSystem() {
    if (mounted_) ::umount2(at_.c_str(), MNT_DETACH);
  }
  SmallFileSystem(const SmallFileSystem&) = delete;
  SmallFileSystem& operator=(const SmallFileSystem&) = delete;
  bool mounted() const noexcept { return mounted_; }
  const std::string& error() const noexcept { return error_; }

 private:
  std::filesystem::path at_;
  bool mounted_ = false;
  std::string error_;
};

// The disk fills up during a save (a 64 KiB tmpfs, checkpoints kept until it is full): the save
// fails on every rank with an error naming the file and ENOSPC, the newest whole checkpoint is
// still the one a restart loads, and nothing of the failed one is left to be mistaken for it.
TEST(CheckpointFaults, DiskFullDuringASaveKeepsThePreviousAndSaysSo) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root, to mount a small tmpfs that fills up";
  TemporaryFolder folder;
  const SmallFileSystem disk(folder.path() / "disk", "64k");
  if (!disk.mounted()) GTEST_SKIP() << "cannot mount a tmpfs here: " << disk.error();
  const auto directory = folder.path() / "disk" / "checkpoints";
  const cohort::ParamRegistry registry = cohort_test::test_registry(DType::f32);
  std::int64_t last_saved = 0;
  std::vector<std::string> errors(kRanks);
  cohort::run_local(
      kRanks,
      [&](cohort::World& world) {
        TestRun run(world, registry, OptimizerKind::zero1_adamw);
        cohort::Checkpointer checkpoints(*run.dp, run.optimizer.get(),
                                         {.directory = directory, .keep_last = 0});
        for (int step = 0; step < 64; ++step) {
          run.step(step);
          try {
            checkpoints.save({step + 1, 0, 0, std::string(6000, 'x')});
            if (world.rank() == 0) last_saved = step + 1;
          } catch (const CheckpointError& failure) {
            errors[static_cast<std::size_t>(world.rank())] = failure.what();
            return;
          }
        }
      },
      cohort_test::host_world());
  ASSERT_GE(last_saved, 1) << "not even the first save fitted: " << errors[0];
  ASSERT_LT(last_saved, 64) << "64 KiB never filled up";
  for (const std::string& error : errors) {
    EXPECT_TRUE(contains(error, "No space left on device")) << error;
    EXPECT_TRUE(contains(error, "was not saved")) << error;
  }
  char name[32];
  std::snprintf(name, sizeof name, "step-%012lld", static_cast<long long>(last_saved + 1));
  for (const auto& entry : std::filesystem::directory_iterator(directory)) {
    EXPECT_EQ(entry.path().filename().string().find(name), std::string::npos)
        << entry.path() << " is left from the failed save";
  }
  const LoadOutcome outcome = try_load(directory);
  EXPECT_EQ(outcome.error, "");
  EXPECT_EQ(outcome.step, last_saved);
}

}  // namespace
