#pragma once

// Which host communicator a group of ranks gets (see Note [Host transport selection]).

#include "comm/context.hpp"

#include <cohort/comm/communicator.hpp>

#include <memory>
#include <string>

namespace gloo::transport {
class Device;
}

namespace cohort::detail {

/// Note [Host transport selection]
/// A host communicator whose members all run on one host uses shared memory; one that spans
/// hosts uses Gloo, except that one with the same number (> 1) of members on every host combines
/// the two (HierarchicalCommunicator). `HostTransport::gloo` (COHORT_HOST_TRANSPORT=gloo) makes
/// every host communicator Gloo; `shm` is the automatic choice made explicit (shared memory
/// wherever ranks share a host).
std::unique_ptr<Communicator> make_host_communicator(std::shared_ptr<CommContext> context);

/// `parent.split(color, key, name)` for host communicators: the new group gets the transport
/// its members' placement calls for.
std::unique_ptr<Communicator> split_host_communicator(CommContext& parent, int color, int key,
                                                      std::string name);

/// This process's Gloo TCP device (one per process, shared by its Gloo communicators), bound as
/// `make_gloo_device` says for the world of `context`.
std::shared_ptr<gloo::transport::Device> shared_gloo_device(const CommContext& context);

}  // namespace cohort::detail
