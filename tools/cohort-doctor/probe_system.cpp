// GPU and network health facts: NVML (loaded with dlopen, so that every build, CUDA or not, can
// ask the driver) and sysfs (PCI paths, RDMA ports, the peer-memory module). Both read under a
// root that tests point at a made-up tree, and NVML can be any library with its functions (the
// tests' stand-in, tests/diagnostics/fake_nvml.c).

#include "probe.hpp"

#include <cohort/comm/transport.hpp>

#include <dlfcn.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace cohort::doctor {

namespace {

namespace fs = std::filesystem;

// ---- sysfs -------------------------------------------------------------------------------------

std::string read_line(const fs::path& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  while (!line.empty() && (line.back() == '\n' || line.back() == ' ' || line.back() == '\r')) {
    line.pop_back();
  }
  return line;
}

int read_int(const fs::path& path, int fallback) {
  const std::string text = read_line(path);
  if (text.empty()) return fallback;
  char* end = nullptr;
  const long value = std::strtol(text.c_str(), &end, 10);
  return end == text.c_str() ? fallback : static_cast<int>(value);
}

/// The device's path below <root>/sys/devices ("pci0000:3a/0000:3a:00.0/0000:3b:00.0"), or "".
std::string device_path(const fs::path& root, const fs::path& link) {
  std::error_code error;
  const fs::path real = fs::canonical(link, error);
  if (error) return {};
  const std::string text = real.string();
  const std::string prefix = (fs::canonical(root, error) / "sys" / "devices").string() + "/";
  if (error || !text.starts_with(prefix)) return {};
  return text.substr(prefix.size());
}

/// "4: ACTIVE" -> "ACTIVE".
std::string after_colon(const std::string& text) {
  const std::size_t colon = text.find(':');
  if (colon == std::string::npos) return text;
  std::size_t start = colon + 1;
  while (start < text.size() && text[start] == ' ') ++start;
  return text.substr(start);
}

void probe_sysfs(GpuSystem& system, const fs::path& root) {
  std::error_code error;
  // NVIDIA display and 3D controllers on the PCI bus, driver or not.
  const fs::path pci = root / "sys" / "bus" / "pci" / "devices";
  if (fs::is_directory(pci, error)) {
    system.nvidia_pci_devices = 0;
    for (const fs::directory_entry& entry : fs::directory_iterator(pci, error)) {
      if (read_line(entry.path() / "vendor") == "0x10de" &&
          read_line(entry.path() / "class").starts_with("0x03")) {
        ++system.nvidia_pci_devices;
      }
    }
  }
  // RDMA devices and their ports.
  const fs::path infiniband = root / "sys" / "class" / "infiniband";
  if (fs::is_directory(infiniband, error)) {
    std::vector<fs::path> devices;
    for (const fs::directory_entry& entry : fs::directory_iterator(infiniband, error)) {
      devices.push_back(entry.path());
    }
    std::sort(devices.begin(), devices.end());
    for (const fs::path& device : devices) {
      Nic nic;
      nic.name = device.filename().string();
      nic.pci_path = device_path(root, device / "device");
      if (!nic.pci_path.empty()) nic.pci_bus_id = fs::path(nic.pci_path).filename().string();
      nic.numa_node = read_int(device / "device" / "numa_node", -1);
      std::vector<fs::path> ports;
      for (const fs::directory_entry& entry : fs::directory_iterator(device / "ports", error)) {
        ports.push_back(entry.path());
      }
      std::sort(ports.begin(), ports.end());
      for (const fs::path& port_path : ports) {
        IbPort port;
        port.port = std::atoi(port_path.filename().c_str());
        port.state = after_colon(read_line(port_path / "state"));
        port.phys_state = after_colon(read_line(port_path / "phys_state"));
        port.rate = read_line(port_path / "rate");
        port.rate_gbps = std::atof(port.rate.c_str());
        port.link_layer = read_line(port_path / "link_layer");
        nic.ports.push_back(std::move(port));
      }
      system.nics.push_back(std::move(nic));
    }
  }
  for (const char* module : {"nvidia_peermem", "nv_peer_mem"}) {
    if (fs::exists(root / "sys" / "module" / module, error)) {
      system.peer_memory_module = module;
      break;
    }
  }
  for (GpuHealth& gpu : system.gpus) {
    const fs::path device = pci / gpu.pci_bus_id;
    gpu.pci_path = device_path(root, device);
    gpu.numa_node = read_int(device / "numa_node", -1);
  }
}

// ---- NVML --------------------------------------------------------------------------------------
// The few NVML entry points the doctor uses, declared from NVML's documented C interface: every
// call returns an int status (0 success), devices are opaque handles.

using NvmlReturn = int;
using NvmlDevice = struct NvmlDeviceOpaque*;
constexpr NvmlReturn kNvmlSuccess = 0;

/// nvmlPciInfo_t (the _v3 layout).
struct NvmlPciInfo {
  char bus_id_legacy[16];
  unsigned domain;
  unsigned bus;
  unsigned device;
  unsigned pci_device_id;
  unsigned pci_subsystem_id;
  char bus_id[32];
};

class Nvml {
 public:
  explicit Nvml(const std::string& path) {
    handle_ = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle_ == nullptr) {
      const char* why = dlerror();
      problem_ = "cannot load " + path + (why != nullptr ? std::string(": ") + why : "");
    }
  }
  ~Nvml() {
    if (initialized_) call<NvmlReturn (*)()>("nvmlShutdown");
    if (handle_ != nullptr) dlclose(handle_);
  }
  Nvml(const Nvml&) = delete;
  Nvml& operator=(const Nvml&) = delete;

  bool loaded() const { return handle_ != nullptr; }
  const std::string& problem() const { return problem_; }

  template <typename Function>
  Function find(const char* name) const {
    return handle_ == nullptr ? nullptr : reinterpret_cast<Function>(dlsym(handle_, name));
  }

  /// Calls `name` with `args` when the library has it; returns its status, or -1 when absent.
  template <typename Function, typename... Args>
  NvmlReturn call(const char* name, Args... args) const {
    const Function function = find<Function>(name);
    return function == nullptr ? -1 : function(static_cast<Args>(args)...);
  }

  bool init() {
    const NvmlReturn status = call<NvmlReturn (*)()>("nvmlInit_v2");
    if (status != kNvmlSuccess) {
      problem_ = "nvmlInit_v2 failed: " + error_string(status);
      return false;
    }
    initialized_ = true;
    return true;
  }

  std::string error_string(NvmlReturn status) const {
    const auto function = find<const char* (*)(NvmlReturn)>("nvmlErrorString");
    const char* text = function != nullptr && status >= 0 ? function(status) : nullptr;
    return text != nullptr ? text : "status " + std::to_string(status);
  }

 private:
  void* handle_ = nullptr;
  bool initialized_ = false;
  std::string problem_;
};

/// "0000:3b:00.0", sysfs's spelling of a PCI address.
std::string sysfs_bus_id(const NvmlPciInfo& info) {
  char text[32];
  std::snprintf(text, sizeof(text), "%04x:%02x:%02x.0", info.domain & 0xffffu, info.bus & 0xffu,
                info.device & 0xffu);
  return text;
}

void probe_device(const Nvml& nvml, NvmlDevice device, GpuHealth& gpu) {
  char text[96] = {};
  if (nvml.call<NvmlReturn (*)(NvmlDevice, char*, unsigned)>(
          "nvmlDeviceGetName", device, text, static_cast<unsigned>(sizeof(text))) == kNvmlSuccess) {
    gpu.name = text;
  }
  if (nvml.call<NvmlReturn (*)(NvmlDevice, char*, unsigned)>(
          "nvmlDeviceGetUUID", device, text, static_cast<unsigned>(sizeof(text))) == kNvmlSuccess) {
    gpu.uuid = text;
  }
  NvmlPciInfo pci{};
  if (nvml.call<NvmlReturn (*)(NvmlDevice, NvmlPciInfo*)>("nvmlDeviceGetPciInfo_v3", device,
                                                          &pci) == kNvmlSuccess) {
    gpu.pci_bus_id = sysfs_bus_id(pci);
  }
  int major = 0, minor = 0;
  if (nvml.call<NvmlReturn (*)(NvmlDevice, int*, int*)>("nvmlDeviceGetCudaComputeCapability",
                                                        device, &major, &minor) == kNvmlSuccess) {
    gpu.compute_major = major;
    gpu.compute_minor = minor;
  }
  using UnsignedQuery = NvmlReturn (*)(NvmlDevice, unsigned*);
  unsigned gen = 0, width = 0, max_gen = 0, max_width = 0;
  const bool pcie =
      nvml.call<UnsignedQuery>("nvmlDeviceGetCurrPcieLinkGeneration", device, &gen) ==
          kNvmlSuccess &&
      nvml.call<UnsignedQuery>("nvmlDeviceGetCurrPcieLinkWidth", device, &width) == kNvmlSuccess;
  if (pcie) {
    nvml.call<UnsignedQuery>("nvmlDeviceGetMaxPcieLinkGeneration", device, &max_gen);
    nvml.call<UnsignedQuery>("nvmlDeviceGetMaxPcieLinkWidth", device, &max_width);
    gpu.pcie = PcieLink{static_cast<int>(gen), static_cast<int>(width), static_cast<int>(max_gen),
                        static_cast<int>(max_width)};
  }
  constexpr unsigned kMaxNvLinks = 18;  // NVML_NVLINK_MAX_LINKS
  for (unsigned link = 0; link < kMaxNvLinks; ++link) {
    int active = 0;  // nvmlEnableState_t
    if (nvml.call<NvmlReturn (*)(NvmlDevice, unsigned, int*)>("nvmlDeviceGetNvLinkState", device,
                                                              link, &active) != kNvmlSuccess) {
      continue;
    }
    NvLink nvlink;
    nvlink.link = static_cast<int>(link);
    nvlink.active = active != 0;
    NvmlPciInfo remote{};
    if (nvlink.active &&
        nvml.call<NvmlReturn (*)(NvmlDevice, unsigned, NvmlPciInfo*)>(
            "nvmlDeviceGetNvLinkRemotePciInfo_v2", device, link, &remote) == kNvmlSuccess) {
      nvlink.remote_bus_id = sysfs_bus_id(remote);
    }
    int type = 0;  // nvmlIntNvLinkDeviceType_t: 0 GPU, 1 IBM NPU, 2 switch
    if (nvlink.active &&
        nvml.call<NvmlReturn (*)(NvmlDevice, unsigned, int*)>(
            "nvmlDeviceGetNvLinkRemoteDeviceType", device, link, &type) == kNvmlSuccess) {
      nvlink.remote_is_switch = type == 2;
    }
    gpu.nvlinks.push_back(std::move(nvlink));
  }
  int ecc_current = 0, ecc_pending = 0;
  if (nvml.call<NvmlReturn (*)(NvmlDevice, int*, int*)>(
          "nvmlDeviceGetEccMode", device, &ecc_current, &ecc_pending) == kNvmlSuccess) {
    gpu.ecc_enabled = ecc_current != 0;
    using EccQuery = NvmlReturn (*)(NvmlDevice, int, int, unsigned long long*);
    unsigned long long count = 0;
    // Error type 0 corrected, 1 uncorrected; counter 0 volatile, 1 aggregate.
    if (nvml.call<EccQuery>("nvmlDeviceGetTotalEccErrors", device, 1, 0, &count) == kNvmlSuccess) {
      gpu.ecc_uncorrected_volatile = count;
    }
    if (nvml.call<EccQuery>("nvmlDeviceGetTotalEccErrors", device, 1, 1, &count) == kNvmlSuccess) {
      gpu.ecc_uncorrected_aggregate = count;
    }
    if (nvml.call<EccQuery>("nvmlDeviceGetTotalEccErrors", device, 0, 0, &count) == kNvmlSuccess) {
      gpu.ecc_corrected_volatile = count;
    }
  }
  unsigned corrected = 0, uncorrected = 0, pending = 0, failure = 0;
  if (nvml.call<NvmlReturn (*)(NvmlDevice, unsigned*, unsigned*, unsigned*, unsigned*)>(
          "nvmlDeviceGetRemappedRows", device, &corrected, &uncorrected, &pending, &failure) ==
      kNvmlSuccess) {
    gpu.remap_supported = true;
    gpu.remapped_correctable = corrected;
    gpu.remapped_uncorrectable = uncorrected;
    gpu.remap_pending = pending != 0;
    gpu.remap_failure = failure != 0;
  }
  unsigned long long reasons = 0;
  if (nvml.call<NvmlReturn (*)(NvmlDevice, unsigned long long*)>(
          "nvmlDeviceGetCurrentClocksThrottleReasons", device, &reasons) == kNvmlSuccess) {
    gpu.throttle_reasons = reasons;
  }
  int persistence = 0;
  if (nvml.call<NvmlReturn (*)(NvmlDevice, int*)>("nvmlDeviceGetPersistenceMode", device,
                                                  &persistence) == kNvmlSuccess) {
    gpu.persistence = persistence != 0;
  }
  unsigned mig = 0, mig_pending = 0;
  if (nvml.call<NvmlReturn (*)(NvmlDevice, unsigned*, unsigned*)>(
          "nvmlDeviceGetMigMode", device, &mig, &mig_pending) == kNvmlSuccess) {
    gpu.mig = mig != 0;
  }
  unsigned temperature = 0;
  if (nvml.call<NvmlReturn (*)(NvmlDevice, int, unsigned*)>("nvmlDeviceGetTemperature", device, 0,
                                                            &temperature) == kNvmlSuccess) {
    gpu.temperature_c = static_cast<int>(temperature);
  }
}

void probe_nvml(GpuSystem& system, const std::string& library) {
  Nvml nvml(library);
  if (!nvml.loaded() || !nvml.init()) {
    system.nvml_problem = nvml.problem();
    return;
  }
  system.nvml_loaded = true;
  char text[96] = {};
  if (nvml.call<NvmlReturn (*)(char*, unsigned)>("nvmlSystemGetDriverVersion", text,
                                                 static_cast<unsigned>(sizeof(text))) ==
      kNvmlSuccess) {
    system.driver_version = text;
  }
  if (nvml.call<NvmlReturn (*)(char*, unsigned)>(
          "nvmlSystemGetNVMLVersion", text, static_cast<unsigned>(sizeof(text))) == kNvmlSuccess) {
    system.nvml_version = text;
  }
  unsigned count = 0;
  const NvmlReturn status = nvml.call<NvmlReturn (*)(unsigned*)>("nvmlDeviceGetCount_v2", &count);
  if (status != kNvmlSuccess) {
    system.nvml_problem = "nvmlDeviceGetCount_v2 failed: " + nvml.error_string(status);
    return;
  }
  std::vector<NvmlDevice> devices;
  for (unsigned index = 0; index < count; ++index) {
    NvmlDevice device = nullptr;
    if (nvml.call<NvmlReturn (*)(unsigned, NvmlDevice*)>("nvmlDeviceGetHandleByIndex_v2", index,
                                                         &device) != kNvmlSuccess) {
      continue;
    }
    GpuHealth gpu;
    gpu.index = static_cast<int>(index);
    probe_device(nvml, device, gpu);
    system.gpus.push_back(std::move(gpu));
    devices.push_back(device);
  }
  // nvmlGpuTopologyLevel_t between every pair: 0 internal, 10 single, 20 multiple, 30 host
  // bridge, 40 node, 50 system.
  system.nvml_topology.assign(devices.size(), std::vector<int>(devices.size(), -1));
  for (std::size_t i = 0; i < devices.size(); ++i) {
    for (std::size_t j = 0; j < devices.size(); ++j) {
      int level = -1;
      if (i != j && nvml.call<NvmlReturn (*)(NvmlDevice, NvmlDevice, int*)>(
                        "nvmlDeviceGetTopologyCommonAncestor", devices[i], devices[j], &level) ==
                        kNvmlSuccess) {
        system.nvml_topology[i][j] = level;
      }
    }
  }
}

}  // namespace

void probe_gpu_system(Report& report, const ProbeOptions& options) {
  try {
    report.nccl_backend = resolve_backend(BackendChoice::automatic) == BackendChoice::nccl;
  } catch (const std::exception& error) {
    report.probe_problems.push_back(std::string("choosing the backend failed: ") + error.what());
  }
  GpuSystem& system = report.gpu_system;
  probe_nvml(system, options.nvml_library.empty() ? std::string("libnvidia-ml.so.1")
                                                  : options.nvml_library);
  probe_sysfs(system, options.sysfs_root.empty() ? fs::path("/") : fs::path(options.sysfs_root));
}

}  // namespace cohort::doctor
