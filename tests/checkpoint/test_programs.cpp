// Checkpoints as programs meet them: train_mlp's exit status when its checkpoint folder can never
// load (78, "a restart cannot fix this", with what to do).

#include "checkpoint/checkpoint_test_model.hpp"
#include "support/process_ranks.hpp"
#include "support/test_helpers.hpp"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <cerrno>
#include <filesystem>
#include <string>
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
