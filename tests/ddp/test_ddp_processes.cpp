// DataParallel with ranks as separate processes, launched the way torchrun would (RANK,
// WORLD_SIZE, MASTER_ADDR, MASTER_PORT), meeting through a TCP store the test serves.
#include "support/process_ranks.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <regex>
#include <string>
#include <vector>

namespace {

using cohort_test::read_file;
using cohort_test::report;
using ::testing::HasSubstr;

std::vector<cohort_test::ProcessRank> run_ranks(int n, const std::string& tag) {
  return cohort_test::run_process_ranks(n, cohort_test::build_path("tests/ddp/ddp_worker"), {}, {},
                                        "ddp-" + tag);
}

TEST(DdpProcesses, TrainingThroughTheTcpStoreMatchesOneRankAndRanksAgree) {
  const auto ranks = run_ranks(3, "tcp");
  std::string first_hash;
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    ASSERT_TRUE(WIFEXITED(ranks[r].status) && WEXITSTATUS(ranks[r].status) == 0) << report(ranks);
    const std::string output = read_file(ranks[r].output);
    EXPECT_THAT(output, HasSubstr("rank " + std::to_string(r) + " ok"));
    std::smatch match;
    ASSERT_TRUE(std::regex_search(output, match, std::regex("params ([0-9a-f]{16})")))
        << report(ranks);
    if (r == 0) {
      first_hash = match[1];
    } else {
      EXPECT_EQ(match[1], first_hash) << "rank " << r << " holds different parameters\n"
                                      << report(ranks);
    }
  }
}

}  // namespace
