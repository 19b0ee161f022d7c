#include "comm/gloo/device.hpp"

#include <cohort/core/env.hpp>
#include <cohort/core/error.hpp>
#include <cohort/core/logging.hpp>

#include <gloo/transport/tcp/device.h>

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <mutex>

namespace cohort::detail {

// Note [Choosing the address]
// A Gloo device binds one local address, which its peers connect to. Across nodes, the host
// name is a poor guide: inside containers or namespaces it often does not resolve ("Unable to
// find address for: node1"), or resolves to a loopback or management address the other nodes
// cannot reach. Every rank already reached the store host, so the address to bind is the local
// end of the route to it, as NCCL's bootstrap chooses its interface: a UDP socket connected to
// the store host (which sends nothing) and getsockname. GLOO_SOCKET_IFNAME still wins where
// set; the host name is the fallback where the store host is unknown (a store given in
// WorldOptions) or has no route.
std::optional<std::string> local_address_toward(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  if (host.empty() || getaddrinfo(host.c_str(), "9", &hints, &found) != 0) {
    return std::nullopt;
  }
  std::optional<std::string> address;
  for (const addrinfo* entry = found; entry != nullptr && !address; entry = entry->ai_next) {
    const int fd = ::socket(entry->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    sockaddr_storage local{};
    socklen_t length = sizeof(local);
    char text[INET6_ADDRSTRLEN] = {};
    if (::connect(fd, entry->ai_addr, entry->ai_addrlen) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &length) == 0) {
      const void* raw =
          local.ss_family == AF_INET
              ? static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(&local)->sin_addr)
              : static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(&local)->sin6_addr);
      if (inet_ntop(local.ss_family, raw, text, sizeof(text)) != nullptr) address = text;
    }
    ::close(fd);
  }
  freeaddrinfo(found);
  return address;
}

std::shared_ptr<gloo::transport::Device> make_gloo_device(bool local_only,
                                                          const std::string& store_host) {
  gloo::transport::tcp::attr attr;
  std::string chosen_by;
  if (const auto iface = env::text(env::kGlooSocketIfname)) {
    attr.iface = *iface;
  } else if (local_only) {
    attr.hostname = "127.0.0.1";
  } else if (auto address = local_address_toward(store_host)) {
    attr.hostname = *address;
    chosen_by = " (the local address of the route to the store host '" + store_host + "')";
  } else {
    char name[256] = {};
    COHORT_CHECK(gethostname(name, sizeof(name) - 1) == 0, Error,
                 std::string("gethostname failed: ") + std::strerror(errno));
    attr.hostname = name;
    if (!store_host.empty()) {
      chosen_by = " (no route to the store host '" + store_host + "' was found)";
    }
  }
  try {
    auto device = gloo::transport::tcp::CreateDevice(attr);
    if (!chosen_by.empty()) {
      COHORT_LOG(info) << "Gloo binds " << attr.hostname << chosen_by;
    }
    return device;
  } catch (const std::exception& error) {
    COHORT_FAIL(Error, std::string("cannot create the Gloo TCP device on ") +
                           (attr.iface.empty() ? "host '" + attr.hostname + "'"
                                               : "interface '" + attr.iface + "'") +
                           chosen_by + ": " + error.what() +
                           ". Set GLOO_SOCKET_IFNAME to the network interface the ranks share.");
  }
}

std::shared_ptr<gloo::transport::Device> shared_gloo_device(const HostContext& host) {
  struct Cache {
    std::mutex mutex;
    std::weak_ptr<gloo::transport::Device> devices[2];  // [local_only]
  };
  // Never destroyed: a worker left to finish after an abort may release a device while static
  // destructors run (Note [Host worker teardown]).
  static Cache* const cache = new Cache();
  const std::size_t index = host.single_node_world ? 1 : 0;
  const std::lock_guard<std::mutex> lock(cache->mutex);
  auto device = cache->devices[index].lock();
  if (!device) {
    device = make_gloo_device(host.single_node_world, host.store_host);
    cache->devices[index] = device;
  }
  return device;
}

}  // namespace cohort::detail
