#include "node_sizes.hpp"

#include <cohort/core/env.hpp>
#include <cohort/core/error.hpp>
#include <cohort/launch/tcp_store.hpp>

#include <numeric>

namespace cohortrun {

// Note [Nodes of unequal size]
// Each node's cohortrun knows only its own --nproc-per-node, but a rank's global number and the
// world size depend on every node's. So before starting its ranks, every node's cohortrun
// (node 0's too) publishes its count in the store and reads the others': ranks are numbered
// node by node, and nodes may differ in size (2 + 1 ranks is a world of 3). A node that never
// reports (not started, or its cohortrun cannot reach the store) fails every other node at the
// deadline with the missing nodes named, before any rank starts and waits in vain; a node that
// cannot reach the store fails with the address it tried.
std::vector<int> exchange_node_sizes(const NodeSizeExchange& exchange) {
  cohort::TcpStoreOptions options;
  options.host = exchange.master_addr;
  options.port = exchange.master_port;
  options.token = exchange.token;
  options.timeout = exchange.timeout;
  options.connect_timeout = exchange.timeout;
  cohort::TcpStore store(options);
  const std::string prefix = "cohortrun/" + exchange.run_id + "/nproc/";
  store.set(prefix + std::to_string(exchange.node_rank), std::to_string(exchange.nproc_per_node));
  std::vector<std::string> keys;
  for (int node = 0; node < exchange.nnodes; ++node) {
    keys.push_back(prefix + std::to_string(node));
  }
  try {
    store.wait(keys, exchange.timeout);
  } catch (const cohort::TimeoutError&) {
    std::string missing;
    int count = 0;
    for (int node = 0; node < exchange.nnodes; ++node) {
      if (!store.check({keys[static_cast<std::size_t>(node)]})) {
        missing += (missing.empty() ? "" : ", ") + std::to_string(node);
        ++count;
      }
    }
    COHORT_FAIL(cohort::TimeoutError,
                (count == 1 ? "node " : "nodes ") + missing + " of " +
                    std::to_string(exchange.nnodes) + " never reported to the store at " +
                    exchange.master_addr + ":" + std::to_string(exchange.master_port) + " within " +
                    cohort::env::describe_duration(exchange.timeout) +
                    " (COHORT_TIMEOUT): start cohortrun with the same --nnodes, --master-addr and "
                    "--master-port on every node, and check that each can reach that address");
  }
  std::vector<int> sizes;
  for (int node = 0; node < exchange.nnodes; ++node) {
    const std::string text = store.get(keys[static_cast<std::size_t>(node)], exchange.timeout);
    std::size_t used = 0;
    int size = 0;
    try {
      size = std::stoi(text, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    COHORT_CHECK(used == text.size() && size >= 1, cohort::Error,
                 "node " + std::to_string(node) + " published '" + text +
                     "' as its number of ranks: is every node running the same cohortrun?");
    sizes.push_back(size);
  }
  return sizes;
}

int first_rank_of(const std::vector<int>& sizes, int node_rank) {
  return std::accumulate(sizes.begin(), sizes.begin() + node_rank, 0);
}

}  // namespace cohortrun
