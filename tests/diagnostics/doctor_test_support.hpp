#pragma once

// Made-up facts shared by the cohort-doctor tests.

#include "checks.hpp"

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
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

/// A made-up /sys under a temporary folder (removed when it goes), in the shape of a two-socket
/// node: GPU 0 (0000:07:00.0) and the HDR NIC mlx5_0 (0000:08:00.0) behind one PCIe switch on
/// socket 0; GPU 1 (0000:0f:00.0) and mlx5_1 (0000:81:00.0, port DOWN) below one root port on
/// socket 1; no peer-memory module. The GPUs' bus addresses are those tests/diagnostics/
/// fake_nvml.cpp reports.
class FakeSysfs {
 public:
  FakeSysfs() {
    std::random_device random;
    root_ = std::filesystem::temp_directory_path() /
            ("cohort-doctor-sysfs-" + std::to_string(random()) + std::to_string(random()));
    device("pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0/0000:07:00.0", 0, "0x10de",
           "0x030200");
    device("pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:01.0/0000:08:00.0", 0, "0x15b3",
           "0x020700");
    device("pci0000:80/0000:80:01.0/0000:0f:00.0", 1, "0x10de", "0x030200");
    device("pci0000:80/0000:80:01.0/0000:81:00.0", 1, "0x15b3", "0x020700");
    nic("mlx5_0", "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:01.0/0000:08:00.0", "4: ACTIVE",
        "5: LinkUp");
    nic("mlx5_1", "pci0000:80/0000:80:01.0/0000:81:00.0", "1: DOWN", "3: Disabled");
  }
  ~FakeSysfs() {
    std::error_code ignored;
    std::filesystem::remove_all(root_, ignored);
  }
  FakeSysfs(const FakeSysfs&) = delete;
  FakeSysfs& operator=(const FakeSysfs&) = delete;

  const std::filesystem::path& root() const { return root_; }

  /// Marks the peer-memory module loaded.
  void load_peermem() { std::filesystem::create_directories(root_ / "sys/module/nvidia_peermem"); }

 private:
  static void write(const std::filesystem::path& path, const std::string& text) {
    std::filesystem::create_directories(path.parent_path());
    std::ofstream(path) << text << '\n';
  }
  void device(const std::string& path, int numa, const std::string& vendor,
              const std::string& pci_class) {
    const std::filesystem::path dir = root_ / "sys/devices" / path;
    std::filesystem::create_directories(dir);
    write(dir / "numa_node", std::to_string(numa));
    write(dir / "vendor", vendor);
    write(dir / "class", pci_class);
    const std::filesystem::path link = root_ / "sys/bus/pci/devices" / dir.filename();
    std::filesystem::create_directories(link.parent_path());
    std::filesystem::create_directory_symlink("../../../devices/" + path, link);
  }
  void nic(const std::string& name, const std::string& path, const std::string& state,
           const std::string& phys_state) {
    const std::filesystem::path dir = root_ / "sys/class/infiniband" / name;
    std::filesystem::create_directories(dir);
    std::filesystem::create_directory_symlink("../../../devices/" + path, dir / "device");
    write(dir / "ports/1/state", state);
    write(dir / "ports/1/phys_state", phys_state);
    write(dir / "ports/1/rate", "200 Gb/sec (4X HDR)");
    write(dir / "ports/1/link_layer", "InfiniBand");
  }

  std::filesystem::path root_;
};

}  // namespace cohort::doctor::testing
