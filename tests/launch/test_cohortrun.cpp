// Runs the built cohortrun (and hello_world under it) with small shell programs as the ranks.
// The build folder comes from COHORT_TEST_BINARY_DIR, which ctest sets.

#include "support/test_helpers.hpp"

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

extern char** environ;

namespace {

using Clock = std::chrono::steady_clock;
using Seconds = std::chrono::duration<double>;

std::string binary_dir() {
  return cohort_test::test_binary_dir();
}

std::string cohortrun_path() {
  return binary_dir() + "/tools/cohortrun/cohortrun";
}
std::string hello_world_path() {
  return binary_dir() + "/examples/hello_world/hello_world";
}
std::string train_mlp_path() {
  return binary_dir() + "/examples/train_mlp/train_mlp";
}

/// Whether a variable of the caller's environment could change how a rank reads its launch
/// environment (so the tests run the same under Slurm, torchrun or a cohortrun).
bool is_launch_variable(const std::string& name) {
  static const std::set<std::string> kExact{
      "RANK",       "WORLD_SIZE",  "LOCAL_RANK",  "LOCAL_WORLD_SIZE",
      "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID"};
  for (const char* prefix : {"COHORT_", "SLURM_", "OMPI_", "PMI_", "PMIX_", "MPI_LOCAL"}) {
    if (name.rfind(prefix, 0) == 0) return true;
  }
  return kExact.count(name) > 0;
}

std::vector<std::string> clean_environment(const std::map<std::string, std::string>& extra = {}) {
  std::vector<std::string> environment;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    const std::string text(*entry);
    if (!is_launch_variable(text.substr(0, text.find('=')))) environment.push_back(text);
  }
  for (const auto& [name, value] : extra) environment.push_back(name + "=" + value);
  return environment;
}

struct Result {
  int status = -1;  // exit code, or 128 + signal
  std::string out;
  std::string err;
  double seconds = 0;
  bool timed_out = false;
};

/// A process with its stdout and stderr captured, killed if it outlives its test.
class Process {
 public:
  /// `own_group`: the process leads a process group of its own, as a shell's foreground job
  /// does, so that a test can signal the group the way a terminal's Ctrl-C does.
  Process(const std::vector<std::string>& argv, const std::vector<std::string>& environment,
          bool own_group = false) {
    int out[2];
    int err[2];
    if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0) {
      ADD_FAILURE() << "pipe: " << std::strerror(errno);
      return;
    }
    std::vector<char*> args;
    for (const auto& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
    args.push_back(nullptr);
    std::vector<char*> env;
    for (const auto& entry : environment) env.push_back(const_cast<char*>(entry.c_str()));
    env.push_back(nullptr);
    start_ = Clock::now();
    pid_ = ::fork();
    if (pid_ == 0) {
      if (own_group) ::setpgid(0, 0);
      ::dup2(out[1], STDOUT_FILENO);
      ::dup2(err[1], STDERR_FILENO);
      ::execve(args[0], args.data(), env.data());
      ::_exit(126);
    }
    if (pid_ > 0 && own_group) ::setpgid(pid_, pid_);  // also here: signalled at once
    ::close(out[1]);
    ::close(err[1]);
    out_fd_ = out[0];
    err_fd_ = err[0];
  }

  ~Process() {
    if (pid_ > 0 && !reaped_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    if (out_fd_ >= 0) ::close(out_fd_);
    if (err_fd_ >= 0) ::close(err_fd_);
  }

  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  pid_t pid() const { return pid_; }
  const std::string& stdout_so_far() const { return result_.out; }

  /// Reads output until `done(stdout so far)` or `timeout`; returns whether `done` came true.
  bool read_until(const std::function<bool(const std::string&)>& done, Seconds timeout) {
    return read_until_either([&](const Result& so_far) { return done(so_far.out); }, timeout);
  }
  /// The same with `done(stderr so far)`.
  bool read_stderr_until(const std::function<bool(const std::string&)>& done, Seconds timeout) {
    return read_until_either([&](const Result& so_far) { return done(so_far.err); }, timeout);
  }

  /// Reads everything until both pipes close and the process exits; kills it after `timeout`.
  Result finish(Seconds timeout = Seconds(20)) {
    const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(timeout);
    while (out_fd_ >= 0 || err_fd_ >= 0) {
      if (!pump(deadline)) {
        result_.timed_out = true;
        ::kill(pid_, SIGKILL);
        break;
      }
    }
    int status = 0;
    ::waitpid(pid_, &status, 0);
    reaped_ = true;
    result_.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    result_.seconds = Seconds(Clock::now() - start_).count();
    return result_;
  }

 private:
  bool read_until_either(const std::function<bool(const Result&)>& done, Seconds timeout) {
    const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(timeout);
    while (!done(result_)) {
      if (!pump(deadline)) return done(result_);
    }
    return true;
  }

  /// Waits for output until `deadline`; false when the deadline passed or nothing is open.
  bool pump(Clock::time_point deadline) {
    std::vector<pollfd> fds;
    if (out_fd_ >= 0) fds.push_back({out_fd_, POLLIN, 0});
    if (err_fd_ >= 0) fds.push_back({err_fd_, POLLIN, 0});
    if (fds.empty()) return false;
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) return false;
    const int ready = ::poll(fds.data(), fds.size(), static_cast<int>(left.count()));
    if (ready < 0 && errno != EINTR) return false;
    for (const pollfd& fd : fds) {
      if (fd.revents == 0) continue;
      const bool is_out = fd.fd == out_fd_;
      char buffer[4096];
      const ssize_t count = ::read(fd.fd, buffer, sizeof buffer);
      if (count > 0) {
        (is_out ? result_.out : result_.err).append(buffer, static_cast<std::size_t>(count));
      } else if (count == 0 || errno != EINTR) {
        ::close(fd.fd);
        (is_out ? out_fd_ : err_fd_) = -1;
      }
    }
    return true;
  }

  pid_t pid_ = -1;
  bool reaped_ = false;
  int out_fd_ = -1;
  int err_fd_ = -1;
  Clock::time_point start_;
  Result result_;
};

Result run(const std::vector<std::string>& argv,
           const std::map<std::string, std::string>& extra_environment = {},
           Seconds timeout = Seconds(20)) {
  Process process(argv, clean_environment(extra_environment));
  return process.finish(timeout);
}

/// cohortrun with `options`, then `/bin/sh -c script`.
std::vector<std::string> cohortrun_shell(const std::vector<std::string>& options,
                                         const std::string& script) {
  std::vector<std::string> argv{cohortrun_path()};
  argv.insert(argv.end(), options.begin(), options.end());
  argv.insert(argv.end(), {"/bin/sh", "-c", script});
  return argv;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

std::string describe(const Result& result) {
  return "status " + std::to_string(result.status) + (result.timed_out ? " (timed out)" : "") +
         "\n--- stdout\n" + result.out + "--- stderr\n" + result.err;
}

class Cohortrun : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(binary_dir().empty()) << "set COHORT_TEST_BINARY_DIR to the build folder";
    ASSERT_EQ(::access(cohortrun_path().c_str(), X_OK), 0) << cohortrun_path();
  }
};

/// key=value pairs of one output line.
std::map<std::string, std::string> fields_of(const std::string& line) {
  std::map<std::string, std::string> fields;
  std::istringstream in(line);
  for (std::string word; in >> word;) {
    const auto equals = word.find('=');
    if (equals != std::string::npos) fields[word.substr(0, equals)] = word.substr(equals + 1);
  }
  return fields;
}

/// Whether something accepts TCP connections on 127.0.0.1:`port`.
bool accepts_connections(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<std::uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const bool connected =
      ::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) == 0;
  ::close(fd);
  return connected;
}

TEST_F(Cohortrun, SetsEachRanksEnvironmentAndHostsTheStore) {
  const std::string script =
      "echo R=$COHORT_RANK W=$COHORT_WORLD_SIZE L=$COHORT_LOCAL_RANK "
      "LW=$COHORT_LOCAL_WORLD_SIZE N=$COHORT_NODE_RANK NN=$COHORT_NUM_NODES "
      "A=$COHORT_MASTER_ADDR P=$COHORT_MASTER_PORT X=$COHORT_STORE_EXTERNAL "
      "ID=$COHORT_RUN_ID T=$COHORT_STORE_TOKEN; "
      // Rank 0 stays until the test has knocked on the store's port.
      "if [ $COHORT_RANK = 0 ]; then sleep 10; fi";
  Process process(cohortrun_shell({"--nproc-per-node", "3"}, script), clean_environment());
  ASSERT_TRUE(process.read_until([](const std::string& out) { return lines_of(out).size() >= 3; },
                                 Seconds(10)))
      << process.stdout_so_far();

  std::map<int, std::map<std::string, std::string>> by_rank;
  for (const std::string& line : lines_of(process.stdout_so_far())) {
    std::smatch match;
    ASSERT_TRUE(std::regex_match(line, match, std::regex(R"(\[rank (\d+)\] (.*))"))) << line;
    by_rank[std::stoi(match[1])] = fields_of(match[2]);
  }
  ASSERT_EQ(by_rank.size(), 3u) << process.stdout_so_far();
  const auto& first = by_rank.at(0);
  const int port = std::stoi(first.at("P"));
  EXPECT_GT(port, 0);
  EXPECT_TRUE(accepts_connections(port)) << "nothing serves the store on port " << port;
  EXPECT_TRUE(std::regex_match(first.at("T"), std::regex("[0-9a-f]{32}"))) << first.at("T");
  EXPECT_FALSE(first.at("ID").empty());
  for (const auto& [rank, fields] : by_rank) {
    EXPECT_EQ(fields.at("R"), std::to_string(rank));
    EXPECT_EQ(fields.at("W"), "3");
    EXPECT_EQ(fields.at("L"), std::to_string(rank));
    EXPECT_EQ(fields.at("LW"), "3");
    EXPECT_EQ(fields.at("N"), "0");
    EXPECT_EQ(fields.at("NN"), "1");
    EXPECT_EQ(fields.at("A"), "127.0.0.1");
    EXPECT_EQ(fields.at("X"), "1");
    EXPECT_EQ(fields.at("P"), first.at("P"));
    EXPECT_EQ(fields.at("ID"), first.at("ID"));
    EXPECT_EQ(fields.at("T"), first.at("T"));
  }
  ::kill(process.pid(), SIGTERM);
  const Result result = process.finish();
  EXPECT_EQ(result.status, 128 + SIGTERM) << describe(result);
}

TEST_F(Cohortrun, EachRunHasItsOwnIdTokenAndPort) {
  const std::string script = "echo $COHORT_RUN_ID $COHORT_STORE_TOKEN $COHORT_MASTER_PORT";
  const Result first = run(cohortrun_shell({"--nproc-per-node", "1"}, script));
  const Result second = run(cohortrun_shell({"--nproc-per-node", "1"}, script));
  ASSERT_EQ(first.status, 0) << describe(first);
  ASSERT_EQ(second.status, 0) << describe(second);
  std::istringstream a(first.out.substr(first.out.find(']') + 1));
  std::istringstream b(second.out.substr(second.out.find(']') + 1));
  std::string id_a, token_a, id_b, token_b;
  a >> id_a >> token_a;
  b >> id_b >> token_b;
  EXPECT_FALSE(id_a.empty());
  EXPECT_NE(id_a, id_b);
  EXPECT_NE(token_a, token_b);
}

TEST_F(Cohortrun, KeepsTheUsersTokenAndRunId) {
  const Result result = run(cohortrun_shell({"--nproc-per-node", "1", "--run-id", "my-run"},
                                            "echo $COHORT_RUN_ID $COHORT_STORE_TOKEN"),
                            {{"COHORT_STORE_TOKEN", "secret"}});
  ASSERT_EQ(result.status, 0) << describe(result);
  EXPECT_EQ(result.out, "[rank 0] my-run secret\n");
}

/// The lines of `text` that start with "[rank R] ", without that prefix, in order.
std::vector<std::string> lines_of_rank(const std::string& text, int rank) {
  const std::string prefix = "[rank " + std::to_string(rank) + "] ";
  std::vector<std::string> lines;
  for (const std::string& line : lines_of(text)) {
    if (line.rfind(prefix, 0) == 0) lines.push_back(line.substr(prefix.size()));
  }
  return lines;
}

TEST_F(Cohortrun, PrefixesEveryLineWithItsRank) {
  const Result result = run(cohortrun_shell(
      {"--nproc-per-node", "2"}, "echo one; echo two; echo oops >&2; printf 'no newline'"));
  ASSERT_EQ(result.status, 0) << describe(result);
  // Ranks interleave, but each rank's lines stay whole and in order, and the unfinished last
  // line is ended at exit.
  const std::vector<std::string> expected_out{"one", "two", "no newline"};
  const std::vector<std::string> expected_err{"oops"};
  for (int rank : {0, 1}) {
    EXPECT_EQ(lines_of_rank(result.out, rank), expected_out) << describe(result);
    EXPECT_EQ(lines_of_rank(result.err, rank), expected_err) << describe(result);
  }
  EXPECT_EQ(lines_of(result.out).size(), 6u) << describe(result);
  EXPECT_EQ(lines_of(result.err).size(), 2u) << describe(result);
  EXPECT_TRUE(result.out.ends_with("\n")) << describe(result);
}

TEST_F(Cohortrun, NoPrefixPassesOutputThrough) {
  const Result result =
      run(cohortrun_shell({"--nproc-per-node", "2", "--no-prefix"}, "echo plain; echo e >&2"));
  ASSERT_EQ(result.status, 0) << describe(result);
  EXPECT_EQ(result.out, "plain\nplain\n");
  EXPECT_EQ(result.err, "e\ne\n");
}

TEST_F(Cohortrun, PassesEverythingAfterProgramToIt) {
  const Result result =
      run({cohortrun_path(), "--nproc-per-node", "1", "/bin/sh", "-c", "printf '%s|' \"$@\"", "sh",
           "--steps", "5", "--nproc-per-node", "9", "--", "-x"});
  ASSERT_EQ(result.status, 0) << describe(result);
  EXPECT_EQ(result.out, "[rank 0] --steps|5|--nproc-per-node|9|--|-x|\n");
}

TEST_F(Cohortrun, FailingRankStopsTheOthers) {
  const Result result =
      run(cohortrun_shell({"--nproc-per-node", "4"},
                          "if [ $COHORT_RANK = 1 ]; then sleep 0.2; exit 3; fi; exec sleep 60"));
  EXPECT_EQ(result.status, 3) << describe(result);
  EXPECT_LT(result.seconds, 4.0);  // below the 5 s kill timeout: SIGTERM did it
  EXPECT_TRUE(std::regex_search(result.err,
                                std::regex(R"(cohortrun: rank 1 \(pid \d+\) exited with status 3; )"
                                           R"(stopping the other 3 ranks)")))
      << describe(result);
}

TEST_F(Cohortrun, RankKilledBySignalGives128PlusSignal) {
  const Result result = run(
      cohortrun_shell({"--nproc-per-node", "3"},
                      "if [ $COHORT_RANK = 2 ]; then sleep 0.2; kill -KILL $$; fi; exec sleep 60"));
  EXPECT_EQ(result.status, 128 + SIGKILL) << describe(result);
  EXPECT_LT(result.seconds, 4.0);  // below the 5 s kill timeout: SIGTERM did it
  EXPECT_TRUE(contains(result.err, "rank 2 (pid ")) << describe(result);
  EXPECT_TRUE(
      contains(result.err, "was killed by signal 9 (" + std::string(::strsignal(SIGKILL)) + ")"))
      << describe(result);
}

TEST_F(Cohortrun, RanksIgnoringSigtermGetSigkillAfterTheKillTimeout) {
  const Result result = run(cohortrun_shell(
      {"--nproc-per-node", "2", "--kill-timeout", "1"},
      "trap '' TERM; if [ $COHORT_RANK = 1 ]; then sleep 0.2; exit 4; fi; sleep 60"));
  EXPECT_EQ(result.status, 4) << describe(result);
  EXPECT_GT(result.seconds, 1.0);
  EXPECT_LT(result.seconds, 8.0);
  EXPECT_TRUE(contains(result.err, "still running after 1000 ms; sending SIGKILL"))
      << describe(result);
}

TEST_F(Cohortrun, SigintAndSigtermStopEveryRankPromptly) {
  for (const auto& [signal_number, name] :
       std::vector<std::pair<int, std::string>>{{SIGTERM, "SIGTERM"}, {SIGINT, "SIGINT"}}) {
    SCOPED_TRACE(name);
    Process process(cohortrun_shell({"--nproc-per-node", "3"}, "echo pid $$; exec sleep 60"),
                    clean_environment());
    ASSERT_TRUE(process.read_until([](const std::string& out) { return lines_of(out).size() >= 3; },
                                   Seconds(10)))
        << process.stdout_so_far();
    std::vector<pid_t> pids;
    for (const std::string& line : lines_of(process.stdout_so_far())) {
      pids.push_back(std::stoi(line.substr(line.find("pid ") + 4)));
    }
    const auto start = Clock::now();
    ::kill(process.pid(), signal_number);
    const Result result = process.finish();
    EXPECT_EQ(result.status, 128 + signal_number) << describe(result);
    EXPECT_LT(Seconds(Clock::now() - start).count(), 4.0);
    EXPECT_TRUE(contains(result.err, "received " + name + "; passing it to 3 ranks"))
        << describe(result);
    for (pid_t pid : pids) {
      EXPECT_EQ(::kill(pid, 0), -1) << "rank process " << pid << " outlived cohortrun";
      EXPECT_EQ(errno, ESRCH);
    }
  }
}

/// How many lines of `text` are `line` exactly.
std::size_t count_lines(const std::string& text, const std::string& line) {
  const std::vector<std::string> lines = lines_of(text);
  return static_cast<std::size_t>(std::count(lines.begin(), lines.end(), line));
}

/// Reads until `ranks` lines "[rank R] ready" have come.
bool wait_until_ready(Process& process, int ranks) {
  return process.read_until(
      [&](const std::string& out) {
        int ready = 0;
        for (int rank = 0; rank < ranks; ++rank) {
          const std::vector<std::string> lines = lines_of_rank(out, rank);
          ready += std::count(lines.begin(), lines.end(), "ready") > 0 ? 1 : 0;
        }
        return ready == ranks;
      },
      Seconds(10));
}

// ---- signals and exit statuses (the table in cohortrun --help) ----

TEST_F(Cohortrun, RanksThatSaveAfterAForwardedSignalGive75) {
  // Ranks that save and exit 75 (EX_TEMPFAIL, kPreemptedExitStatus) after the signal cohortrun
  // passed on: the run was preempted cleanly, and a job script requeues on 75.
  for (const auto& [signal_number, name] :
       std::vector<std::pair<int, std::string>>{{SIGTERM, "SIGTERM"}, {SIGINT, "SIGINT"}}) {
    SCOPED_TRACE(name);
    Process process(cohortrun_shell({"--nproc-per-node", "3"},
                                    "trap 'echo saved; exit 75' TERM INT; echo ready; "
                                    "while :; do sleep 0.05; done"),
                    clean_environment());
    ASSERT_TRUE(wait_until_ready(process, 3)) << process.stdout_so_far();
    ::kill(process.pid(), signal_number);
    const Result result = process.finish();
    EXPECT_EQ(result.status, 75) << describe(result);
    for (int rank = 0; rank < 3; ++rank) {
      EXPECT_EQ(lines_of_rank(result.out, rank), (std::vector<std::string>{"ready", "saved"}))
          << describe(result);
    }
    EXPECT_TRUE(contains(result.err, "received " + name + "; passing it to 3 ranks"))
        << describe(result);
    EXPECT_TRUE(contains(result.err,
                         "every rank exited with status 75 (saved and stopped after "
                         "the " +
                             name + "); exiting with 75"))
        << describe(result);
  }
}

TEST_F(Cohortrun, APreemptionNotEveryRankSavedGives128PlusSignal) {
  const Result result = [&] {
    Process process(cohortrun_shell({"--nproc-per-node", "2"},
                                    "if [ $COHORT_RANK = 1 ]; then trap 'exit 1' TERM; "
                                    "else trap 'exit 75' TERM; fi; echo ready; "
                                    "while :; do sleep 0.05; done"),
                    clean_environment());
    EXPECT_TRUE(wait_until_ready(process, 2)) << process.stdout_so_far();
    ::kill(process.pid(), SIGTERM);
    return process.finish();
  }();
  EXPECT_EQ(result.status, 128 + SIGTERM) << describe(result);
  EXPECT_FALSE(contains(result.err, "exiting with 75")) << describe(result);
}

TEST_F(Cohortrun, CtrlCReachesEachRankOnceAndTheySave) {
  // A terminal's Ctrl-C is a SIGINT to its whole foreground process group: cohortrun and
  // anything in its group. The ranks lead groups of their own, so they get it once, from
  // cohortrun (not a second time from the terminal, which would be a PreemptionWatch's "stop
  // now"), save and exit 75. Each rank counts the SIGINTs it gets for a second after the first.
  const std::string script =
      "n=0; trap 'n=$((n+1)); echo \"SIGINT $n\"' INT; echo ready; "
      "while [ $n = 0 ]; do sleep 0.05; done; sleep 1; exit 75";
  Process process(cohortrun_shell({"--nproc-per-node", "2"}, script), clean_environment(),
                  /*own_group=*/true);
  ASSERT_TRUE(wait_until_ready(process, 2)) << process.stdout_so_far();
  ::kill(-process.pid(), SIGINT);
  const Result result = process.finish();
  EXPECT_EQ(result.status, 75) << describe(result);
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_EQ(lines_of_rank(result.out, rank), (std::vector<std::string>{"ready", "SIGINT 1"}))
        << describe(result);
  }
  EXPECT_TRUE(contains(result.err, "received SIGINT; passing it to 2 ranks")) << describe(result);
}

TEST_F(Cohortrun, ASecondSigintStopsEveryRankAtOnce) {
  // The ranks keep going after the first SIGINT (as if their save were slow); the second kills
  // them at once, well inside --grace.
  Process process(cohortrun_shell({"--nproc-per-node", "2", "--grace", "60"},
                                  "trap 'echo got SIGINT' INT; echo ready; "
                                  "while :; do sleep 0.05; done"),
                  clean_environment());
  ASSERT_TRUE(wait_until_ready(process, 2)) << process.stdout_so_far();
  ::kill(process.pid(), SIGINT);
  ASSERT_TRUE(process.read_until(
      [](const std::string& out) {
        return !lines_of_rank(out, 0).empty() && lines_of_rank(out, 0).back() == "got SIGINT" &&
               !lines_of_rank(out, 1).empty() && lines_of_rank(out, 1).back() == "got SIGINT";
      },
      Seconds(10)))
      << process.stdout_so_far();
  const auto second = Clock::now();
  ::kill(process.pid(), SIGINT);
  const Result result = process.finish();
  EXPECT_EQ(result.status, 128 + SIGINT) << describe(result);
  EXPECT_LT(Seconds(Clock::now() - second).count(), 4.0) << describe(result);
  EXPECT_TRUE(contains(result.err, "received another signal; killing every rank"))
      << describe(result);
}

TEST_F(Cohortrun, HelpListsWhatEachExitStatusMeans) {
  const Result result = run({cohortrun_path(), "--help"});
  ASSERT_EQ(result.status, 0) << describe(result);
  for (const char* row :
       {R"(\n +0 +every rank exited 0)", R"(\n +75 +.*preempted)", R"(\n +78 +.*not restarted)",
        R"(\n +127 +PROGRAM cannot be run)", R"(\n +2 +.*usage)", R"(\n +128\+N +)",
        R"(\n +other +the first failing rank's status)", R"(--restart-delay)",
        R"(--max-restart-delay)"}) {
    EXPECT_TRUE(std::regex_search(result.out, std::regex(row))) << row << "\n" << result.out;
  }
}

// ---- restarts (Note [Restarts] in main.cpp) ----

TEST_F(Cohortrun, Status78IsNotRestarted) {
  // 78 (EX_CONFIG): the rank says a restart cannot fix this (a checkpoint that can never load).
  const Result result = run(cohortrun_shell(
      {"--nproc-per-node", "2", "--max-restarts", "3"},
      "echo attempt $COHORT_RESTART_COUNT; if [ $COHORT_RANK = 1 ]; then exit 78; fi; "
      "exec sleep 60"));
  EXPECT_EQ(result.status, 78) << describe(result);
  // Rank 0 may be stopped before it writes its line; no rank starts a second attempt.
  EXPECT_EQ(lines_of_rank(result.out, 1), std::vector<std::string>{"attempt 0"})
      << describe(result);
  EXPECT_FALSE(contains(result.out, "attempt 1")) << describe(result);
  EXPECT_TRUE(std::regex_search(
      result.err, std::regex(R"(cohortrun: rank 1 \(pid \d+\) exited with status 78; )")))
      << describe(result);
  EXPECT_TRUE(contains(result.err,
                       "cohortrun: rank 1 exited with status 78 (EX_CONFIG): the program says a "
                       "restart cannot fix this; not restarting (3 restarts left)"))
      << describe(result);
  EXPECT_FALSE(contains(result.err, "restarting every rank")) << describe(result);
}

TEST_F(Cohortrun, Status78FromAnyRankEndsTheRunEvenAfterAnotherFailedFirst) {
  // Rank 0 fails first (as a rank does whose peer left a collective); rank 1, which ignores the
  // SIGTERM that follows, exits 78 later, and that still decides. Rank 0 fails only once rank 1
  // ignores SIGTERM (it creates MARK then).
  const std::string mark =
      ::testing::TempDir() + "cohort-78-" + std::to_string(::getpid()) + "-ignoring";
  std::filesystem::remove(mark);
  const Result result =
      run(cohortrun_shell({"--nproc-per-node", "2", "--max-restarts", "2"},
                          "echo attempt $COHORT_RESTART_COUNT; if [ $COHORT_RANK = 0 ]; then "
                          "while [ ! -e \"$MARK\" ]; do sleep 0.01; done; exit 1; fi; "
                          "trap '' TERM; touch \"$MARK\"; sleep 0.3; exit 78"),
          {{"MARK", mark}});
  std::filesystem::remove(mark);
  EXPECT_EQ(result.status, 78) << describe(result);
  EXPECT_EQ(lines_of_rank(result.out, 0), std::vector<std::string>{"attempt 0"})
      << describe(result);
  EXPECT_TRUE(std::regex_search(
      result.err, std::regex(R"(cohortrun: rank 0 \(pid \d+\) exited with status 1; )")))
      << describe(result);
  EXPECT_TRUE(contains(result.err, "rank 1 exited with status 78 (EX_CONFIG)")) << describe(result);
}

/// The rank's lines "start <seconds since the epoch>", as numbers.
std::vector<double> start_times(const std::string& out, int rank) {
  std::vector<double> times;
  for (const std::string& line : lines_of_rank(out, rank)) {
    if (line.rfind("start ", 0) == 0) times.push_back(std::stod(line.substr(6)));
  }
  return times;
}

TEST_F(Cohortrun, RestartsBackOffDoublingToTheCap) {
  const Result result =
      run(cohortrun_shell({"--nproc-per-node", "1", "--max-restarts", "4", "--restart-delay", "0.2",
                           "--max-restart-delay", "0.8"},
                          "echo start $(date +%s.%N); exit 3"));
  EXPECT_EQ(result.status, 3) << describe(result);
  const std::vector<double> expected{0.2, 0.4, 0.8, 0.8};
  const std::vector<std::string> reported{"0.2", "0.4", "0.8", "0.8"};
  for (std::size_t i = 0; i < expected.size(); ++i) {
    EXPECT_TRUE(contains(result.err,
                         "cohortrun: the run failed with status 3; restarting every "
                         "rank in " +
                             reported[i] + " s (restart " + std::to_string(i + 1) + " of 4)"))
        << i << "\n"
        << describe(result);
  }
  const std::vector<double> starts = start_times(result.out, 0);
  ASSERT_EQ(starts.size(), 5u) << describe(result);
  for (std::size_t i = 0; i < expected.size(); ++i) {
    EXPECT_GE(starts[i + 1] - starts[i], expected[i]) << "restart " << i + 1;
  }
}

TEST_F(Cohortrun, TheFirstRestartWaitsOneSecondByDefault) {
  const Result result = run(cohortrun_shell({"--nproc-per-node", "1", "--max-restarts", "1"},
                                            "echo start $(date +%s.%N); exit 3"));
  EXPECT_EQ(result.status, 3) << describe(result);
  EXPECT_TRUE(contains(result.err, "restarting every rank in 1 s (restart 1 of 1)"))
      << describe(result);
  const std::vector<double> starts = start_times(result.out, 0);
  ASSERT_EQ(starts.size(), 2u) << describe(result);
  EXPECT_GE(starts[1] - starts[0], 1.0);
}

TEST_F(Cohortrun, AnAttemptThatRanAsLongAsTheCapStartsTheDelaysAgain) {
  // Attempts 0 and 1 fail at once (0.2 s, then 0.4 s); attempt 2 runs 2 s, longer than the cap
  // of 1.5 s, so it was not failing in a loop: the next delay is the first again.
  const Result result =
      run(cohortrun_shell({"--nproc-per-node", "1", "--max-restarts", "3", "--restart-delay", "0.2",
                           "--max-restart-delay", "1.5"},
                          "if [ $COHORT_RESTART_COUNT = 2 ]; then sleep 2; fi; exit 3"),
          {}, Seconds(30));
  EXPECT_EQ(result.status, 3) << describe(result);
  for (const char* line :
       {"in 0.2 s (restart 1 of 3)", "in 0.4 s (restart 2 of 3)", "in 0.2 s (restart 3 of 3)"}) {
    EXPECT_TRUE(contains(result.err, line)) << line << "\n" << describe(result);
  }
}

TEST_F(Cohortrun, ASignalWhileWaitingToRestartEndsTheRun) {
  // The ranks saved and stopped (75) on their own; while cohortrun waits to restart them, it is
  // told to stop: it does not restart, and exits with the attempt's status.
  Process process(
      cohortrun_shell({"--nproc-per-node", "2", "--max-restarts", "3", "--restart-delay", "30"},
                      "echo attempt $COHORT_RESTART_COUNT; exit 75"),
      clean_environment());
  ASSERT_TRUE(process.read_stderr_until(
      [](const std::string& err) { return contains(err, "restarting every rank in 30 s"); },
      Seconds(10)));
  const auto signalled = Clock::now();
  ::kill(process.pid(), SIGTERM);
  const Result result = process.finish();
  EXPECT_EQ(result.status, 75) << describe(result);
  EXPECT_LT(Seconds(Clock::now() - signalled).count(), 4.0) << describe(result);
  EXPECT_TRUE(contains(result.err, "received SIGTERM while waiting to restart; not restarting"))
      << describe(result);
  EXPECT_EQ(count_lines(result.out, "[rank 0] attempt 1"), 0u) << describe(result);
}

TEST_F(Cohortrun, MissingProgramIsAClearError) {
  const Result result = run({cohortrun_path(), "--nproc-per-node", "2", "/nonexistent/program"});
  EXPECT_EQ(result.status, 127) << describe(result);
  EXPECT_LT(result.seconds, 5.0);
  EXPECT_TRUE(contains(result.err,
                       "cohortrun: cannot run '/nonexistent/program': No such file or directory"))
      << describe(result);
}

TEST_F(Cohortrun, UsageErrors) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases{
      {{"/bin/true"}, "--nproc-per-node"},
      {{"--nproc-per-node", "2"}, "no PROGRAM"},
      {{"--nproc-per-node", "0", "/bin/true"}, "--nproc-per-node"},
      {{"--nproc-per-node", "2", "--nnodes", "2", "/bin/true"}, "--master-addr"},
      {{"--nproc-per-node", "2", "--nnodes", "2", "--node-rank", "2", "--master-addr", "127.0.0.1",
        "/bin/true"},
       "--node-rank"},
      {{"--nproc-per-node", "1", "--restart-delay", "-1", "/bin/true"}, "--restart-delay"},
      {{"--nproc-per-node", "1", "--restart-delay", "5", "--max-restart-delay", "2", "/bin/true"},
       "--max-restart-delay 2 is below --restart-delay 5"},
  };
  for (const auto& [options, message] : cases) {
    std::vector<std::string> argv{cohortrun_path()};
    argv.insert(argv.end(), options.begin(), options.end());
    const Result result = run(argv);
    EXPECT_EQ(result.status, 2) << describe(result);
    EXPECT_TRUE(contains(result.err, message)) << message << "\n" << describe(result);
  }
}

// ---- hello_world ----

/// Whether the build was configured without the examples (then hello_world is not there).
bool examples_turned_off() {
  std::ifstream cache(binary_dir() + "/CMakeCache.txt");
  for (std::string line; std::getline(cache, line);) {
    if (line.rfind("COHORT_BUILD_EXAMPLES:", 0) == 0) return line.ends_with("=OFF");
  }
  return false;
}

class HelloWorld : public Cohortrun {
 protected:
  void SetUp() override {
    Cohortrun::SetUp();
    if (examples_turned_off()) GTEST_SKIP() << "the build has COHORT_BUILD_EXAMPLES=OFF";
    ASSERT_EQ(::access(hello_world_path().c_str(), X_OK), 0) << hello_world_path();
  }
};

/// Checks that `out` greets from `ranks` of a `world`-rank run on `nodes` nodes through `store`.
void expect_greetings(const std::string& out, const std::vector<int>& ranks, int world,
                      int per_node, const std::string& store) {
  for (int rank : ranks) {
    const std::string greeting =
        "[rank " + std::to_string(rank) + "] rank " + std::to_string(rank) + " of " +
        std::to_string(world) + " (local " + std::to_string(rank % per_node) + " of " +
        std::to_string(per_node) + ", node " + std::to_string(rank / per_node) + " of " +
        std::to_string(world / per_node) + ") via cohortrun: sees " + std::to_string(world) +
        " ranks on 1 host(s) through " + store;
    EXPECT_TRUE(contains(out, greeting)) << "missing: " << greeting << "\n" << out;
  }
}

TEST_F(HelloWorld, FourRanksUnderCohortrun) {
  const Result result = run({cohortrun_path(), "--nproc-per-node", "4", hello_world_path()});
  ASSERT_EQ(result.status, 0) << describe(result);
  expect_greetings(result.out, {0, 1, 2, 3}, 4, 4, "TcpStore(127.0.0.1:");
  // Rank 0's table: a header and one row per rank.
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_TRUE(
        std::regex_search(result.out, std::regex(R"(\[rank 0\] )" + std::to_string(rank) +
                                                 R"( +\S+ +\d+ +)" + std::to_string(rank) + "\n")))
        << "no table row for rank " << rank << "\n"
        << result.out;
  }
}

TEST_F(HelloWorld, FileStoreUnderCohortrun) {
  const std::string folder = ::testing::TempDir() + "cohort-hello-" + std::to_string(::getpid());
  const Result result = run({cohortrun_path(), "--nproc-per-node", "2", hello_world_path()},
                            {{"COHORT_STORE", "file:" + folder}});
  std::filesystem::remove_all(folder);
  ASSERT_EQ(result.status, 0) << describe(result);
  expect_greetings(result.out, {0, 1}, 2, 2, "FileStore(" + folder);
}

/// A socket listening on a loopback port the system chose (closed by the caller).
int listening_socket(int& port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof address;
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&address), length), 0) << std::strerror(errno);
  EXPECT_EQ(::listen(fd, 8), 0) << std::strerror(errno);
  EXPECT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length), 0);
  port = ntohs(address.sin_port);
  return fd;
}

TEST_F(HelloWorld, TwoNodesOnOneHost) {
  // Two cohortruns as two nodes; node 0 hosts the store on a port picked here. Another program
  // may take that port between the pick and node 0's listen: node 0 then fails at once saying
  // so, and both nodes start again on another port. The first attempt uses a port this test
  // holds, so that path is taken on every run.
  int port = 0;
  const int held = listening_socket(port);
  const int held_port = port;
  auto node = [&](int node_rank) {
    return std::vector<std::string>{cohortrun_path(),
                                    "--nproc-per-node",
                                    "2",
                                    "--nnodes",
                                    "2",
                                    "--node-rank",
                                    std::to_string(node_rank),
                                    "--master-addr",
                                    "127.0.0.1",
                                    "--master-port",
                                    std::to_string(port),
                                    hello_world_path()};
  };
  for (int attempt = 0;; ++attempt) {
    ASSERT_LT(attempt, 5) << "node 0 could not host the store on 5 ports in a row";
    Process node0(node(0), clean_environment());
    Process node1(node(1), clean_environment());  // killed on leaving the scope
    const Result result0 = node0.finish();
    if (result0.status != 0 && contains(result0.err, "cannot host the store")) {
      const int taken = port;
      ::close(listening_socket(port));
      if (taken == held_port) ::close(held);
      continue;
    }
    EXPECT_GT(attempt, 0) << "node 0 hosted the store on a port this test held";
    const Result result1 = node1.finish();
    ASSERT_EQ(result0.status, 0) << describe(result0);
    ASSERT_EQ(result1.status, 0) << describe(result1);
    const std::string store = "TcpStore(127.0.0.1:" + std::to_string(port) + ")";
    expect_greetings(result0.out, {0, 1}, 4, 2, store);
    expect_greetings(result1.out, {2, 3}, 4, 2, store);
    return;
  }
}

TEST_F(HelloWorld, SingleProcessWithoutLauncher) {
  const Result result = run({hello_world_path()});
  ASSERT_EQ(result.status, 0) << describe(result);
  EXPECT_TRUE(contains(result.out,
                       "rank 0 of 1 (local 0 of 1, node 0 of 1) without a launcher: sees 1 ranks "
                       "on 1 host(s) through MemoryStore"))
      << result.out;
}

TEST_F(HelloWorld, BadEnvironmentFailsWithTheMessage) {
  const Result result = run({hello_world_path()}, {{"RANK", "0"}});
  EXPECT_EQ(result.status, 1) << describe(result);
  EXPECT_TRUE(contains(result.err, "hello_world: cohort: RANK is set (torchrun) but WORLD_SIZE"))
      << describe(result);
}

// ---- train_mlp: a real trainer's save on Ctrl-C ----

class TrainMlp : public Cohortrun {
 protected:
  void SetUp() override {
    Cohortrun::SetUp();
    if (examples_turned_off()) GTEST_SKIP() << "the build has COHORT_BUILD_EXAMPLES=OFF";
    ASSERT_EQ(::access(train_mlp_path().c_str(), X_OK), 0) << train_mlp_path();
  }
};

TEST_F(TrainMlp, CtrlCUnderCohortrunSavesAndExits75) {
  // Ctrl-C at a terminal (SIGINT to cohortrun's process group) while training: cohortrun passes
  // it on once, PreemptionWatch takes a first SIGINT like SIGTERM, the ranks save the step they
  // reached and exit 75, and so does cohortrun.
  const std::string folder = ::testing::TempDir() + "cohort-ctrl-c-" + std::to_string(::getpid());
  std::filesystem::remove_all(folder);
  Process process({cohortrun_path(), "--nproc-per-node", "2", train_mlp_path(), "--host", "--steps",
                   "1000000", "--hidden", "32", "--layers", "2", "--global-batch", "64",
                   "--log-every", "10", "--checkpoint-dir", folder},
                  clean_environment(), /*own_group=*/true);
  const bool training = process.read_until(
      [](const std::string& out) {
        return std::regex_search(out, std::regex(R"(\[rank 0\] step +\d+ +loss)"));
      },
      Seconds(120));
  ::kill(-process.pid(), training ? SIGINT : SIGKILL);
  const Result result = process.finish(Seconds(60));
  std::smatch saved;
  const bool found = std::regex_search(
      result.out, saved,
      std::regex(R"(\[rank 0\] train_mlp: preempted; saved step (\d+) and stopped)"));
  std::string latest;
  std::ifstream(folder + "/latest") >> latest;
  std::filesystem::remove_all(folder);
  ASSERT_TRUE(training) << "train_mlp never logged a step\n" << describe(result);
  EXPECT_EQ(result.status, 75) << describe(result);
  ASSERT_TRUE(found) << describe(result);
  char expected[32];
  std::snprintf(expected, sizeof expected, "step-%012d", std::stoi(saved[1]));
  EXPECT_EQ(latest, expected) << describe(result);
  EXPECT_TRUE(contains(result.err, "received SIGINT; passing it to 2 ranks")) << describe(result);
}

}  // namespace
