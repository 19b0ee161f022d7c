#include "comm/topology.hpp"

#include <cohort/core/error.hpp>

#include <algorithm>
#include <map>
#include <sstream>

namespace cohort::detail {

// Note [Topology from the launcher]
// ---------------------------------
// A launcher that sets local ranks, node ranks or the node count (cohortrun, torchrun, srun,
// mpirun) knows where it started each process; host names are only a guess (two containers on
// one node have two names; one name can hide two nodes). So a value the launcher gave is used as
// it is, and the host names fill only what it did not give. Every rank still publishes its host,
// and a launcher value that contradicts the hosts (local ranks that do not number the ranks of
// one host from 0, a node rank shared by two hosts, a node count that is not the number of
// hosts) fails on every rank with both versions named: a wrong local rank binds the wrong GPU, a
// wrong node splits the node-local communicator wrongly, and both fail later and far away.

RankPlace launcher_place(const LaunchInfo& launch, std::string host) {
  RankPlace place;
  place.host = std::move(host);
  if (!launch.given.local_rank.empty()) {
    place.local_rank = launch.local_rank;
    place.local_world_size = launch.local_world_size;
  }
  if (!launch.given.node_rank.empty()) place.node_rank = launch.node_rank;
  if (!launch.given.num_nodes.empty()) place.num_nodes = launch.num_nodes;
  return place;
}

std::string encode(const RankPlace& place) {
  return std::to_string(place.local_rank) + " " + std::to_string(place.local_world_size) + " " +
         std::to_string(place.node_rank) + " " + std::to_string(place.num_nodes) + " " + place.host;
}

RankPlace decode(std::string_view text) {
  std::istringstream fields{std::string(text)};
  RankPlace place;
  fields >> place.local_rank >> place.local_world_size >> place.node_rank >> place.num_nodes;
  fields.get();  // the space before the host
  std::getline(fields, place.host);
  COHORT_CHECK(!fields.bad() && !place.host.empty(), Error,
               "a rank published '" + std::string(text) + "' as its place, which is not one");
  return place;
}

namespace {

std::string ranks_text(const std::vector<int>& ranks) {
  std::string text = ranks.size() == 1 ? "rank " : "ranks ";
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    text += (i > 0 ? ", " : "") + std::to_string(ranks[i]);
  }
  return text;
}

[[noreturn]] void disagree(const LaunchInfo& launch, const std::string& what) {
  COHORT_FAIL(InvalidArgument,
              "the launcher (" + std::string(to_string(launch.launcher)) +
                  ") and the host names disagree: " + what +
                  ". Start the ranks so that the launcher's view matches where they run, or "
                  "give every rank of a host the same host name.");
}

}  // namespace

Topology resolve_topology(const std::vector<RankPlace>& places, int rank,
                          const LaunchInfo& launch) {
  const int size = static_cast<int>(places.size());
  COHORT_EXPECTS(rank >= 0 && rank < size,
                 "rank " + std::to_string(rank) + " of " + std::to_string(size) + " places");
  // The hosts, numbered in order of their lowest rank, and the ranks on each.
  std::map<std::string, int> node_of_host;
  std::vector<std::vector<int>> ranks_on;
  std::vector<int> node(static_cast<std::size_t>(size));
  std::vector<int> local(static_cast<std::size_t>(size));
  for (int r = 0; r < size; ++r) {
    auto [it, inserted] = node_of_host.emplace(places[static_cast<std::size_t>(r)].host,
                                               static_cast<int>(node_of_host.size()));
    if (inserted) ranks_on.emplace_back();
    node[static_cast<std::size_t>(r)] = it->second;
    local[static_cast<std::size_t>(r)] =
        static_cast<int>(ranks_on[static_cast<std::size_t>(it->second)].size());
    ranks_on[static_cast<std::size_t>(it->second)].push_back(r);
  }
  const int hosts = static_cast<int>(ranks_on.size());
  auto host_of = [&](int r) { return "'" + places[static_cast<std::size_t>(r)].host + "'"; };

  std::map<int, int> host_of_node_rank;  // the launcher's node rank -> our host index
  for (int r = 0; r < size; ++r) {
    const RankPlace& p = places[static_cast<std::size_t>(r)];
    const std::vector<int>& peers =
        ranks_on[static_cast<std::size_t>(node[static_cast<std::size_t>(r)])];
    const int on_host = static_cast<int>(peers.size());
    if (p.local_rank >= 0) {
      if (p.local_world_size != on_host) {
        disagree(launch, "rank " + std::to_string(r) + " is one of " +
                             std::to_string(p.local_world_size) + " processes on its node (" +
                             launch.given.local_rank + "), but the host names put " +
                             ranks_text(peers) + " on its host " + host_of(r));
      }
      for (int peer : peers) {
        if (peer != r && places[static_cast<std::size_t>(peer)].local_rank == p.local_rank) {
          disagree(launch, "ranks " + std::to_string(std::min(peer, r)) + " and " +
                               std::to_string(std::max(peer, r)) + " both have local rank " +
                               std::to_string(p.local_rank) + " (" + launch.given.local_rank +
                               ") but run on the same host " + host_of(r));
        }
      }
    }
    if (p.node_rank >= 0) {
      auto [it, inserted] =
          host_of_node_rank.emplace(p.node_rank, node[static_cast<std::size_t>(r)]);
      if (!inserted && it->second != node[static_cast<std::size_t>(r)]) {
        disagree(launch, "rank " + std::to_string(r) + " on host " + host_of(r) +
                             " has node rank " + std::to_string(p.node_rank) + " (" +
                             launch.given.node_rank + "), as do the ranks on host " +
                             host_of(ranks_on[static_cast<std::size_t>(it->second)].front()));
      }
      for (int peer : peers) {
        const int theirs = places[static_cast<std::size_t>(peer)].node_rank;
        if (theirs >= 0 && theirs != p.node_rank) {
          disagree(launch, "ranks " + std::to_string(peer) + " and " + std::to_string(r) +
                               " run on the same host " + host_of(r) + " but have node ranks " +
                               std::to_string(theirs) + " and " + std::to_string(p.node_rank) +
                               " (" + launch.given.node_rank + ")");
        }
      }
    }
    if (p.num_nodes >= 0 && p.num_nodes != hosts) {
      disagree(launch, "rank " + std::to_string(r) + " was told of " + std::to_string(p.num_nodes) +
                           " nodes (" + launch.given.num_nodes + "), but the ranks run on " +
                           std::to_string(hosts) + (hosts == 1 ? " host" : " hosts"));
    }
  }

  const RankPlace& mine = places[static_cast<std::size_t>(rank)];
  const auto me = static_cast<std::size_t>(rank);
  Topology topology;
  topology.local_rank = mine.local_rank >= 0 ? mine.local_rank : local[me];
  topology.local_world_size =
      mine.local_rank >= 0 ? mine.local_world_size
                           : static_cast<int>(ranks_on[static_cast<std::size_t>(node[me])].size());
  topology.node_rank = mine.node_rank >= 0 ? mine.node_rank : node[me];
  topology.num_nodes = mine.num_nodes >= 0 ? mine.num_nodes : hosts;
  for (int r = 0; r < size; ++r) {
    const int given = places[static_cast<std::size_t>(r)].node_rank;
    topology.nodes.push_back(given >= 0 ? given : node[static_cast<std::size_t>(r)]);
  }
  return topology;
}

}  // namespace cohort::detail
