#include "host_select.hpp"

#include "gloo_communicator.hpp"
#include "hierarchical_communicator.hpp"
#include "shm_communicator.hpp"

#include <cohort/comm/transport.hpp>

#include <map>
#include <mutex>
#include <vector>

namespace cohort::detail {

std::shared_ptr<gloo::transport::Device> shared_gloo_device(const CommContext& context) {
  struct Cache {
    std::mutex mutex;
    std::weak_ptr<gloo::transport::Device> devices[2];  // [local_only]
  };
  // Never destroyed: a worker left to finish after an abort may release a device while static
  // destructors run (Note [Host worker teardown]).
  static Cache* const cache = new Cache();
  const std::size_t index = context.single_node_world ? 1 : 0;
  const std::lock_guard<std::mutex> lock(cache->mutex);
  auto device = cache->devices[index].lock();
  if (!device) {
    device = make_gloo_device(context.single_node_world, context.store_host);
    cache->devices[index] = device;
  }
  return device;
}

std::unique_ptr<Communicator> make_host_communicator(std::shared_ptr<CommContext> context) {
  std::map<int, int> members_per_node;
  for (const int node : context->member_nodes) {
    ++members_per_node[node];
  }
  std::vector<int> members;
  for (const auto& [node, count] : members_per_node) members.push_back(count);
  switch (host_backend_for(context->host_transport, members)) {
    case Backend::shm:
      return std::make_unique<ShmCommunicator>(std::move(context));
    case Backend::hierarchical:
      return std::make_unique<HierarchicalCommunicator>(std::move(context));
    default:
      break;
  }
  auto device = shared_gloo_device(*context);
  return std::make_unique<GlooCommunicator>(std::move(context), std::move(device));
}

std::unique_ptr<Communicator> split_host_communicator(CommContext& parent, int color, int key,
                                                      std::string name) {
  const SplitPlan plan = plan_split(parent, color, key);
  if (!plan.member) {
    return nullptr;
  }
  return make_host_communicator(make_child_context(parent, plan, std::move(name)));
}

}  // namespace cohort::detail
