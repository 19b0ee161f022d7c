#pragma once

/// @file
/// Which backend a world runs, decided in one place (Note [The backend, decided once] in
/// src/comm/world.cpp): `init()` and `run_local()` call these, and cohort-doctor calls the same
/// functions to say what will run and to refuse what `init()` would refuse.

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

/// The host transport `asked` (a program's `WorldOptions::host_transport`), else
/// `COHORT_HOST_TRANSPORT` read through `env`, else automatic. @throws as `parse_host_transport`.
HostTransport host_transport_from(const std::optional<HostTransport>& asked, const EnvLookup& env);

/// NCCL or the host for `choice`: `nccl` or `host`, never `automatic` (automatic: NCCL when this
/// build has CUDA and this process sees a GPU).
/// @throws InvalidArgument when NCCL is asked for and cannot run, saying why.
BackendChoice resolve_backend(BackendChoice choice);

/// The host backend of a group with `members_per_node` members on each of its nodes (Note [Host
/// transport selection]): shared memory on one host, hierarchical across hosts with the same
/// number (> 1) on each, else Gloo; `HostTransport::gloo` makes it Gloo everywhere.
Backend host_backend_for(HostTransport transport, std::span<const int> members_per_node);

/// The decision for a whole world, in words as well.
struct TransportChoice {
  Backend backend = Backend::gloo;                          ///< of the global communicator
  HostTransport host_transport = HostTransport::automatic;  ///< as asked (host backend only)
  std::string description;  ///< "shm: shared memory among the ranks of one host (4 ranks...)"
};

/// What `init()` would run for a world with `members_per_node` ranks on each node: `family` is
/// `resolve_backend`'s answer (nccl or host), `asked` the host transport asked for (unset:
/// `COHORT_HOST_TRANSPORT` through `env`). @throws as `parse_host_transport`.
TransportChoice plan_transport(BackendChoice family, const std::optional<HostTransport>& asked,
                               const EnvLookup& env, std::span<const int> members_per_node);

}  // namespace cohort
