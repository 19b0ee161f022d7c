// Ranks as separate processes, launched the way torchrun would (RANK, WORLD_SIZE, MASTER_ADDR,
// MASTER_PORT), meeting through a TCP store the test serves or through a file store.
#include "support/process_ranks.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

namespace {

using cohort_test::read_file;
using cohort_test::report;
using ::testing::HasSubstr;

std::vector<cohort_test::ProcessRank> run_ranks(int n, const std::string& scenario,
                                                const std::vector<std::string>& environment,
                                                const std::string& tag) {
  return cohort_test::run_process_ranks(n, cohort_test::build_path("tests/comm/comm_worker"),
                                        {scenario}, environment, "comm-" + tag);
}

TEST(Processes, CollectivesThroughTheTcpStore) {
  const auto ranks = run_ranks(4, "check", {}, "tcp");
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    ASSERT_TRUE(WIFEXITED(ranks[r].status) && WEXITSTATUS(ranks[r].status) == 0) << report(ranks);
    EXPECT_THAT(read_file(ranks[r].output), HasSubstr("rank " + std::to_string(r) + " ok"));
  }
}

TEST(Processes, CollectivesThroughTheFileStore) {
  const auto folder =
      std::filesystem::temp_directory_path() / ("cohort-file-store-" + std::to_string(getpid()));
  const std::string store = "COHORT_STORE=file:" + folder.string();
  const auto ranks = run_ranks(3, "check", {store}, "file");
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    ASSERT_TRUE(WIFEXITED(ranks[r].status) && WEXITSTATUS(ranks[r].status) == 0) << report(ranks);
  }
  std::filesystem::remove_all(folder);
}

/// The N of the "failed after N ms" line a failing comm_worker prints, or -1.
long long failed_after_ms(const std::string& output) {
  const std::string marker = "failed after ";
  const auto at = output.rfind(marker);
  return at == std::string::npos ? -1 : std::stoll(output.substr(at + marker.size()));
}

TEST(Processes, AKilledRankIsNamedAndNobodyHangs) {
  // A 60 s deadline: the survivors must notice the closed connections, not the deadline.
  const auto ranks = run_ranks(4, "kill", {"COHORT_TIMEOUT=60s"}, "kill");
  ASSERT_TRUE(WIFSIGNALED(ranks[2].status)) << report(ranks);
  for (int r : {0, 1, 3}) {
    const cohort_test::ProcessRank& rank = ranks[static_cast<std::size_t>(r)];
    ASSERT_TRUE(WIFEXITED(rank.status)) << report(ranks);
    EXPECT_EQ(WEXITSTATUS(rank.status), 3) << report(ranks);
    // The peer's connections close when it dies: noticed at once, long before the deadline.
    const long long waited = failed_after_ms(read_file(rank.output));
    EXPECT_GE(waited, 0) << report(ranks);
    EXPECT_LT(waited, 10000) << report(ranks);
    EXPECT_THAT(read_file(rank.output), HasSubstr("rank 2")) << report(ranks);
  }
}

// Note [A rank that fails to join]: rank 2 refuses its settings after the ranks have met; the
// others, waiting for it in init's exchanges, used to wait for their whole deadline.
TEST(Processes, ARankThatFailsToJoinEndsEveryRankAtOnce) {
  const auto ranks = run_ranks(4, "bad-init", {"COHORT_TIMEOUT=60s"}, "bad-init");
  for (int r = 0; r < 4; ++r) {
    const cohort_test::ProcessRank& rank = ranks[static_cast<std::size_t>(r)];
    ASSERT_TRUE(WIFEXITED(rank.status)) << report(ranks);
    EXPECT_EQ(WEXITSTATUS(rank.status), 3) << report(ranks);
    const std::string output = read_file(rank.output);
    EXPECT_THAT(output, HasSubstr("COHORT_HOST_TRANSPORT")) << report(ranks);
    if (r != 2) {
      EXPECT_THAT(output, HasSubstr("rank 2 failed while joining the world")) << report(ranks);
    }
    const long long waited = failed_after_ms(output);
    EXPECT_GE(waited, 0) << report(ranks);
    EXPECT_LT(waited, 10000) << report(ranks);
  }
}

// Note [Host worker teardown]: a rank whose collective failed at its deadline destroys its World
// while its worker thread is still inside the Gloo operation (which ends at the deadline plus a
// grace). The World's destruction used to leave that thread running, so it outlived main and
// released the communicator while static destructors ran; now it is joined.
TEST(Processes, NoThreadOutlivesAWorldThatFailedAtItsDeadline) {
  const auto ranks = run_ranks(4, "hang", {"COHORT_TIMEOUT=3s"}, "hang");
  for (int r : {0, 1, 3}) {
    const cohort_test::ProcessRank& rank = ranks[static_cast<std::size_t>(r)];
    ASSERT_TRUE(WIFEXITED(rank.status)) << report(ranks);
    EXPECT_EQ(WEXITSTATUS(rank.status), 3) << report(ranks);
    const std::string output = read_file(rank.output);
    EXPECT_THAT(output, HasSubstr("did not complete within 3000 ms")) << report(ranks);
    EXPECT_THAT(output, HasSubstr("threads left: 1\n")) << report(ranks);
  }
}

}  // namespace
