#pragma once

// Where each rank runs: the launcher's word where it gave one, host names for the rest, and a
// clear error where the two disagree (Note [Topology from the launcher] in topology.cpp).

#include <cohort/launch/launch_info.hpp>

#include <string>
#include <string_view>
#include <vector>

namespace cohort::detail {

/// What one rank publishes: its host (or simulated node) and what its launcher said; -1 where the
/// launcher said nothing.
struct RankPlace {
  std::string host;
  int local_rank = -1;
  int local_world_size = -1;
  int node_rank = -1;
  int num_nodes = -1;
};

/// This rank's place as `LaunchInfo::given` says the launcher gave it.
RankPlace launcher_place(const LaunchInfo& launch, std::string host);

/// One line of text and back, for the store.
std::string encode(const RankPlace& place);
/// @throws Error for text `encode` did not make.
RankPlace decode(std::string_view text);

struct Topology {
  int local_rank = 0;
  int local_world_size = 1;
  int node_rank = 0;
  int num_nodes = 1;
  std::vector<int> nodes;  // the node of every rank, numbered as `node_rank` is
};

/// The topology of rank `rank` from every rank's place (`places[r]` is rank r's): the launcher's
/// values where it gave them, else from the hosts (nodes numbered in order of their lowest rank,
/// local ranks in rank order). The same on every rank.
/// @throws InvalidArgument when a launcher's value disagrees with the hosts, naming the rank,
///         the variable (from `launch.given`), both values and the hosts.
Topology resolve_topology(const std::vector<RankPlace>& places, int rank, const LaunchInfo& launch);

}  // namespace cohort::detail
