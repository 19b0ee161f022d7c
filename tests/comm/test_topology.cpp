// Topology from the launcher: its values are kept, host names fill the gaps, and a disagreement
// names both (Note [Topology from the launcher] in src/comm/topology.cpp).

#include "comm/topology.hpp"

#include <cohort/core/error.hpp>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace {

using cohort::detail::RankPlace;
using cohort::detail::resolve_topology;
using ::testing::HasSubstr;

cohort::LaunchInfo slurm_launch() {
  cohort::LaunchInfo launch;
  launch.launcher = cohort::Launcher::slurm;
  launch.given.local_rank = "SLURM_LOCALID";
  launch.given.node_rank = "SLURM_NODEID";
  launch.given.num_nodes = "SLURM_NNODES";
  return launch;
}

std::string failure(const std::vector<RankPlace>& places, const cohort::LaunchInfo& launch) {
  try {
    resolve_topology(places, 0, launch);
  } catch (const cohort::InvalidArgument& error) {
    return error.what();
  }
  return "no error";
}

TEST(Topology, HostNamesFillWhatTheLauncherDidNotGive) {
  // Hosts a, b, a, b (a cyclic placement): nodes in order of their lowest rank, local ranks in
  // rank order.
  const std::vector<RankPlace> places = {{"a"}, {"b"}, {"a"}, {"b"}};
  const auto third = resolve_topology(places, 2, cohort::LaunchInfo{});
  EXPECT_EQ(third.local_rank, 1);
  EXPECT_EQ(third.local_world_size, 2);
  EXPECT_EQ(third.node_rank, 0);
  EXPECT_EQ(third.num_nodes, 2);
  EXPECT_EQ(resolve_topology(places, 1, cohort::LaunchInfo{}).node_rank, 1);
}

TEST(Topology, TheLaunchersValuesAreKept) {
  // Slurm numbered the nodes the other way round and the local ranks against rank order.
  const std::vector<RankPlace> places = {
      {"a", 1, 2, 1, 2}, {"a", 0, 2, 1, 2}, {"b", 0, 2, 0, 2}, {"b", 1, 2, 0, 2}};
  const auto first = resolve_topology(places, 0, slurm_launch());
  EXPECT_EQ(first.local_rank, 1);
  EXPECT_EQ(first.node_rank, 1);
  EXPECT_EQ(first.num_nodes, 2);
  EXPECT_EQ(resolve_topology(places, 2, slurm_launch()).node_rank, 0);
}

TEST(Topology, ALocalCountThatIsNotTheHostsIsNamed) {
  // torchrun --nnodes 2 --nproc-per-node 2 on one host.
  cohort::LaunchInfo launch;
  launch.launcher = cohort::Launcher::torchrun;
  launch.given.local_rank = "LOCAL_RANK";
  const std::vector<RankPlace> places = {{"a", 0, 2}, {"a", 1, 2}, {"a", 0, 2}, {"a", 1, 2}};
  const std::string message = failure(places, launch);
  EXPECT_THAT(message, HasSubstr("launcher (torchrun) and the host names disagree"));
  EXPECT_THAT(message, HasSubstr("rank 0 is one of 2 processes on its node (LOCAL_RANK)"));
  EXPECT_THAT(message, HasSubstr("ranks 0, 1, 2, 3 on its host 'a'"));
}

TEST(Topology, TwoHostsUnderOneNodeRankAreNamed) {
  const std::vector<RankPlace> places = {{"a", 0, 1, 0, 2}, {"b", 0, 1, 0, 2}};
  const std::string message = failure(places, slurm_launch());
  EXPECT_THAT(message, HasSubstr("rank 1 on host 'b' has node rank 0 (SLURM_NODEID)"));
  EXPECT_THAT(message, HasSubstr("as do the ranks on host 'a'"));
}

TEST(Topology, RepeatedLocalRanksAndWrongNodeCountsAreNamed) {
  EXPECT_THAT(failure({{"a", 0, 2, 0, 1}, {"a", 0, 2, 0, 1}}, slurm_launch()),
              HasSubstr("ranks 0 and 1 both have local rank 0 (SLURM_LOCALID)"));
  EXPECT_THAT(failure({{"a", 0, 1, 0, 3}, {"b", 0, 1, 1, 3}, {"c", 0, 1, 1, 3}}, slurm_launch()),
              HasSubstr("has node rank 1 (SLURM_NODEID), as do the ranks on host 'b'"));
  EXPECT_THAT(failure({{"a", 0, 2, 0, 2}, {"a", 1, 2, 0, 2}}, slurm_launch()),
              HasSubstr("told of 2 nodes (SLURM_NNODES), but the ranks run on 1 host"));
}

TEST(Topology, PlacesSurviveTheStore) {
  const RankPlace place{"gpu-node 7", 3, 4, 1, -1};
  const RankPlace back = cohort::detail::decode(cohort::detail::encode(place));
  EXPECT_EQ(back.host, "gpu-node 7");
  EXPECT_EQ(back.local_rank, 3);
  EXPECT_EQ(back.local_world_size, 4);
  EXPECT_EQ(back.node_rank, 1);
  EXPECT_EQ(back.num_nodes, -1);
  EXPECT_THROW(cohort::detail::decode("1 2"), cohort::Error);
}

}  // namespace
