// Host facts: environment, host name, CPU cores, interfaces, /dev/shm, resource limits.

#include "probe.hpp"

#include <cohort/core/env.hpp>
#include <cohort/launch/launch_info.hpp>
#include <cohort/launch/rendezvous.hpp>
#include <cohort/version.hpp>

#include <CLI/Version.hpp>
#include <nlohmann/json.hpp>

#include <arpa/inet.h>
#include <fcntl.h>
#include <gnu/libc-version.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/statvfs.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <string_view>

extern char** environ;  // NOLINT: POSIX's process environment

namespace cohort::doctor {

namespace {

EnvMap read_environment() {
  EnvMap environment;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    const std::string_view text(*entry);
    const std::size_t equals = text.find('=');
    if (equals != std::string_view::npos) {
      environment.emplace(std::string(text.substr(0, equals)),
                          std::string(text.substr(equals + 1)));
    }
  }
  return environment;
}

std::string ipv4_text(const in_addr& address) {
  std::array<char, INET_ADDRSTRLEN> text{};
  if (inet_ntop(AF_INET, &address, text.data(), static_cast<socklen_t>(text.size())) == nullptr) {
    return "?";
  }
  return text.data();
}

std::string read_hostname() {
  std::array<char, 256> name{};
  if (gethostname(name.data(), name.size() - 1) != 0) {
    return "?";
  }
  return name.data();
}

std::optional<std::string> resolve_ipv4(const std::string& hostname) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* results = nullptr;
  if (getaddrinfo(hostname.c_str(), nullptr, &hints, &results) != 0 || results == nullptr) {
    return std::nullopt;
  }
  std::optional<std::string> address;
  if (results->ai_family == AF_INET && results->ai_addr != nullptr) {
    address = ipv4_text(reinterpret_cast<const sockaddr_in*>(results->ai_addr)->sin_addr);
  }
  freeaddrinfo(results);
  return address;
}

std::vector<NetworkInterface> read_interfaces() {
  std::vector<NetworkInterface> interfaces;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) {
    return interfaces;
  }
  for (const ifaddrs* entry = list; entry != nullptr; entry = entry->ifa_next) {
    if (entry->ifa_addr == nullptr || entry->ifa_addr->sa_family != AF_INET ||
        entry->ifa_name == nullptr) {
      continue;
    }
    NetworkInterface interface;
    interface.name = entry->ifa_name;
    interface.address = ipv4_text(reinterpret_cast<const sockaddr_in*>(entry->ifa_addr)->sin_addr);
    interface.loopback = (entry->ifa_flags & IFF_LOOPBACK) != 0;
    interface.up = (entry->ifa_flags & IFF_UP) != 0;
    interfaces.push_back(std::move(interface));
  }
  freeifaddrs(list);
  return interfaces;
}

int usable_cpu_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) {
    return static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  }
  return CPU_COUNT(&set);
}

std::optional<FileSystemSize> file_system_size(const char* path) {
  struct statvfs info {};
  if (statvfs(path, &info) != 0) {
    return std::nullopt;
  }
  const auto block = static_cast<std::uint64_t>(info.f_frsize);
  return FileSystemSize{static_cast<std::uint64_t>(info.f_blocks) * block,
                        static_cast<std::uint64_t>(info.f_bavail) * block};
}

ResourceLimit resource_limit(int resource) {
  rlimit limit{};
  if (getrlimit(resource, &limit) != 0) {
    return {};
  }
  const auto value = [](rlim_t raw) -> std::optional<std::uint64_t> {
    if (raw == RLIM_INFINITY) {
      return std::nullopt;
    }
    return static_cast<std::uint64_t>(raw);
  };
  return ResourceLimit{value(limit.rlim_cur), value(limit.rlim_max)};
}

/// The value of `key` in "key : value" lines (/proc/cpuinfo) or "key: value kB" (/proc/meminfo).
std::string field(const std::string& line, std::string_view key) {
  if (!line.starts_with(key)) return {};
  const std::size_t colon = line.find(':');
  if (colon == std::string::npos || line.find_first_not_of(" \t", key.size()) != colon) return {};
  std::size_t start = line.find_first_not_of(" \t", colon + 1);
  return start == std::string::npos ? std::string() : line.substr(start);
}

HostInventory read_inventory() {
  HostInventory inventory;
  std::set<std::string> sockets;
  {
    std::ifstream cpuinfo("/proc/cpuinfo");
    for (std::string line; std::getline(cpuinfo, line);) {
      if (inventory.cpu_model.empty()) inventory.cpu_model = field(line, "model name");
      if (inventory.cpu_model.empty()) inventory.cpu_model = field(line, "Model");
      if (const std::string id = field(line, "physical id"); !id.empty()) sockets.insert(id);
    }
  }
  inventory.sockets = std::max<int>(1, static_cast<int>(sockets.size()));
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator("/sys/devices/system/node", error)) {
    const std::string name = entry.path().filename().string();
    if (name.starts_with("node") && name.size() > 4 &&
        std::isdigit(static_cast<unsigned char>(name[4]))) {
      ++inventory.numa_nodes;
    }
  }
  {
    std::ifstream meminfo("/proc/meminfo");
    for (std::string line; std::getline(meminfo, line);) {
      if (const std::string total = field(line, "MemTotal"); !total.empty()) {
        inventory.memory_total_bytes = std::stoull(total) * 1024;
      }
      if (const std::string available = field(line, "MemAvailable"); !available.empty()) {
        inventory.memory_available_bytes = std::stoull(available) * 1024;
      }
    }
  }
  {
    std::ifstream release("/etc/os-release");
    for (std::string line; std::getline(release, line);) {
      if (line.starts_with("PRETTY_NAME=")) {
        std::string name = line.substr(12);
        if (name.size() >= 2 && name.front() == '"' && name.back() == '"') {
          name = name.substr(1, name.size() - 2);
        }
        inventory.os = name;
      }
    }
  }
  utsname names{};
  if (uname(&names) == 0) {
    inventory.kernel = std::string(names.sysname) + " " + names.release + " " + names.machine;
  }
#if defined(__clang__)
  inventory.compiler = std::string("clang ") + __clang_version__;
#elif defined(__GNUC__)
  inventory.compiler = std::string("g++ ") + __VERSION__;
#endif
  inventory.libraries.emplace_back("cohort", cohort::version());
  inventory.libraries.emplace_back("glibc", gnu_get_libc_version());
  inventory.libraries.emplace_back("CLI11", CLI11_VERSION);
  inventory.libraries.emplace_back("nlohmann-json",
                                   std::to_string(NLOHMANN_JSON_VERSION_MAJOR) + "." +
                                       std::to_string(NLOHMANN_JSON_VERSION_MINOR) + "." +
                                       std::to_string(NLOHMANN_JSON_VERSION_PATCH));
  return inventory;
}

/// Resolves the rendezvous address and opens (then closes) one TCP connection to it.
RendezvousFacts probe_rendezvous(const EnvMap& environment, double timeout_s) {
  RendezvousFacts facts;
  const EnvLookup lookup = [&environment](std::string_view name) -> std::optional<std::string> {
    const auto found = environment.find(name);
    if (found == environment.end() || found->second.empty()) return std::nullopt;
    return found->second;
  };
  const auto source_of = [&](std::string_view cohort_name, std::string_view other) {
    if (lookup(cohort_name)) return std::string(cohort_name);
    if (lookup(other)) return std::string(other);
    return std::string("the default");
  };
  try {
    const LaunchInfo info = LaunchInfo::from_environment(lookup);
    const StorePlan store = plan_store(info, lookup);
    if (store.kind == StorePlan::Kind::tcp || store.kind == StorePlan::Kind::torch) {
      facts.host = store.host;
      facts.port = store.port;
      facts.source = source_of(env::kMasterAddr, env::kTorchMasterAddr);
    }
  } catch (const std::exception&) {
    // The launcher and store findings say what is wrong; the address may still be checked.
  }
  if (facts.host.empty()) {
    // A single process uses no address, but one set for the jobs to come is checked too.
    const auto host =
        lookup(env::kMasterAddr) ? lookup(env::kMasterAddr) : lookup(env::kTorchMasterAddr);
    if (!host) return facts;
    facts.host = *host;
    facts.source = source_of(env::kMasterAddr, env::kTorchMasterAddr) + ", set for jobs to come";
    const auto port =
        lookup(env::kMasterPort) ? lookup(env::kMasterPort) : lookup(env::kTorchMasterPort);
    facts.port = port ? std::atoi(port->c_str()) : 29500;
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* results = nullptr;
  const std::string port_text = std::to_string(facts.port);
  const int status = getaddrinfo(facts.host.c_str(), port_text.c_str(), &hints, &results);
  if (status != 0 || results == nullptr) {
    facts.resolve_error = gai_strerror(status);
    return facts;
  }
  for (const addrinfo* entry = results; entry != nullptr; entry = entry->ai_next) {
    std::array<char, INET6_ADDRSTRLEN> text{};
    const void* address =
        entry->ai_family == AF_INET
            ? static_cast<const void*>(
                  &reinterpret_cast<const sockaddr_in*>(entry->ai_addr)->sin_addr)
            : static_cast<const void*>(
                  &reinterpret_cast<const sockaddr_in6*>(entry->ai_addr)->sin6_addr);
    if (inet_ntop(entry->ai_family, address, text.data(), static_cast<socklen_t>(text.size())) !=
            nullptr &&
        std::find(facts.addresses.begin(), facts.addresses.end(), text.data()) ==
            facts.addresses.end()) {
      facts.addresses.emplace_back(text.data());
    }
  }
  // One connection, to the first address, with a deadline.
  const int fd = socket(results->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) {
    facts.reach = RendezvousFacts::Reach::failed;
    facts.reach_error = std::strerror(errno);
    freeaddrinfo(results);
    return facts;
  }
  const auto begin = std::chrono::steady_clock::now();
  int result = connect(fd, results->ai_addr, results->ai_addrlen);
  freeaddrinfo(results);
  int error = result == 0 ? 0 : errno;
  if (result != 0 && errno == EINPROGRESS) {
    pollfd wait{fd, POLLOUT, 0};
    const int ready = poll(&wait, 1, static_cast<int>(timeout_s * 1000.0));
    if (ready == 0) {
      error = ETIMEDOUT;
    } else {
      socklen_t length = sizeof(error);
      getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length);
    }
  }
  close(fd);
  facts.connect_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - begin).count();
  if (error == 0) {
    facts.reach = RendezvousFacts::Reach::open;
  } else {
    facts.reach = error == ECONNREFUSED ? RendezvousFacts::Reach::refused
                  : error == ETIMEDOUT  ? RendezvousFacts::Reach::timed_out
                                        : RendezvousFacts::Reach::failed;
    facts.reach_error = std::strerror(error);
  }
  return facts;
}

}  // namespace

void probe_host(Report& report, const ProbeOptions& options) {
  report.cohort_version = cohort::version();
  report.environment = read_environment();
  report.hostname = read_hostname();
  report.hostname_address = resolve_ipv4(report.hostname);
  report.cpu_cores_online = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  report.cpu_cores_usable = usable_cpu_cores();
  report.interfaces = read_interfaces();
  report.shm = file_system_size("/dev/shm");
  report.memlock = resource_limit(RLIMIT_MEMLOCK);
  report.stack = resource_limit(RLIMIT_STACK);
  report.inventory = read_inventory();
  report.rendezvous = probe_rendezvous(report.environment, options.connect_timeout_s);
}

}  // namespace cohort::doctor
