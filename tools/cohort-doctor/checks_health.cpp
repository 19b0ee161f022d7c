// Checks of GPU and network health from NVML and sysfs facts: PCIe links, NVLinks, ECC, row
// remapping, throttling, persistence and MIG, InfiniBand ports, GPUDirect RDMA, and the link
// matrix.

#include "checks.hpp"

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>

namespace cohort::doctor {

namespace {

std::string gpu_topic(const GpuHealth& gpu, std::string_view what) {
  return "GPU" + std::to_string(gpu.index) + " " + std::string(what);
}

/// "pci0000:3a/0000:3a:00.0/0000:3b:00.0" split at '/'.
std::vector<std::string_view> components(std::string_view path) {
  std::vector<std::string_view> parts;
  while (!path.empty()) {
    const std::size_t slash = path.find('/');
    const std::string_view part = path.substr(0, slash);
    if (!part.empty()) parts.push_back(part);
    if (slash == std::string_view::npos) break;
    path.remove_prefix(slash + 1);
  }
  return parts;
}

std::string lower(std::string_view text) {
  std::string result(text);
  for (char& c : result) {
    if (c >= 'A' && c <= 'F') c = static_cast<char>(c - 'A' + 'a');
  }
  return result;
}

}  // namespace

std::vector<std::string> throttle_reason_names(std::uint64_t reasons) {
  // NVML's nvmlClocksThrottleReason* (nvmlClocksEventReason*) bits.
  static const std::pair<std::uint64_t, const char*> kNames[] = {
      {0x2, "application clocks setting"}, {0x4, "software power cap"},
      {0x8, "hardware slowdown"},          {0x10, "sync boost"},
      {0x20, "software thermal slowdown"}, {0x40, "hardware thermal slowdown"},
      {0x80, "hardware power brake"},      {0x100, "display clock setting"}};
  std::vector<std::string> names;
  for (const auto& [bit, name] : kNames) {
    if ((reasons & bit) != 0) names.emplace_back(name);
  }
  return names;
}

std::string pci_relation(std::string_view path_a, int numa_a, std::string_view path_b, int numa_b) {
  if (path_a.empty() || path_b.empty()) return "?";
  const auto a = components(path_a);
  const auto b = components(path_b);
  if (a.empty() || b.empty()) return "?";
  if (a.front() != b.front()) {  // different root complexes (host bridges)
    if (numa_a < 0 || numa_b < 0) return "SYS";
    return numa_a == numa_b ? "NODE" : "SYS";
  }
  std::size_t common = 0;
  while (common < a.size() && common < b.size() && a[common] == b[common]) ++common;
  if (common <= 1) return "PHB";  // they meet at the root complex only
  // They meet at a bridge: one switch when each is at most two levels below it (a downstream
  // port and the device), else several bridges.
  const std::size_t below_a = a.size() - common;
  const std::size_t below_b = b.size() - common;
  return below_a <= 2 && below_b <= 2 ? "PIX" : "PXB";
}

std::vector<std::vector<std::string>> link_matrix(const GpuSystem& system) {
  const std::size_t gpus = system.gpus.size();
  std::map<std::string, std::size_t> by_bus;
  for (std::size_t i = 0; i < gpus; ++i) by_bus[lower(system.gpus[i].pci_bus_id)] = i;
  std::vector<std::vector<std::string>> matrix(gpus);
  for (std::size_t i = 0; i < gpus; ++i) {
    const GpuHealth& from = system.gpus[i];
    std::map<std::size_t, int> links_to;
    int switch_links = 0;
    for (const NvLink& link : from.nvlinks) {
      if (!link.active) continue;
      if (link.remote_is_switch) {
        ++switch_links;
        continue;
      }
      const auto found = by_bus.find(lower(link.remote_bus_id));
      if (found != by_bus.end()) ++links_to[found->second];
    }
    for (std::size_t j = 0; j < gpus; ++j) {
      if (i == j) {
        matrix[i].push_back("X");
        continue;
      }
      const GpuHealth& to = system.gpus[j];
      int links = links_to.count(j) != 0 ? links_to[j] : 0;
      if (links == 0 && switch_links > 0) {
        // Through an NVSwitch: as nvidia-smi shows it, the links this GPU has to the switches,
        // when the other GPU has some too.
        const bool other_on_switch =
            std::any_of(to.nvlinks.begin(), to.nvlinks.end(),
                        [](const NvLink& l) { return l.active && l.remote_is_switch; });
        if (other_on_switch) links = switch_links;
      }
      if (links > 0) {
        matrix[i].push_back("NV" + std::to_string(links));
        continue;
      }
      std::string relation = pci_relation(from.pci_path, from.numa_node, to.pci_path, to.numa_node);
      if (relation == "?" && i < system.nvml_topology.size() &&
          j < system.nvml_topology[i].size()) {
        switch (system.nvml_topology[i][j]) {
          case 10:
            relation = "PIX";
            break;
          case 20:
            relation = "PXB";
            break;
          case 30:
            relation = "PHB";
            break;
          case 40:
            relation = "NODE";
            break;
          case 50:
            relation = "SYS";
            break;
          default:
            break;
        }
      }
      matrix[i].push_back(relation);
    }
    for (const Nic& nic : system.nics) {
      matrix[i].push_back(pci_relation(from.pci_path, from.numa_node, nic.pci_path, nic.numa_node));
    }
  }
  return matrix;
}

Finding check_nvml(const GpuSystem& system, int cuda_gpu_count) {
  Finding finding{Severity::ok, "NVML", "", ""};
  if (system.nvml_loaded) {
    finding.message = "driver " + system.driver_version + ", NVML " + system.nvml_version + ", " +
                      std::to_string(system.gpus.size()) + " GPU(s)";
    if (system.nvidia_pci_devices > static_cast<int>(system.gpus.size())) {
      finding.severity = Severity::warn;
      finding.message += "; the PCI bus has " + std::to_string(system.nvidia_pci_devices) +
                         " NVIDIA GPUs: the driver does not see them all";
      finding.advice =
          "check `dmesg` for NVRM errors and `nvidia-smi -q`; a GPU that fell off "
          "the bus needs a reset or a reboot";
    }
    return finding;
  }
  finding.message = "NVML is not available: " + system.nvml_problem;
  if (system.nvidia_pci_devices > 0) {
    // A warning, not an error: a container started without its GPUs (no --gpus) sees the host's
    // PCI bus but not its driver, and trains on host ranks as it should.
    finding.severity = Severity::warn;
    finding.message += "; yet the PCI bus has " + std::to_string(system.nvidia_pci_devices) +
                       " NVIDIA GPU(s): the driver is missing or not loaded, or this container "
                       "was started without them";
    finding.advice =
        "install or load the NVIDIA driver (nvidia-smi must work); in a container, "
        "start it with --gpus all (the NVIDIA Container Toolkit)";
  } else if (cuda_gpu_count > 0) {
    finding.severity = Severity::warn;
    finding.message += "; CUDA sees GPUs, so their health (ECC, links, clocks) is not checked";
    finding.advice =
        "make libnvidia-ml.so.1 visible (in containers: the NVIDIA container toolkit "
        "with the utility capability)";
  } else {
    finding.severity = Severity::info;
    finding.message += "; no NVIDIA GPU on the PCI bus";
  }
  return finding;
}

Finding check_pcie(const GpuHealth& gpu) {
  Finding finding{Severity::ok, gpu_topic(gpu, "PCIe"), "", ""};
  if (!gpu.pcie) {
    finding.severity = Severity::info;
    finding.message = "link unknown (NVML could not say)";
    return finding;
  }
  const PcieLink& link = *gpu.pcie;
  const auto words = [](int gen, int width) {
    return "Gen" + std::to_string(gen) + " x" + std::to_string(width);
  };
  finding.message = words(link.generation, link.width) + " (at most " +
                    words(link.max_generation, link.max_width) + ")";
  if (link.max_width > 0 && link.width > 0 && link.width < link.max_width) {
    finding.severity = Severity::warn;
    finding.message += ": the link trained at " + std::to_string(link.width) + " of " +
                       std::to_string(link.max_width) +
                       " lanes, a fraction of the bandwidth to the host and to NICs";
    finding.advice = "reseat the GPU or its riser, or report the node to the provider";
  } else if (link.max_generation > 0 && link.generation > 0 &&
             link.generation < link.max_generation) {
    finding.severity = Severity::info;
    finding.message += ": below its maximum generation now; GPUs lower it when idle";
    finding.advice = "look again under load (nvidia-smi -q -d PCIE): it must reach Gen" +
                     std::to_string(link.max_generation);
  }
  return finding;
}

std::optional<Finding> check_nvlinks(const GpuHealth& gpu) {
  if (gpu.nvlinks.empty()) return std::nullopt;
  int active = 0;
  std::string down;
  for (const NvLink& link : gpu.nvlinks) {
    if (link.active) {
      ++active;
    } else {
      if (!down.empty()) down += ", ";
      down += std::to_string(link.link);
    }
  }
  Finding finding{
      Severity::ok, gpu_topic(gpu, "NVLink"),
      std::to_string(active) + " of " + std::to_string(gpu.nvlinks.size()) + " links active", ""};
  if (active > 0 && !down.empty()) {
    finding.severity = Severity::warn;
    finding.message += "; link(s) " + down + " down: less bandwidth to the GPUs behind them";
    finding.advice = "nvidia-smi nvlink --status -i " + std::to_string(gpu.index) +
                     "; a link down on an NVSwitch system needs the fabric manager or the "
                     "provider";
  } else if (active == 0) {
    finding.severity = Severity::info;
    finding.message = "no NVLink active: GPUs talk over PCIe";
  }
  return finding;
}

Finding check_ecc(const GpuHealth& gpu) {
  Finding finding{Severity::ok, gpu_topic(gpu, "ECC"), "", ""};
  if (!gpu.ecc_enabled) {
    finding.severity = Severity::info;
    finding.message = "ECC not supported or unknown";
    return finding;
  }
  if (!*gpu.ecc_enabled) {
    finding.severity = Severity::warn;
    finding.message = "ECC is off: memory errors go unnoticed";
    finding.advice = "as root: nvidia-smi -i " + std::to_string(gpu.index) + " -e 1, then reboot";
    return finding;
  }
  const auto count = [](const std::optional<std::uint64_t>& value) {
    return value ? std::to_string(*value) : std::string("?");
  };
  finding.message = "on; uncorrected errors " + count(gpu.ecc_uncorrected_volatile) +
                    " since the driver loaded, " + count(gpu.ecc_uncorrected_aggregate) +
                    " ever; corrected " + count(gpu.ecc_corrected_volatile) + " since load";
  if (gpu.ecc_uncorrected_volatile.value_or(0) > 0) {
    finding.severity = Severity::error;
    finding.message += ": this GPU has lost data since the driver loaded";
    finding.advice =
        "do not train on it: drain the node and report it (a reset may retire the "
        "rows)";
  } else if (gpu.ecc_uncorrected_aggregate.value_or(0) > 0) {
    finding.severity = Severity::warn;
    finding.message += ": uncorrected errors in its history";
    finding.advice = "watch it; check the remapped rows below";
  }
  return finding;
}

std::optional<Finding> check_row_remapping(const GpuHealth& gpu) {
  if (!gpu.remap_supported) return std::nullopt;
  Finding finding{Severity::ok, gpu_topic(gpu, "remapped rows"),
                  std::to_string(gpu.remapped_correctable) + " for correctable and " +
                      std::to_string(gpu.remapped_uncorrectable) + " for uncorrectable errors",
                  ""};
  if (gpu.remap_failure) {
    finding.severity = Severity::error;
    finding.message += "; a remapping FAILED: the GPU has no spare rows left";
    finding.advice = "replace the GPU (report the node)";
  } else if (gpu.remap_pending) {
    finding.severity = Severity::warn;
    finding.message += "; a remapping is pending until the GPU is reset";
    finding.advice = "reset the GPU (nvidia-smi -r -i " + std::to_string(gpu.index) +
                     ") or reboot the node before training";
  }
  return finding;
}

Finding check_throttle(const GpuHealth& gpu) {
  Finding finding{Severity::ok, gpu_topic(gpu, "clocks"), "", ""};
  if (!gpu.throttle_reasons) {
    finding.severity = Severity::info;
    finding.message = "throttle reasons unknown";
    return finding;
  }
  const std::uint64_t reasons = *gpu.throttle_reasons;
  const auto names = throttle_reason_names(reasons);
  std::string list;
  for (const std::string& name : names) list += (list.empty() ? "" : ", ") + name;
  const std::uint64_t harmful = 0x8 | 0x20 | 0x40 | 0x80;
  if ((reasons & harmful) != 0) {
    finding.severity = Severity::warn;
    finding.message = "held down: " + list;
    finding.advice =
        "check cooling and power (nvidia-smi -q -d PERFORMANCE,TEMPERATURE,POWER); "
        "a GPU slowed this way slows every rank that waits for it";
    if (gpu.temperature_c) finding.message += " at " + std::to_string(*gpu.temperature_c) + " C";
    return finding;
  }
  finding.message = list.empty() ? ((reasons & 0x1) != 0 ? "idle, not held down" : "not held down")
                                 : "limited by " + list;
  if (gpu.temperature_c) finding.message += "; " + std::to_string(*gpu.temperature_c) + " C";
  return finding;
}

std::vector<Finding> check_gpu_modes(const GpuHealth& gpu) {
  std::vector<Finding> findings;
  if (gpu.persistence) {
    Finding f{Severity::ok, gpu_topic(gpu, "persistence"), *gpu.persistence ? "on" : "off", ""};
    if (!*gpu.persistence) {
      f.severity = Severity::info;
      f.message =
          "persistence mode off: the driver sets the GPU up again for each job (slower "
          "start)";
      f.advice = "as root: nvidia-smi -pm 1 (or run nvidia-persistenced)";
    }
    findings.push_back(std::move(f));
  }
  if (gpu.mig) {
    Finding f{Severity::ok, gpu_topic(gpu, "MIG"), *gpu.mig ? "on" : "off", ""};
    if (*gpu.mig) {
      f.severity = Severity::warn;
      f.message =
          "MIG is on: processes see GPU slices, and NCCL has no peer access between "
          "them";
      f.advice = "for data-parallel training on whole GPUs: nvidia-smi -i " +
                 std::to_string(gpu.index) + " -mig 0 (as root, GPU idle)";
    }
    findings.push_back(std::move(f));
  }
  return findings;
}

std::vector<Finding> check_infiniband(std::span<const Nic> nics, int num_nodes) {
  std::vector<Finding> findings;
  if (nics.empty()) return findings;
  int active = 0;
  int ports = 0;
  std::set<double> rates;
  std::string down;
  std::string list;
  for (const Nic& nic : nics) {
    for (const IbPort& port : nic.ports) {
      ++ports;
      const std::string name = nic.name + "/" + std::to_string(port.port);
      list += (list.empty() ? "" : ", ") + name + " " + port.state + " " + port.rate +
              (port.link_layer.empty() ? "" : " " + port.link_layer);
      if (port.state == "ACTIVE") {
        ++active;
        rates.insert(port.rate_gbps);
      } else {
        down +=
            (down.empty() ? "" : ", ") + name + " (" + port.state + ", " + port.phys_state + ")";
      }
    }
  }
  Finding ports_finding{Severity::ok, "RDMA ports", list, ""};
  if (!down.empty()) {
    ports_finding.severity = active == 0 && num_nodes > 1 ? Severity::error : Severity::warn;
    ports_finding.message = std::to_string(active) + " of " + std::to_string(ports) +
                            " ports active; not active: " + down;
    ports_finding.advice =
        "ibstat; a port in Polling has no link (cable, switch port), one in "
        "INIT waits for the subnet manager";
  }
  findings.push_back(std::move(ports_finding));
  if (rates.size() > 1) {
    char text[96];
    std::snprintf(text, sizeof(text), "active ports run at different rates (%.0f to %.0f Gb/s)",
                  *rates.begin(), *rates.rbegin());
    findings.push_back(Finding{Severity::warn, "RDMA rates", text,
                               "a port below the others' rate slows every ring through it: check "
                               "its cable and switch port"});
  }
  return findings;
}

std::optional<Finding> check_gpudirect(const GpuSystem& system) {
  if (system.nics.empty() || system.gpus.empty()) return std::nullopt;
  if (system.peer_memory_module) {
    return Finding{Severity::ok, "GPUDirect RDMA",
                   "peer-memory module " + *system.peer_memory_module +
                       " is loaded: NICs can read GPU memory directly",
                   ""};
  }
  return Finding{Severity::warn, "GPUDirect RDMA",
                 "no peer-memory module (nvidia_peermem) is loaded: NCCL stages GPU data through "
                 "host memory across nodes",
                 "as root: modprobe nvidia_peermem (or use a driver with DMA-BUF and NCCL 2.19+)"};
}

}  // namespace cohort::doctor
