#include <cohort/comm/transport.hpp>

#include "comm/host/select.hpp"

#include <cohort/core/device.hpp>
#include <cohort/core/error.hpp>

#include <algorithm>
#include <vector>

namespace cohort {

HostTransport parse_host_transport(std::string_view value) {
  if (value == "shm") return HostTransport::shm;
  if (value == "gloo") return HostTransport::gloo;
  if (value == "auto" || value == "automatic") return HostTransport::automatic;
  COHORT_FAIL(InvalidArgument, std::string(env::kHostTransport) + "='" + std::string(value) +
                                   "' is not a host transport; use shm (shared memory within a "
                                   "host), gloo (TCP everywhere) or auto");
}

HostTransport host_transport_from(const std::optional<HostTransport>& asked, const EnvLookup& env) {
  if (asked) return *asked;
  const std::optional<std::string> text = env::text(env, env::kHostTransport);
  return text ? parse_host_transport(*text) : HostTransport::automatic;
}

BackendChoice resolve_backend(BackendChoice choice) {
  switch (choice) {
    case BackendChoice::nccl:
      COHORT_EXPECTS(built_with_cuda() && cuda_device_count() > 0,
                     "the NCCL backend was asked for, but " + cuda_unavailable_reason());
      return BackendChoice::nccl;
    case BackendChoice::host:
      return BackendChoice::host;
    case BackendChoice::automatic:
      break;
  }
  return built_with_cuda() && cuda_device_count() > 0 ? BackendChoice::nccl : BackendChoice::host;
}

Backend host_backend_for(HostTransport transport, std::span<const int> members_per_node) {
  // The node of each member, as the world and its splits hand it to the host rule.
  std::vector<int> member_nodes;
  for (std::size_t node = 0; node < members_per_node.size(); ++node) {
    for (int m = 0; m < members_per_node[node]; ++m) member_nodes.push_back(static_cast<int>(node));
  }
  return detail::select_host_backend(transport, member_nodes);
}

TransportChoice plan_transport(BackendChoice family, const std::optional<HostTransport>& asked,
                               const EnvLookup& env, std::span<const int> members_per_node) {
  TransportChoice plan;
  plan.host_transport = host_transport_from(asked, env);
  plan.backend = family == BackendChoice::nccl ? Backend::nccl : Backend::gloo;
  int ranks = 0, nodes = 0;
  for (const int members : members_per_node) {
    ranks += std::max(0, members);
    nodes += members > 0 ? 1 : 0;
  }
  const std::string on = std::to_string(ranks) + (ranks == 1 ? " rank" : " ranks") + " on " +
                         std::to_string(nodes) + (nodes == 1 ? " host" : " hosts");
  if (plan.backend == Backend::nccl) {
    plan.description = "nccl: NCCL on the GPUs (" + on + ")";
    return plan;
  }
  plan.backend = host_backend_for(plan.host_transport, members_per_node);
  const std::string forced =
      plan.host_transport == HostTransport::automatic
          ? std::string()
          : " (host transport " + std::string(to_string(plan.host_transport)) + " asked for)";
  switch (plan.backend) {
    case Backend::shm:
      plan.description = "shm: shared memory among the ranks of one host (" + on + ")" + forced;
      break;
    case Backend::hierarchical:
      plan.description =
          "hierarchical: shared memory within each host, Gloo over TCP between "
          "hosts (" +
          on + ")" + forced;
      break;
    default:
      plan.description = "gloo: Gloo over TCP between every pair of ranks (" + on + ")" +
                         (plan.host_transport == HostTransport::gloo
                              ? std::string(" (COHORT_HOST_TRANSPORT=gloo or asked for)")
                              : std::string(": uneven ranks per host"));
      break;
  }
  return plan;
}

}  // namespace cohort
