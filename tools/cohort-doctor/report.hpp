#pragma once

/// @file
/// Everything cohort-doctor learns about a machine (filled by the probes), the findings drawn
/// from it, and the two ways of printing both: text for people, JSON for scripts.

#include "checks.hpp"

#include <nlohmann/json.hpp>

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace cohort::doctor {

/// A library's version as loaded at run time and as compiled against.
struct LibraryVersion {
  std::string name;  ///< "NCCL", "cuBLAS", "cuDNN"
  std::optional<Version> loaded;
  std::optional<Version> compiled;
};

/// The facts. Probes fill it; nothing in it is a judgement.
struct Report {
  std::string cohort_version;
  bool built_with_cuda = false;
  std::string cuda_architectures;  ///< CMAKE_CUDA_ARCHITECTURES of this build

  int cuda_runtime_code = 0;  ///< cudaRuntimeGetVersion; 0 without CUDA
  int cuda_driver_code = 0;   ///< cudaDriverGetVersion; 0 without a driver
  std::vector<LibraryVersion> libraries;

  int gpu_count = 0;
  /// `resolve_backend(BackendChoice::automatic)` picked NCCL (a program that lets cohort choose
  /// runs on the GPUs).
  bool nccl_backend = false;
  std::string gpu_unavailable_reason;  ///< cuda_unavailable_reason() when gpu_count is 0
  std::vector<GpuInfo> gpus;
  std::vector<PeerLink> peer_links;  ///< every ordered pair of distinct GPUs
  std::string nvlink_note;           ///< what is known about NVLink, and how

  EnvMap environment;  ///< the whole process environment

  std::string hostname;
  std::optional<std::string> hostname_address;  ///< IPv4 the host name resolves to
  int cpu_cores_online = 0;
  int cpu_cores_usable = 0;  ///< in this process's affinity mask (containers, taskset)
  std::vector<NetworkInterface> interfaces;

  std::optional<FileSystemSize> shm;  ///< /dev/shm; nullopt when absent
  ResourceLimit memlock;
  ResourceLimit stack;

  /// Probes that failed (a CUDA call returning an error), in words; each becomes a warning.
  std::vector<std::string> probe_problems;

  HostInventory inventory;
  RendezvousFacts rendezvous;
  GpuSystem gpu_system;  ///< NVML and sysfs

  /// `--collective`: what each collective measured across the ranks, and the floor it is held to.
  std::vector<CollectiveResult> collectives;
  double busbw_floor_gbps = 0.0;
};

/// The version of the loaded NCCL, when there is one.
std::optional<Version> loaded_nccl(const Report& report);

/// Runs every check over the report, in the order the text shows them.
std::vector<Finding> diagnose(const Report& report);

/// The facts every node should share (for `check_nodes_agree`): cohort version, driver, CUDA,
/// NCCL, GPU count and names, CPU model, kernel.
std::map<std::string, std::string> fingerprint(const Report& report);

/// The human-readable report: facts by section, then the findings with advice, then a summary.
std::string render_text(const Report& report, const std::vector<Finding>& findings);

/// The same as one JSON object (keys: cohort_version, built_with_cuda, cuda_architectures,
/// versions, gpu_count, gpu_unavailable_reason, gpus, topology, launcher, environment, host,
/// limits, findings, summary, exit_status).
nlohmann::ordered_json to_json(const Report& report, const std::vector<Finding>& findings);

}  // namespace cohort::doctor
