// Checkpoints as programs meet them: train_mlp's exit status when its checkpoint folder can never
// load (78, "a restart cannot fix this", with what to do), and the program of docs/checkpoint.md,
// extracted from the page and built, resuming and stopping as the page says.

#include "checkpoint/checkpoint_test_model.hpp"
#include "support/process_ranks.hpp"
#include "support/test_helpers.hpp"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <cerrno>
#include <chrono>
#include <filesystem>
#include <regex>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace {

namespace fs = std::filesystem;
using cohort_test::contains;

/// Starts `arguments` with stdout and stderr into `log`; returns its pid (-1 when it cannot).
pid_t start(const std::vector<std::string>& arguments, const fs::path& log) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  std::vector<char*> argv;
  for (const std::string& argument : arguments) argv.push_back(const_cast<char*>(argument.c_str()));
  argv.push_back(nullptr);
  pid_t pid = -1;
  const int error = posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (error != 0) {
    ADD_FAILURE() << "cannot start " << arguments[0];
    return -1;
  }
  return pid;
}

/// Waits for `pid`; returns its exit status (128 + the signal for a process killed by one).
int wait_for(pid_t pid) {
  if (pid < 0) return -1;
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/// Runs `arguments` to the end with stdout and stderr into `log`; returns the exit status.
int run(const std::vector<std::string>& arguments, const fs::path& log) {
  return wait_for(start(arguments, log));
}

/// The line "step N: parameter checksum X" the page's program prints at its end, or "".
std::string checksum_line(const fs::path& log) {
  const std::string text = cohort_test::read_file(log);
  std::smatch match;
  static const std::regex line(R"(step [0-9]+: parameter checksum \S+)");
  return std::regex_search(text, match, line) ? match.str() : std::string();
}

/// docs/checkpoint.md's program, built from the page, and cohortrun.
struct Programs {
  std::string example = cohort_test::build_path("tests/checkpoint/checkpoint_docs_example");
  std::string cohortrun = cohort_test::build_path("tools/cohortrun/cohortrun");
  bool built() const { return fs::exists(example) && fs::exists(cohortrun); }
};

// The page's program on 2 ranks, stopped at step 300 and started again to 600, ends bitwise equal
// to the run of 600 steps: the state it saves is the one after the step, and the sampler resumes
// at the batch after it.
TEST(DocsExample, StoppedAndStartedAgainItEndsBitwiseEqual) {
  const Programs programs;
  if (!programs.built()) GTEST_SKIP() << "the page's program or cohortrun is not built";
  const std::string& example = programs.example;
  const std::string& cohortrun = programs.cohortrun;
  cohort_test::TemporaryFolder folder;
  auto train = [&](const std::string& checkpoints, const std::string& steps,
                   const std::string& log) {
    const int status = run({cohortrun, "--nproc-per-node", "2", example,
                            (folder.path() / checkpoints).string(), steps},
                           folder.path() / log);
    EXPECT_EQ(status, 0) << cohort_test::read_file(folder.path() / log);
    return checksum_line(folder.path() / log);
  };
  const std::string uninterrupted = train("whole", "600", "whole.log");
  ASSERT_NE(uninterrupted, "");
  EXPECT_TRUE(contains(uninterrupted, "step 600")) << uninterrupted;
  EXPECT_TRUE(contains(train("stopped", "300", "first.log"), "step 300"));
  EXPECT_EQ(train("stopped", "600", "again.log"), uninterrupted);
}

// SIGTERM once the program has published a checkpoint: it saves at the next step and exits with
// 75; started again, it ends bitwise equal to the run that was never stopped.
TEST(DocsExample, SigtermSavesExitsWith75AndTheResumedRunEndsBitwiseEqual) {
  const Programs programs;
  if (!programs.built()) GTEST_SKIP() << "the page's program or cohortrun is not built";
  const std::string& example = programs.example;
  cohort_test::TemporaryFolder folder;
  const std::string steps = "3000";  // about a second here; the signal comes after step 100
  const fs::path checkpoints = folder.path() / "checkpoints";
  ASSERT_EQ(run({example, (folder.path() / "whole").string(), steps}, folder.path() / "whole.log"),
            0);
  const std::string uninterrupted = checksum_line(folder.path() / "whole.log");
  ASSERT_NE(uninterrupted, "");

  const pid_t pid = start({example, checkpoints.string(), steps}, folder.path() / "stopped.log");
  ASSERT_GT(pid, 0);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!fs::exists(checkpoints / "latest") && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ::kill(pid, SIGTERM);
  const int status = wait_for(pid);
  const std::string log = cohort_test::read_file(folder.path() / "stopped.log");
  ASSERT_NE(status, 0) << "the program finished before the signal: give it more steps\n" << log;
  ASSERT_EQ(status, 75) << log;
  EXPECT_EQ(checksum_line(folder.path() / "stopped.log"), "") << log;

  ASSERT_EQ(run({example, checkpoints.string(), steps}, folder.path() / "resumed.log"), 0)
      << cohort_test::read_file(folder.path() / "resumed.log");
  EXPECT_EQ(checksum_line(folder.path() / "resumed.log"), uninterrupted);
}

// A checkpoint folder of another model (train_mlp with another --hidden) can never load: the run
// ends with 78 (EX_CONFIG), which cohortrun does not restart, and says what to do.
TEST(TrainMlpExitStatus, ACheckpointOfAnotherModelEndsTheRunWith78SayingWhatToDo) {
  const std::string train_mlp = cohort_test::build_path("examples/train_mlp/train_mlp");
  if (!fs::exists(train_mlp)) GTEST_SKIP() << "train_mlp not built";
  cohort_test::TemporaryFolder folder;
  const std::string checkpoints = (folder.path() / "checkpoints").string();
  auto train = [&](const std::string& hidden, const std::string& log) {
    return run({train_mlp, "--ranks", "2", "--steps", "4", "--warmup-steps", "0", "--hidden",
                hidden, "--log-every", "0", "--checkpoint-dir", checkpoints},
               folder.path() / log);
  };
  ASSERT_EQ(train("16", "first.log"), 0) << cohort_test::read_file(folder.path() / "first.log");
  EXPECT_EQ(train("32", "changed.log"), 78);
  const std::string log = cohort_test::read_file(folder.path() / "changed.log");
  EXPECT_TRUE(contains(log, "saved from another model")) << log;
  EXPECT_TRUE(contains(log, "a restart cannot fix this")) << log;
  EXPECT_TRUE(contains(log, "a new checkpoint directory")) << log;
}

}  // namespace
