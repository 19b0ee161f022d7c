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

  append(check_environment(report.environment, loaded_nccl(report)));

  if (report.built_with_cuda) {
    findings.push_back(check_nccl_socket(report.environment, report.interfaces, launch.num_nodes,
                                         report.gpu_count > 0));
  }
  findings.push_back(check_gloo_socket(report.environment, report.interfaces,
                                       report.hostname_address, launch.num_nodes));

  for (const std::string& problem : report.probe_problems) {
    findings.push_back(Finding{Severity::warn, "probe", problem,
                               "the facts above may be incomplete; rerun with "
                               "COHORT_LOG_LEVEL=debug and NCCL_DEBUG=WARN"});
  }
  findings.push_back(check_shm(report.shm));
  findings.push_back(check_memlock(report.memlock));
  findings.push_back(check_stack(report.stack, loaded_nccl(report)));
  return findings;
}

}  // namespace cohort::doctor
