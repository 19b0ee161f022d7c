#pragma once

/// @file
/// Which backend a world runs and how its host communicators move data, decided in one place:
/// `init()` calls these, and cohort-doctor calls the same functions to say what will run.

#include <cohort/comm/types.hpp>
#include <cohort/comm/world.hpp>
#include <cohort/core/env.hpp>

#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace cohort {

/// Parses a `COHORT_HOST_TRANSPORT` value: `shm`, `gloo`, or `auto` (also `automatic`).
/// @throws InvalidArgument naming the variable, the value and the accepted ones otherwise.
HostTransport parse_host_transport(std::string_view value);

/// The host transport `options` asks for, else `COHORT_HOST_TRANSPORT` read through `env`, else
/// automatic. @throws as `parse_host_transport`.
HostTransport host_transport_from(const std::optional<HostTransport>& asked, const EnvLookup& env);

/// The global communicator's backend family for `choice`: NCCL when asked, or (automatic) when
/// this build has CUDA and a GPU is visible; otherwise the host backend (returned as
/// `Backend::gloo`; `host_backend_for` says which host communicator).
/// @throws InvalidArgument when NCCL is asked for and cannot run, saying why.
Backend choose_backend(BackendChoice choice);

/// The host communicator a group gets (Note [Host transport selection]): shared memory when all
/// its members are on one host, hierarchical when it spans hosts with the same number (> 1) on
/// each, else Gloo; `HostTransport::gloo` makes it Gloo everywhere. `members_per_node`: how many
/// members each node has (nodes without members are left out).
Backend host_backend_for(HostTransport transport, std::span<const int> members_per_node);

/// The decision for a whole world, in words as well.
struct TransportChoice {
  Backend backend = Backend::gloo;  ///< of the global communicator
  HostTransport host_transport = HostTransport::automatic;  ///< as asked (host backend only)
  std::string description;  ///< "shm: shared memory among the 4 ranks of this host"...
};

/// What `init()` would run for a world with `members_per_node` ranks on each node: `family` is
/// `choose_backend`'s answer (NCCL, or `Backend::gloo` for the host backend), `asked` the host
/// transport asked for (unset: `COHORT_HOST_TRANSPORT` through `env`).
/// @throws as `parse_host_transport`.
TransportChoice plan_transport(Backend family, const std::optional<HostTransport>& asked,
                               const EnvLookup& env, std::span<const int> members_per_node);

}  // namespace cohort
