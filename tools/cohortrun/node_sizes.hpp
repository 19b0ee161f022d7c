#pragma once

// The number of ranks on every node of a multi-node run (Note [Nodes of unequal size]).

#include <chrono>
#include <string>
#include <vector>

namespace cohortrun {

struct NodeSizeExchange {
  std::string master_addr;
  int master_port = 0;
  std::string token;
  std::string run_id;
  int node_rank = 0;
  int nnodes = 1;
  int nproc_per_node = 1;
  std::chrono::milliseconds timeout{};
};

/// Publishes this node's --nproc-per-node in the store and returns every node's, in node order.
/// @throws cohort::TimeoutError naming the store and the nodes that never reported.
std::vector<int> exchange_node_sizes(const NodeSizeExchange& exchange);

/// The first global rank of node `node_rank`: the ranks of the nodes before it.
int first_rank_of(const std::vector<int>& sizes, int node_rank);

}  // namespace cohortrun
