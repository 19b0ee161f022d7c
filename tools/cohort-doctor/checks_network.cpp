// Which network interfaces NCCL's sockets and the Gloo host backend would use.

#include "checks.hpp"
#include "checks_util.hpp"

#include <algorithm>

namespace cohort::doctor {

namespace {

std::vector<std::string_view> split(std::string_view text, char separator) {
  std::vector<std::string_view> parts;
  std::size_t start = 0;
  while (true) {
    const std::size_t end = text.find(separator, start);
    parts.push_back(text.substr(start, end == std::string_view::npos ? end : end - start));
    if (end == std::string_view::npos) {
      return parts;
    }
    start = end + 1;
  }
}

/// Unique interface names matching `list`, in the order given.
std::vector<std::string> matching_names(std::string_view list,
                                        std::span<const NetworkInterface> interfaces) {
  std::vector<std::string> names;
  for (const NetworkInterface& interface : interfaces) {
    if (matches_interface_list(list, interface.name) &&
        std::find(names.begin(), names.end(), interface.name) == names.end()) {
      names.push_back(interface.name);
    }
  }
  return names;
}

const NetworkInterface* find_interface(std::span<const NetworkInterface> interfaces,
                                       std::string_view name) {
  const auto found = std::find_if(interfaces.begin(), interfaces.end(),
                                  [name](const NetworkInterface& i) { return i.name == name; });
  return found == interfaces.end() ? nullptr : &*found;
}

/// "eth0 (10.0.0.2), ib0 (10.1.0.2)".
std::string describe_names(const std::vector<std::string>& names,
                           std::span<const NetworkInterface> interfaces) {
  std::string text;
  for (const std::string& name : names) {
    if (!text.empty()) {
      text += ", ";
    }
    text += name;
    if (const NetworkInterface* interface = find_interface(interfaces, name)) {
      text += " (" + interface->address + ")";
    }
  }
  return text;
}

std::string all_interfaces(std::span<const NetworkInterface> interfaces) {
  std::vector<std::string> names;
  for (const NetworkInterface& interface : interfaces) {
    if (std::find(names.begin(), names.end(), interface.name) == names.end()) {
      names.push_back(interface.name);
    }
  }
  return names.empty() ? std::string("none") : describe_names(names, interfaces);
}

bool all_loopback(const std::vector<std::string>& names,
                  std::span<const NetworkInterface> interfaces) {
  return std::all_of(names.begin(), names.end(), [interfaces](const std::string& name) {
    const NetworkInterface* interface = find_interface(interfaces, name);
    return interface != nullptr && interface->loopback;
  });
}

}  // namespace

bool matches_interface_list(std::string_view list, std::string_view name) {
  bool negate = false;
  bool exact = false;
  if (list.starts_with('^')) {
    negate = true;
    list.remove_prefix(1);
  }
  if (list.starts_with('=')) {
    exact = true;
    list.remove_prefix(1);
  }
  bool matched = false;
  for (std::string_view entry : split(list, ',')) {
    entry = entry.substr(0, entry.find(':'));
    if (exact ? name == entry : name.starts_with(entry)) {
      matched = true;
      break;
    }
  }
  return matched != negate;
}

std::vector<std::string> nccl_socket_interfaces(const EnvMap& environment,
                                                std::span<const NetworkInterface> interfaces) {
  const auto spec = detail::lookup(environment, "NCCL_SOCKET_IFNAME");
  if (spec && spec->size() > 1) {
    return matching_names(*spec, interfaces);
  }
  for (const std::string_view list : {"ib", "^docker,lo,virbr", "docker", "lo", "virbr"}) {
    auto names = matching_names(list, interfaces);
    if (!names.empty()) {
      return names;
    }
  }
  return {};
}

Finding check_nccl_socket(const EnvMap& environment, std::span<const NetworkInterface> interfaces,
                          int num_nodes, bool nccl_in_use) {
  Finding finding{Severity::ok, "NCCL socket interface", "", ""};
  const Severity failure = nccl_in_use ? Severity::error : Severity::warn;
  const auto spec = detail::lookup(environment, "NCCL_SOCKET_IFNAME");
  const bool user_set = spec && spec->size() > 1;
  const auto names = nccl_socket_interfaces(environment, interfaces);
  const std::string available = "this host's IPv4 interfaces: " + all_interfaces(interfaces);
  if (names.empty()) {
    finding.severity = failure;
    finding.message = user_set ? "NCCL_SOCKET_IFNAME=" + *spec + " matches none of " + available
                               : "no IPv4 interface found (" + available + ")";
    finding.message += "; NCCL fails with \"Bootstrap : no socket interface found\"";
    finding.advice =
        "set NCCL_SOCKET_IFNAME to one of the interfaces listed (=name for an exact "
        "match), or unset it";
    return finding;
  }
  finding.message = "NCCL's bootstrap and socket transport would use " +
                    describe_names(names, interfaces) +
                    (user_set ? " (from NCCL_SOCKET_IFNAME=" + *spec + ")" : " (NCCL's default)");
  if (num_nodes > 1 && all_loopback(names, interfaces)) {
    finding.severity = failure;
    finding.message += ": loopback only, which other nodes cannot reach";
    finding.advice = "set NCCL_SOCKET_IFNAME to the interface on the cluster network";
  }
  return finding;
}

Finding check_gloo_socket(const EnvMap& environment, std::span<const NetworkInterface> interfaces,
                          std::optional<std::string> hostname_address, int num_nodes) {
  Finding finding{Severity::ok, "Gloo socket interface", "", ""};
  const std::string available = "this host's IPv4 interfaces: " + all_interfaces(interfaces);
  if (const auto spec = detail::lookup(environment, cohort::env::kGlooSocketIfname);
      spec && !spec->empty()) {
    std::vector<std::string> present;
    std::string absent;
    for (const std::string_view name : split(*spec, ',')) {
      if (find_interface(interfaces, name) != nullptr) {
        present.emplace_back(name);
      } else {
        absent += (absent.empty() ? "" : ", ") + std::string(name);
      }
    }
    if (!absent.empty()) {
      finding.severity = Severity::warn;
      finding.message = "GLOO_SOCKET_IFNAME names " + absent + ", which this host does not have (" +
                        available + ")";
      finding.advice = "set GLOO_SOCKET_IFNAME to interfaces from that list";
      return finding;
    }
    finding.message = "the host backend (Gloo over TCP) would use " +
                      describe_names(present, interfaces) + " (from GLOO_SOCKET_IFNAME)";
    if (num_nodes > 1 && all_loopback(present, interfaces)) {
      finding.severity = Severity::warn;
      finding.message += ": loopback only, which other nodes cannot reach";
      finding.advice = "set GLOO_SOCKET_IFNAME to the interface on the cluster network";
    }
    return finding;
  }
  // Without GLOO_SOCKET_IFNAME: 127.0.0.1 on one node; across nodes the local address of the
  // route to the store host, the host name only as the fallback (Note [Choosing the address]).
  const std::string fallback =
      hostname_address ? "the host name's address, " + *hostname_address + ", is only the fallback"
                       : "the host name, which does not resolve, is not needed";
  if (num_nodes <= 1) {
    finding.message =
        "on one node the host backend uses shared memory; Gloo over TCP (only with "
        "COHORT_HOST_TRANSPORT=gloo there) binds 127.0.0.1; across nodes it binds "
        "the local address of the route to the store host (MASTER_ADDR), and " +
        fallback;
    return finding;
  }
  std::string master = detail::lookup(environment, cohort::env::kMasterAddr).value_or("");
  if (master.empty()) {
    master = detail::lookup(environment, cohort::env::kTorchMasterAddr).value_or("");
  }
  finding.message =
      "across nodes the host backend (Gloo over TCP) binds the local address of the "
      "route to the store host" +
      (master.empty() ? std::string() : " " + master) + "; " + fallback +
      " (set GLOO_SOCKET_IFNAME to choose)";
  if (master == "localhost" || master.starts_with("127.")) {
    finding.severity = Severity::warn;
    finding.message += ": " + master + " is this host's loopback, which other nodes cannot reach";
    finding.advice = "set MASTER_ADDR (--master-addr) to node 0's address on the cluster network";
  }
  return finding;
}

}  // namespace cohort::doctor
