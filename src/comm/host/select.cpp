#include "comm/host/select.hpp"

#include <map>

namespace cohort::detail {

Backend select_host_backend(HostTransport transport, const std::vector<int>& member_nodes) {
  if (transport == HostTransport::gloo) {
    return Backend::gloo;
  }
  std::map<int, int> members_per_node;
  for (const int node : member_nodes) {
    ++members_per_node[node];
  }
  if (members_per_node.size() <= 1) {
    return Backend::shm;
  }
  const int first = members_per_node.begin()->second;
  bool even = first > 1;
  for (const auto& [node, members] : members_per_node) {
    even = even && members == first;
  }
  return even ? Backend::hierarchical : Backend::gloo;
}

std::unique_ptr<Communicator> split_host_communicator(
    CommContext& parent, const std::shared_ptr<const HostContext>& host, int color, int key,
    std::string name) {
  const SplitPlan plan = plan_split(parent, color, key);
  if (!plan.member) {
    return nullptr;
  }
  auto child = make_child_context(parent, plan, std::move(name));
  child->backend = select_host_backend(host->transport, child->placement.member_nodes);
  return host->make(std::move(child), host);
}

}  // namespace cohort::detail
