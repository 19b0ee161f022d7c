#pragma once

// What a host communicator knows beyond its CommContext: the transport asked for, where the
// world's store is (the route that picks Gloo's address), and how to make the communicator of a
// group it splits off (Note [Host factory]).

#include "comm/context.hpp"

#include <cohort/comm/communicator.hpp>
#include <cohort/comm/types.hpp>

#include <memory>
#include <string>

namespace cohort::detail {

struct HostContext;

/// Makes the host communicator of `context`, whose backend is decided already.
using MakeHostCommunicator = std::unique_ptr<Communicator> (*)(
    std::shared_ptr<CommContext> context, std::shared_ptr<const HostContext> host);

// Note [Host factory]
// The host backends split and compose communicators (a split's group may need another transport;
// the hierarchical communicator is made of shared-memory and Gloo ones), but none of them knows
// the others: each gets a HostContext whose `make` the one factory (src/comm/factory.cpp), which
// knows every backend, filled in. So the factory depends on the backends and never the reverse,
// and a new host backend is one more case in the factory.
struct HostContext {
  /// The transport asked for (Note [Host transport selection]).
  HostTransport transport = HostTransport::automatic;
  /// Whether the world has a single node: Gloo then binds to loopback.
  bool single_node_world = true;
  /// The store's host, whose route picks the address Gloo binds to across nodes (Note [Choosing
  /// the address]); empty for a store given in WorldOptions.
  std::string store_host;
  /// The factory; set by it.
  MakeHostCommunicator make = nullptr;
};

}  // namespace cohort::detail
