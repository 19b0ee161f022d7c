// The preemption handlers (Note [Preemption] in preemption.hpp). They are process-wide and
// installed once, so each test runs in a child process of its own and reads the outcome from
// the child's exit status.

#include <cohort/checkpoint/preemption.hpp>
#include <cohort/comm/world.hpp>

#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstring>
#include <functional>
#include <string>

namespace {

/// Runs `child` in a forked process and returns its wait status; `child`'s result is the exit
/// code.
int in_child(const std::function<int()>& child) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    int code = 100;
    try {
      code = child();
    } catch (...) {
      code = 101;
    }
    ::_exit(code);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return status;
}

std::string describe(int status) {
  if (WIFEXITED(status)) return "exited with " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return "killed by " + std::string(::strsignal(WTERMSIG(status)));
  return "status " + std::to_string(status);
}

TEST(Preemption, AFirstSigintRequestsASaveAndASecondOneKills) {
  // Ctrl-C: the first is "save and stop", like SIGTERM, whether or not cohortrun passed it on;
  // the second is "stop now" (the default action), for a save that takes too long. The child
  // says through a pipe how far it got.
  int progress[2];
  ASSERT_EQ(::pipe(progress), 0);
  const int status = in_child([&] {
    ::close(progress[0]);
    auto say = [&](char what) { return ::write(progress[1], &what, 1) == 1; };
    cohort::install_preemption_handlers();
    if (cohort::preemption_requested()) return 1;
    ::raise(SIGINT);
    if (!say(cohort::preemption_requested() ? 'y' : 'n')) return 2;
    ::raise(SIGINT);
    say('!');  // survived the second SIGINT
    return 3;
  });
  ::close(progress[1]);
  std::string said;
  char byte = 0;
  while (::read(progress[0], &byte, 1) == 1) said.push_back(byte);
  ::close(progress[0]);
  EXPECT_EQ(said, "y") << "y: the first SIGINT set the flag; !: the second did not kill";
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGINT) << describe(status);
}

TEST(Preemption, SigtermAndSigusr1RequestASaveEveryTime) {
  // Unlike SIGINT, these stay caught: a rank blocked in a collective with a dead peer is ended
  // by the launcher's SIGKILL, not by a repeated SIGTERM.
  const int status = in_child([] {
    cohort::install_preemption_handlers();
    for (int signal_number : {SIGTERM, SIGTERM, SIGUSR1, SIGUSR1}) {
      cohort::clear_preemption();
      ::raise(signal_number);
      if (!cohort::preemption_requested()) return 10 + signal_number;
    }
    return 0;
  });
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << describe(status);
}

TEST(Preemption, AnIgnoredSigintStaysIgnored) {
  // A program started with SIGINT ignored (`program &` in a shell script) must not start
  // reacting to a Ctrl-C meant for the shell.
  const int status = in_child([] {
    std::signal(SIGINT, SIG_IGN);
    cohort::install_preemption_handlers();
    ::raise(SIGINT);
    ::raise(SIGINT);
    return cohort::preemption_requested() ? 1 : 0;
  });
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << describe(status);
}

TEST(Preemption, PreemptionWatchAgreesAfterASigint) {
  const int status = in_child([] {
    bool agreed_before = true;
    bool agreed_after = false;
    cohort::run_local(1, [&](cohort::World& world) {
      cohort::PreemptionWatch watch(world, cohort::Stream::create(world.device()));
      agreed_before = watch.agreed();
      ::raise(SIGINT);
      agreed_after = watch.agreed();
    });
    return !agreed_before && agreed_after ? 0 : 1;
  });
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << describe(status);
}

}  // namespace
