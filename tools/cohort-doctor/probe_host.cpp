// Host facts: environment, host name, CPU cores, interfaces, /dev/shm, resource limits.

#include "probe.hpp"

#include <cohort/version.hpp>

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <array>
#include <climits>
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

}  // namespace

void probe_host(Report& report) {
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
}

}  // namespace cohort::doctor
