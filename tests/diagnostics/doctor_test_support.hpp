#pragma once

// Made-up facts shared by the cohort-doctor tests.

#include "checks.hpp"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

namespace cohort::doctor::testing {

inline constexpr std::uint64_t kMiB = 1ULL << 20;
inline constexpr std::uint64_t kGiB = 1ULL << 30;

inline bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

/// The finding about `topic`, or nullptr.
inline const Finding* find_topic(const std::vector<Finding>& findings, const std::string& topic) {
  const auto found = std::find_if(findings.begin(), findings.end(),
                                  [&topic](const Finding& f) { return f.topic == topic; });
  return found == findings.end() ? nullptr : &*found;
}

/// A GPU of compute capability major.minor.
inline GpuInfo gpu(int major, int minor) {
  GpuInfo info;
  info.name = "Test GPU";
  info.compute_major = major;
  info.compute_minor = minor;
  return info;
}

/// Peer access, with native atomics, between every pair of `count` GPUs.
inline std::vector<PeerLink> full_mesh(int count) {
  std::vector<PeerLink> links;
  for (int from = 0; from < count; ++from) {
    for (int to = 0; to < count; ++to) {
      if (from != to) {
        links.push_back(PeerLink{from, to, true, 0, true});
      }
    }
  }
  return links;
}

/// lo, docker0, eth0 (two addresses) and, when asked, ib0.
inline std::vector<NetworkInterface> sample_interfaces(bool with_ib) {
  std::vector<NetworkInterface> interfaces = {{"lo", "127.0.0.1", true, true},
                                              {"docker0", "172.17.0.1", false, true},
                                              {"eth0", "10.0.0.2", false, true},
                                              {"eth0", "10.0.0.3", false, true}};
  if (with_ib) {
    interfaces.push_back({"ib0", "10.1.0.2", false, true});
  }
  return interfaces;
}

}  // namespace cohort::doctor::testing
