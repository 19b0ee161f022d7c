// The report as text for people.

#include "report.hpp"

#include <algorithm>
#include <cstdio>
#include <map>
#include <sstream>
#include <utility>

namespace cohort::doctor {

namespace {

constexpr int kLabelWidth = 16;

void line(std::ostringstream& out, std::string_view label, std::string_view value) {
  out << "  " << label;
  for (auto pad = static_cast<int>(label.size()); pad < kLabelWidth; ++pad) {
    out << ' ';
  }
  out << value << '\n';
}

std::string describe_limit(const ResourceLimit& limit) {
  const auto text = [](std::optional<std::uint64_t> value) {
    return value ? format_bytes(*value) : std::string("unlimited");
  };
  return text(limit.soft) + " (hard limit " + text(limit.hard) + ")";
}

std::string library_text(const LibraryVersion& library) {
  if (!library.loaded) {
    return "not part of this build";
  }
  std::string text = library.loaded->to_string();
  if (library.compiled) {
    text += " (compiled against " + library.compiled->to_string() + ")";
  }
  return text;
}

void write_versions(std::ostringstream& out, const Report& report) {
  out << "\nVersions\n";
  if (!report.built_with_cuda) {
    line(out, "CUDA", "built without CUDA (COHORT_WITH_CUDA=OFF)");
    return;
  }
  line(out, "CUDA runtime", cuda_version_from_code(report.cuda_runtime_code).to_string(false));
  line(out, "CUDA driver",
       report.cuda_driver_code > 0
           ? "supports CUDA " + cuda_version_from_code(report.cuda_driver_code).to_string(false)
           : std::string("none installed"));
  for (const LibraryVersion& library : report.libraries) {
    line(out, library.name, library_text(library));
  }
}

void write_gpus(std::ostringstream& out, const Report& report) {
  out << "\nGPUs\n";
  if (report.gpu_count == 0) {
    out << "  No GPU. Reason: " << report.gpu_unavailable_reason << ".\n";
    return;
  }
  for (const GpuInfo& gpu : report.gpus) {
    out << "  GPU" << gpu.index << "  " << gpu.name << ", " << format_bytes(gpu.total_memory_bytes)
        << ", compute capability " << gpu.compute_major << '.' << gpu.compute_minor << ", "
        << gpu.multiprocessors << " multiprocessors, PCI " << gpu.pci_bus_id << ", compute mode "
        << to_string(gpu.compute_mode) << '\n';
    out << "        managed memory: concurrent access "
        << (gpu.concurrent_managed_access ? "yes" : "no") << ", pageable memory access "
        << (gpu.pageable_memory_access ? "yes" : "no") << '\n';
  }
}

void write_topology(std::ostringstream& out, const Report& report) {
  if (report.gpu_count == 0) {
    return;
  }
  out << "\nTopology (peer access between GPUs)\n";
  if (report.gpu_count == 1) {
    out << "  one GPU: no peers\n";
  } else {
    std::map<std::pair<int, int>, std::string> cells;
    std::size_t width = 5;
    for (const PeerLink& link : report.peer_links) {
      std::string cell = link.access ? "P2P/" + std::to_string(link.performance_rank) : "-";
      if (link.access && link.native_atomics) {
        cell += "+A";
      }
      width = std::max(width, cell.size() + 2);
      cells[{link.from, link.to}] = std::move(cell);
    }
    const auto pad = [&out, width](std::string_view text) {
      out << text << std::string(width > text.size() ? width - text.size() : 1, ' ');
    };
    out << "  ";
    pad("");
    for (int to = 0; to < report.gpu_count; ++to) {
      pad("GPU" + std::to_string(to));
    }
    out << '\n';
    for (int from = 0; from < report.gpu_count; ++from) {
      out << "  ";
      pad("GPU" + std::to_string(from));
      for (int to = 0; to < report.gpu_count; ++to) {
        const auto cell = cells.find({from, to});
        pad(from == to ? "X" : cell == cells.end() ? "?" : cell->second);
      }
      out << '\n';
    }
    out << "  P2P/n: peer access, performance rank n (lower is faster); +A: native atomics "
           "(usual over NVLink); -: none, traffic goes through host memory\n";
  }
  if (!report.nvlink_note.empty()) {
    out << "  NVLink: " << report.nvlink_note << '\n';
  }
}

void write_environment(std::ostringstream& out, const Report& report) {
  const LaunchCheck launch = check_launch(report.environment);
  out << "\nLaunch\n";
  line(out, "launcher", launch.launcher);
  line(out, "this process",
       launch.description.empty() ? launch.finding.message : launch.description);

  out << "\nEnvironment (NCCL_*, COHORT_*, GLOO_*, CUDA_VISIBLE_DEVICES...)\n";
  const EnvMap relevant = relevant_variables(report.environment);
  if (relevant.empty()) {
    out << "  none set\n";
  }
  for (const auto& [name, value] : relevant) {
    out << "  " << name << '=' << shown_value(name, value) << '\n';
  }

  const TransportCheck transport = check_transport(report.environment, report.nccl_backend);
  out << "\nWhat will run (the library's own decisions)\n";
  line(out, "collectives", transport.backend.message);
  line(out, "store", transport.store.message);
  const RendezvousFacts& r = report.rendezvous;
  if (r.host.empty()) {
    line(out, "rendezvous", "no address in play");
  } else {
    std::string addresses;
    for (const std::string& a : r.addresses) addresses += (addresses.empty() ? "" : ", ") + a;
    line(out, "rendezvous",
         r.host + ":" + std::to_string(r.port) + " (" + r.source + "): " +
             (addresses.empty() ? "does not resolve (" + r.resolve_error + ")"
                                : "resolves to " + addresses + "; TCP connect " +
                                      std::string(to_string(r.reach))));
  }
}

void write_inventory(std::ostringstream& out, const Report& report) {
  const HostInventory& inventory = report.inventory;
  out << "\nInventory\n";
  line(out, "CPU",
       inventory.cpu_model + ", " + std::to_string(inventory.sockets) + " socket(s), " +
           std::to_string(inventory.numa_nodes) + " NUMA node(s)");
  line(out, "memory",
       format_bytes(inventory.memory_total_bytes) + " (" +
           format_bytes(inventory.memory_available_bytes) + " available)");
  line(out, "OS", inventory.os.empty() ? std::string("unknown") : inventory.os);
  line(out, "kernel", inventory.kernel);
  line(out, "compiler", inventory.compiler);
  std::string libraries;
  for (const auto& [name, version] : inventory.libraries) {
    libraries += (libraries.empty() ? "" : ", ") + name + " " + version;
  }
  line(out, "libraries", libraries);
}

void write_gpu_system(std::ostringstream& out, const Report& report) {
  const GpuSystem& system = report.gpu_system;
  if (!system.nvml_loaded && system.nics.empty() && system.nvidia_pci_devices <= 0) {
    return;
  }
  out << "\nGPU and network health (NVML, sysfs)\n";
  if (system.nvml_loaded) {
    line(out, "driver", system.driver_version + " (NVML " + system.nvml_version + ")");
  } else {
    line(out, "NVML", system.nvml_problem);
  }
  for (const GpuHealth& gpu : system.gpus) {
    std::string pcie = "unknown";
    if (gpu.pcie) {
      pcie = "Gen" + std::to_string(gpu.pcie->generation) + " x" + std::to_string(gpu.pcie->width) +
             " of Gen" + std::to_string(gpu.pcie->max_generation) + " x" +
             std::to_string(gpu.pcie->max_width);
    }
    int active = 0;
    for (const NvLink& link : gpu.nvlinks) active += link.active ? 1 : 0;
    out << "  GPU" << gpu.index << "  " << gpu.name << ", " << gpu.pci_bus_id << ", PCIe " << pcie
        << ", NVLinks " << active << "/" << gpu.nvlinks.size() << " active, NUMA node "
        << gpu.numa_node << '\n';
  }
  const auto matrix = link_matrix(system);
  if (!matrix.empty()) {
    out << "  links (NV<n>: NVLinks; PIX one PCIe switch, PXB several bridges, PHB host bridge, "
           "NODE within a NUMA node, SYS across NUMA nodes)\n";
    const auto padded = [](const std::string& text, std::size_t width) {
      return text + std::string(text.size() < width ? width - text.size() : 1, ' ');
    };
    out << "        ";
    for (std::size_t j = 0; j < system.gpus.size(); ++j)
      out << padded("GPU" + std::to_string(j), 7);
    for (const Nic& nic : system.nics) out << padded(nic.name, 9);
    out << '\n';
    for (std::size_t i = 0; i < matrix.size(); ++i) {
      out << "  " << padded("GPU" + std::to_string(i), 6);
      for (std::size_t j = 0; j < matrix[i].size(); ++j) {
        out << padded(matrix[i][j], j < system.gpus.size() ? 7 : 9);
      }
      out << '\n';
    }
  }
  for (const Nic& nic : system.nics) {
    for (const IbPort& port : nic.ports) {
      out << "  " << nic.name << "/" << port.port << "  " << port.state << " (" << port.phys_state
          << "), " << port.rate << ", " << port.link_layer << ", PCI " << nic.pci_bus_id
          << ", NUMA node " << nic.numa_node << '\n';
    }
  }
  if (!system.nics.empty()) {
    line(out, "peer memory",
         system.peer_memory_module ? *system.peer_memory_module : std::string("no module loaded"));
  }
}

std::string interfaces_text(const Report& report) {
  std::string text;
  for (const NetworkInterface& interface : report.interfaces) {
    if (!text.empty()) {
      text += ", ";
    }
    text += interface.name + " " + interface.address;
    if (interface.loopback) {
      text += " (loopback)";
    } else if (!interface.up) {
      text += " (down)";
    }
  }
  return text.empty() ? std::string("no IPv4 interface") : text;
}

void write_host(std::ostringstream& out, const Report& report) {
  out << "\nHost\n";
  line(
      out, "hostname",
      report.hostname + (report.hostname_address ? " (resolves to " + *report.hostname_address + ")"
                                                 : std::string(" (does not resolve)")));
  line(out, "CPU cores",
       std::to_string(report.cpu_cores_usable) + " usable by this process, " +
           std::to_string(report.cpu_cores_online) + " online");
  line(out, "IPv4 interfaces", interfaces_text(report));
  if (report.built_with_cuda) {
    std::string names;
    for (const std::string& name : nccl_socket_interfaces(report.environment, report.interfaces)) {
      names += (names.empty() ? "" : ", ") + name;
    }
    line(out, "NCCL would use", names.empty() ? std::string("nothing") : names);
  }
  line(out, "/dev/shm",
       report.shm ? format_bytes(report.shm->total_bytes) + " (" +
                        format_bytes(report.shm->available_bytes) + " free)"
                  : std::string("missing"));
  line(out, "ulimit -l", describe_limit(report.memlock));
  line(out, "ulimit -s", describe_limit(report.stack));

  if (report.gpu_count == 0) {
    const LaunchCheck launch = check_launch(report.environment);
    const Finding gloo = check_gloo_socket(report.environment, report.interfaces,
                                           report.hostname_address, launch.num_nodes);
    out << "\nHost backend (used here, since there is no GPU)\n";
    line(out, "collectives",
         check_transport(report.environment, report.nccl_backend).backend.message);
    line(out, "compute",
         std::to_string(report.cpu_cores_usable) +
             " usable CPU cores, shared by the ranks on this node");
    line(out, "memory", "host memory");
    line(out, "network", gloo.message);
  }
}

std::string severity_tag(Severity severity) {
  switch (severity) {
    case Severity::ok:
      return "[ok]   ";
    case Severity::info:
      return "[info] ";
    case Severity::warn:
      return "[WARN] ";
    case Severity::error:
      return "[ERROR]";
  }
  return "[?]    ";
}

void write_findings(std::ostringstream& out, const std::vector<Finding>& findings) {
  out << "\nFindings\n";
  std::map<Severity, int> counts;
  for (const Finding& finding : findings) {
    ++counts[finding.severity];
    out << "  " << severity_tag(finding.severity) << ' ' << finding.topic << ": " << finding.message
        << '\n';
    if (!finding.advice.empty() && finding.severity != Severity::ok) {
      out << "          what to do: " << finding.advice << '\n';
    }
  }
  const int status = exit_status(findings);
  out << "\nSummary: " << counts[Severity::error] << " error(s), " << counts[Severity::warn]
      << " warning(s), " << counts[Severity::info] << " note(s), " << counts[Severity::ok]
      << " ok; exit status " << status << '\n';
}

}  // namespace

std::string render_text(const Report& report, const std::vector<Finding>& findings) {
  std::ostringstream out;
  out << "cohort-doctor: cohort " << report.cohort_version;
  if (report.built_with_cuda) {
    out << ", built with CUDA for architectures "
        << (report.cuda_architectures.empty() ? std::string("(unknown)")
                                              : report.cuda_architectures);
  } else {
    out << ", built without CUDA";
  }
  out << '\n';
  write_versions(out, report);
  write_gpus(out, report);
  write_topology(out, report);
  write_environment(out, report);
  write_host(out, report);
  write_inventory(out, report);
  write_gpu_system(out, report);
  write_findings(out, findings);
  return out.str();
}

}  // namespace cohort::doctor
