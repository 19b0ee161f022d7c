#pragma once

// The one place that knows every backend: it makes the communicator of a context whose backend
// is decided (Note [Host factory]).

#include "comm/context.hpp"
#include "comm/host/context.hpp"

#include <cohort/comm/communicator.hpp>

#include <memory>

namespace cohort::detail {

/// The communicator of `context`, on the backend decided for it (`context->backend`). Host
/// backends get `host`, with its `make` set to this factory's, for the groups they split off.
/// Collective over the members of `context`.
std::unique_ptr<Communicator> make_communicator(std::shared_ptr<CommContext> context,
                                                HostContext host);

}  // namespace cohort::detail
