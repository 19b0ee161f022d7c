#pragma once

// The Gloo TCP device a process's Gloo communicators share, and the address it binds.

#include "comm/host/context.hpp"

#include <memory>
#include <optional>
#include <string>

namespace gloo::transport {
class Device;
}

namespace cohort::detail {

/// The Gloo TCP device for this process: bound to `GLOO_SOCKET_IFNAME` when set, else to
/// 127.0.0.1 when the world has one node (`local_only`), else to the local address of the route
/// to `store_host` (Note [Choosing the address]), else to this host's name.
std::shared_ptr<gloo::transport::Device> make_gloo_device(bool local_only,
                                                          const std::string& store_host);

/// The local address this host would send from to reach `host` (a name or an address), found
/// by connecting a UDP socket, which sends nothing; nullopt when `host` does not resolve or no
/// route reaches it.
std::optional<std::string> local_address_toward(const std::string& host);

/// This process's Gloo TCP device (one per process, shared by its Gloo communicators), bound as
/// `make_gloo_device` says for the world `host` describes.
std::shared_ptr<gloo::transport::Device> shared_gloo_device(const HostContext& host);

}  // namespace cohort::detail
