// diagnose(): every check over one report.

#include "report.hpp"

#include <algorithm>

namespace cohort::doctor {

std::optional<Version> loaded_nccl(const Report& report) {
  const auto found =
      std::find_if(report.libraries.begin(), report.libraries.end(),
                   [](const LibraryVersion& library) { return library.name == "NCCL"; });
  return found == report.libraries.end() ? std::nullopt : found->loaded;
}

std::vector<Finding> diagnose(const Report& report) {
  std::vector<Finding> findings;
  const auto append = [&findings](std::vector<Finding> more) {
    findings.insert(findings.end(), std::make_move_iterator(more.begin()),
                    std::make_move_iterator(more.end()));
  };

  if (report.built_with_cuda) {
    findings.push_back(check_cuda_driver(report.cuda_driver_code, report.cuda_runtime_code));
    for (const LibraryVersion& library : report.libraries) {
      findings.push_back(check_library_version(library.name, library.loaded, library.compiled));
    }
  } else {
    // The GPU finding below says how to get the CUDA backend.
    findings.push_back(Finding{Severity::info, "build",
                               "cohort was built without CUDA (COHORT_WITH_CUDA=OFF): only the "
                               "host backend is available",
                               ""});
  }

  findings.push_back(
      check_gpu_count(report.gpu_count, report.gpu_unavailable_reason, report.built_with_cuda));
  for (const GpuInfo& gpu : report.gpus) {
    findings.push_back(check_gpu_architecture(gpu, report.cuda_architectures));
    findings.push_back(check_compute_mode(gpu));
    findings.push_back(check_managed_memory(gpu));
  }
  append(check_peer_access(report.gpu_count, report.peer_links));

  const LaunchCheck launch = check_launch(report.environment);
  findings.push_back(launch.finding);
  findings.push_back(
      check_ranks_per_gpu(launch.local_world_size, report.gpu_count, report.environment));
  append(check_library_settings(report.environment));
  const TransportCheck transport = check_transport(report.environment, report.nccl_backend);
  findings.push_back(transport.backend);
  findings.push_back(transport.store);
  findings.push_back(
      check_rendezvous(report.rendezvous, launch.num_nodes, transport.store_expected_up));

  append(check_environment(report.environment, loaded_nccl(report)));

  if (report.built_with_cuda) {
    findings.push_back(check_nccl_socket(report.environment, report.interfaces, launch.num_nodes,
                                         report.gpu_count > 0));
  }
  findings.push_back(check_gloo_socket(report.environment, report.interfaces,
                                       report.hostname_address, launch.num_nodes));

  // GPU and network health, from NVML and sysfs.
  const GpuSystem& system = report.gpu_system;
  if (system.nvml_loaded || system.nvidia_pci_devices > 0 || report.gpu_count > 0) {
    findings.push_back(check_nvml(system, report.gpu_count));
  }
  for (const GpuHealth& gpu : system.gpus) {
    findings.push_back(check_pcie(gpu));
    if (auto nvlinks = check_nvlinks(gpu)) findings.push_back(std::move(*nvlinks));
    findings.push_back(check_ecc(gpu));
    if (auto remap = check_row_remapping(gpu)) findings.push_back(std::move(*remap));
    findings.push_back(check_throttle(gpu));
    append(check_gpu_modes(gpu));
  }
  append(check_infiniband(system.nics, launch.num_nodes));
  if (auto gdr = check_gpudirect(system)) findings.push_back(std::move(*gdr));

  for (const std::string& problem : report.probe_problems) {
    findings.push_back(Finding{Severity::warn, "probe", problem,
                               "the facts above may be incomplete; rerun with "
                               "COHORT_LOG_LEVEL=debug and NCCL_DEBUG=WARN"});
  }
  findings.push_back(check_shm(report.shm));
  findings.push_back(check_memlock(report.memlock));
  findings.push_back(check_stack(report.stack, loaded_nccl(report)));
  append(check_collectives(report.collectives, report.busbw_floor_gbps));
  return findings;
}

std::map<std::string, std::string> fingerprint(const Report& report) {
  std::map<std::string, std::string> facts;
  facts["cohort"] = report.cohort_version;
  if (report.built_with_cuda) {
    facts["CUDA runtime"] = cuda_version_from_code(report.cuda_runtime_code).to_string(false);
  }
  if (const auto nccl = loaded_nccl(report)) facts["NCCL"] = nccl->to_string();
  if (!report.gpu_system.driver_version.empty()) facts["driver"] = report.gpu_system.driver_version;
  std::string gpus = std::to_string(report.gpu_system.gpus.size());
  for (const GpuHealth& gpu : report.gpu_system.gpus) gpus += " " + gpu.name;
  facts["GPUs"] = report.gpu_system.nvml_loaded ? gpus : std::to_string(report.gpu_count);
  facts["CPU"] = report.inventory.cpu_model;
  facts["kernel"] = report.inventory.kernel;
  return facts;
}

}  // namespace cohort::doctor
