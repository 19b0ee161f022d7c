#pragma once

// Which host backend a group of ranks gets, and the split of a host communicator.

#include "comm/context.hpp"
#include "comm/host/context.hpp"

#include <cohort/comm/communicator.hpp>
#include <cohort/comm/types.hpp>

#include <memory>
#include <string>
#include <vector>

namespace cohort::detail {

/// Note [Host transport selection]
/// A host communicator whose members all run on one host uses shared memory; one that spans
/// hosts uses Gloo, except that one with the same number (> 1) of members on every host combines
/// the two (HierarchicalCommunicator). `HostTransport::gloo` (COHORT_HOST_TRANSPORT=gloo) makes
/// every host communicator Gloo; `shm` is the automatic choice made explicit (shared memory
/// wherever ranks share a host). Decided before the communicator exists, from `member_nodes`
/// (the node of each member); its constructor checks it.
Backend select_host_backend(HostTransport transport, const std::vector<int>& member_nodes);

/// `parent.split(color, key, name)` for host communicators: the new group gets the backend its
/// members' placement calls for, made through `host.make`.
std::unique_ptr<Communicator> split_host_communicator(
    CommContext& parent, const std::shared_ptr<const HostContext>& host, int color, int key,
    std::string name);

}  // namespace cohort::detail
