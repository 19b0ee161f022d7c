// One failure, one readable report (Note [One report per failure] in src/comm/watchdog.cpp): a
// SIGKILL of one rank of four used to print 1,265 lines, each surviving rank repeating the
// failure about six times with 64 recent collectives in every copy, and the numbers in them
// disagreed. Each rank's error is now a few lines naming the failed rank, the collective and the
// cause; the recent collectives go to one file per rank; every age and duration said of a
// collective is measured from one clock (Note [One clock for a collective] in work.cpp) and a
// silent rank's progress is said as what it last published (Note [What a silent rank last
// said] in diagnosis.cpp).
#include "comm/context.hpp"
#include "comm/diagnosis.hpp"
#include "support/process_ranks.hpp"
#include "support/test_helpers.hpp"

#include <cohort/comm/world.hpp>
#include <cohort/core/error.hpp>
#include <cohort/core/stream.hpp>
#include <cohort/launch/memory_store.hpp>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

/// The number right after the first `marker` in `text`, or -1.
long long number_after(const std::string& text, const std::string& marker) {
  const auto at = text.find(marker);
  if (at == std::string::npos) return -1;
  return std::atoll(text.c_str() + at + marker.size());
}

/// The path an error gives for its rank's recent collectives ("Recent collectives of rank R
/// (...): <path>"), or "".
std::string report_path(const std::string& message) {
  static const std::regex line(R"(Recent collectives of rank \d+ \([^\n]*\): (/[^\s]+))");
  std::smatch match;
  return std::regex_search(message, match, line) ? match[1].str() : "";
}

cohort::WorldOptions host_options(std::chrono::milliseconds timeout) {
  cohort::WorldOptions options;
  options.backend = cohort::BackendChoice::host;
  options.timeout = timeout;
  return options;
}

// Work::wait's message said "in flight for 0 ms" of a collective in flight for seconds: it
// described the work's record, whose age was never set, while the flight recorder reckoned the
// same collective's age from its own clock reading.
TEST(FailureReport, AnInFlightCollectiveHasOneAgeWhereverItIsDescribed) {
  std::string message;
  double before_ms = 0.0;
  double recorded_ms = -1.0;
  std::atomic<bool> looked{false};
  cohort::run_local(
      2,
      [&](cohort::World& world) {
        const cohort::Stream stream = cohort::Stream::create(cohort::Device::host());
        // Large enough to run on the communicator's worker, not inline in the call (Note [Small
        // host collectives inline]), so that the call returns while rank 1 has not arrived.
        std::vector<float> data(std::size_t{1} << 17, 1.0f);
        if (world.rank() == 1) {
          while (!looked) std::this_thread::sleep_for(5ms);  // arrives once rank 0 has looked
          world.comm().all_reduce(std::span<float>(data), cohort::ReduceOp::sum, stream).wait();
          return;
        }
        const auto issued = Clock::now();
        cohort::Work work =
            world.comm().all_reduce(std::span<float>(data), cohort::ReduceOp::sum, stream);
        std::this_thread::sleep_for(400ms);
        before_ms = std::chrono::duration<double, std::milli>(Clock::now() - issued).count();
        try {
          work.wait(50ms);
        } catch (const cohort::TimeoutError& error) {
          message = error.what();
        }
        for (const cohort::CollectiveRecord& record : world.comm().recent_collectives()) {
          if (record.sequence == work.sequence()) recorded_ms = record.issued_seconds_ago * 1e3;
        }
        looked = true;
        work.wait();
      },
      host_options(60s));
  ASSERT_THAT(message, HasSubstr("#1 all_reduce")) << "Work::wait(50 ms) did not give up";
  const long long said = number_after(message, "in flight for ");
  EXPECT_GE(static_cast<double>(said), before_ms - 1.0) << message;
  EXPECT_LE(static_cast<double>(said), recorded_ms + 1.0)
      << message << "\nthe flight recorder, read after, said " << recorded_ms << " ms";
}

// Rank 0 raises; ranks 1 and 2 fail in the collective they wait for. Their errors name it, the
// rank that failed and the cause, in a few lines; the recent collectives are in a file, where
// the failed collective has the same duration as in the error.
TEST(FailureReport, TheErrorIsAFewLinesAndTheRecentCollectivesAgreeWithIt) {
  const auto folder = std::filesystem::temp_directory_path() /
                      ("cohort-failure-report-" + std::to_string(getpid()));
  std::filesystem::create_directories(folder);
  setenv("TMPDIR", folder.c_str(), 1);
  std::vector<std::string> messages(3);
  try {
    cohort::run_local(
        3,
        [&](cohort::World& world) {
          const cohort::Stream stream = cohort::Stream::create(cohort::Device::host());
          std::vector<float> data(256, 1.0f);
          world.comm().all_reduce(std::span<float>(data), cohort::ReduceOp::sum, stream).wait();
          if (world.rank() == 0) {
            std::this_thread::sleep_for(300ms);
            throw std::runtime_error("bad batch");
          }
          try {
            world.comm().all_reduce(std::span<float>(data), cohort::ReduceOp::sum, stream).wait();
          } catch (const cohort::Error& error) {
            messages[static_cast<std::size_t>(world.rank())] = error.what();
            throw;
          }
        },
        host_options(60s));
  } catch (const std::runtime_error&) {
  }
  unsetenv("TMPDIR");
  for (int r : {1, 2}) {
    const std::string& message = messages[static_cast<std::size_t>(r)];
    SCOPED_TRACE("rank " + std::to_string(r) + "'s error:\n" + message);
    EXPECT_LE(lines_of(message).size(), 4u) << "the error carries more than its report";
    EXPECT_THAT(message, HasSubstr("rank " + std::to_string(r) + ": #2 all_reduce 256 x f32"));
    EXPECT_THAT(message, HasSubstr("rank 0 raised: bad batch"));
    EXPECT_THAT(message, Not(HasSubstr("#1 all_reduce"))) << "the recent collectives are inline";
    const long long failed_after = number_after(message, "failed after ");
    EXPECT_GE(failed_after, 250);
    const std::string path = report_path(message);
    ASSERT_FALSE(path.empty()) << "no file of recent collectives named";
    EXPECT_EQ(std::filesystem::path(path).parent_path().parent_path(), folder);
    const std::string report = cohort_test::read_file(path);
    EXPECT_THAT(report, HasSubstr("#1 all_reduce 256 x f32 (1.00 KiB) sum: completed in"));
    EXPECT_THAT(report, HasSubstr("#2 all_reduce 256 x f32 (1.00 KiB) sum: failed after " +
                                  std::to_string(failed_after) + " ms"))
        << report;
  }
  std::filesystem::remove_all(folder);
}

/// Requests for progress that every member answers at once or never: a member that has not
/// answered request 7 is silent.
class AnsweredRequests final : public cohort::detail::ProgressRequests {
 public:
  std::int64_t request_progress() noexcept override { return 7; }
  void answer_progress_request() override {}
  std::int64_t answered_request() const noexcept override { return 7; }
  std::int64_t settled_request() noexcept override { return 7; }
};

// The diagnosis of a SIGKILL said "ranks that had not arrived: rank 2 (last issued #875)" beside
// ranks in lockstep with it at #1666: #875 was the progress rank 2 last published, up to a
// second before it died. A silent rank is named as not responding, with what it last published
// and when, and not as a rank that had not arrived.
TEST(FailureReport, ASilentRanksProgressIsWhatItLastPublishedAndWhen) {
  auto store = std::make_shared<cohort::MemoryStore>();
  auto context = std::make_shared<cohort::detail::CommContext>(cohort::StoreGroup(
      std::make_shared<cohort::PrefixStore>("test", store), 0, 2, 10s, {0, 2}, "test"));
  context->name = "global";
  context->id = "global";
  context->monitor_store = std::make_shared<cohort::PrefixStore>("test", store);
  const auto published_at = std::chrono::duration_cast<std::chrono::milliseconds>(
                                std::chrono::system_clock::now().time_since_epoch())
                                .count() -
                            800;
  // Member 1 (global rank 2) published "issued 875, finished 874" 0.8 s ago, answering nothing.
  context->monitor_store->set("progress/1", "875 874 " + std::to_string(published_at) + " 0");
  AnsweredRequests requests;
  const std::string text = cohort::detail::diagnose_stragglers(*context, 1666, &requests);
  EXPECT_THAT(text, Not(HasSubstr("had not arrived"))) << text;
  std::smatch match;
  const std::regex said(R"(ranks not responding \(their process died or is stuck\): rank 2 )"
                        R"(\(last heard from ([0-9.]+) s ago, when it had issued #875\))");
  ASSERT_TRUE(std::regex_search(text, match, said)) << text;
  EXPECT_GE(std::stod(match[1].str()), 0.7) << text;  // published 0.8 s before the diagnosis
  EXPECT_LT(std::stod(match[1].str()), 60.0) << text;
}

/// The processes whose parent is `parent`.
std::vector<pid_t> children_of(pid_t parent) {
  std::vector<pid_t> children;
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return children;
  while (const dirent* entry = readdir(proc)) {
    const pid_t pid = static_cast<pid_t>(std::atoi(entry->d_name));
    if (pid <= 0) continue;
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string text;
    std::getline(stat, text);
    const auto close = text.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream fields(text.substr(close + 2));
    char state = 0;
    pid_t ppid = 0;
    fields >> state >> ppid;
    if (ppid == parent) children.push_back(pid);
  }
  closedir(proc);
  return children;
}

/// The COHORT_RANK that cohortrun gave process `pid`, or -1.
int rank_of(pid_t pid) {
  std::ifstream environ_file("/proc/" + std::to_string(pid) + "/environ");
  std::string entry;
  while (std::getline(environ_file, entry, '\0')) {
    if (entry.rfind("COHORT_RANK=", 0) == 0) return std::atoi(entry.c_str() + 12);
  }
  return -1;
}

/// Stops `cohortrun` and its ranks whatever state they are in: a second signal makes it kill
/// every rank (Note [Signals] in cohortrun).
void stop_run(pid_t cohortrun) {
  if (waitpid(cohortrun, nullptr, WNOHANG) != 0) return;
  kill(cohortrun, SIGTERM);
  std::this_thread::sleep_for(500ms);
  kill(cohortrun, SIGTERM);
  std::this_thread::sleep_for(1s);
  kill(cohortrun, SIGKILL);
  waitpid(cohortrun, nullptr, 0);
}

// The issue's own run: a preemption-safe trainer (train_mlp with a checkpoint folder, so that the
// surviving ranks keep going when cohortrun passes them its SIGTERM) on four host ranks under
// cohortrun, one rank SIGKILLed in mid-training.
TEST(FailureReport, ASigkilledRankOfFourGivesOneShortReport) {
  const std::string train_mlp = cohort_test::build_path("examples/train_mlp/train_mlp");
  const std::string cohortrun = cohort_test::build_path("tools/cohortrun/cohortrun");
  if (!std::filesystem::exists(train_mlp) || !std::filesystem::exists(cohortrun)) {
    GTEST_SKIP() << "needs train_mlp (COHORT_BUILD_EXAMPLES) and cohortrun";
  }
  const auto folder = std::filesystem::temp_directory_path() /
                      ("cohort-sigkill-report-" + std::to_string(getpid()));
  std::filesystem::remove_all(folder);
  std::filesystem::create_directories(folder / "checkpoints");
  const std::filesystem::path output = folder / "output.txt";
  std::vector<std::string> argv_text{cohortrun,
                                     "--nproc-per-node",
                                     "4",
                                     train_mlp,
                                     "--host",
                                     "--steps",
                                     "100000000",
                                     "--log-every",
                                     "0",
                                     "--hidden",
                                     "64",
                                     "--layers",
                                     "4",
                                     "--checkpoint-dir",
                                     (folder / "checkpoints").string(),
                                     "--checkpoint-every",
                                     "100000000"};
  std::vector<char*> argv;
  for (auto& argument : argv_text) argv.push_back(argument.data());
  argv.push_back(nullptr);
  const std::string tmpdir = "TMPDIR=" + folder.string();
  const pid_t run = fork();
  if (run == 0) {
    const int fd = open(output.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    putenv(const_cast<char*>(tmpdir.c_str()));
    unsetenv("COHORT_HOST_TRANSPORT");
    execv(argv[0], argv.data());
    _exit(127);
  }
  ASSERT_GT(run, 0);
  // Training is under way once rank 0 has said which GEMM it uses; then a second more, so that
  // rank 2 has issued more than one heartbeat's worth of collectives when it dies.
  const auto give_up = Clock::now() + 90s;
  while (cohort_test::read_file(output).find("GEMM") == std::string::npos &&
         Clock::now() < give_up && waitpid(run, nullptr, WNOHANG) == 0) {
    std::this_thread::sleep_for(50ms);
  }
  std::this_thread::sleep_for(1500ms);
  pid_t victim = -1;
  for (const pid_t child : children_of(run)) {
    if (rank_of(child) == 2) victim = child;
  }
  if (victim <= 0) {
    stop_run(run);
    FAIL() << "rank 2 of the run was not found:\n" << cohort_test::read_file(output);
  }
  kill(victim, SIGKILL);
  int status = 0;
  while (waitpid(run, &status, WNOHANG) == 0) {
    if (Clock::now() > give_up + 60s) {
      stop_run(run);
      FAIL() << "the run did not end after rank 2 was killed:\n" << cohort_test::read_file(output);
    }
    std::this_thread::sleep_for(50ms);
  }
  const std::string text = cohort_test::read_file(output);
  SCOPED_TRACE("the run's output:\n" + text);
  EXPECT_LE(lines_of(text).size(), 60u);
  EXPECT_THAT(text, HasSubstr("rank 2 (pid " + std::to_string(victim) + ") was killed"));
  for (int r : {0, 1, 3}) {
    // Each surviving rank's error names itself, the collective and the killed rank.
    const std::regex error("\\[rank " + std::to_string(r) + "\\] train_mlp: cohort: rank " +
                           std::to_string(r) + ": [^\\n]*all_reduce[^\\n]*rank 2");
    EXPECT_TRUE(std::regex_search(text, error)) << "rank " << r << "'s error";
  }
  std::smatch match;
  const std::regex report(R"(Recent collectives of rank \d+ \([^\n]*\): (/[^\s]+))");
  ASSERT_TRUE(std::regex_search(text, match, report));
  EXPECT_THAT(cohort_test::read_file(match[1].str()), HasSubstr("all_reduce"));
  std::filesystem::remove_all(folder);
}

}  // namespace
