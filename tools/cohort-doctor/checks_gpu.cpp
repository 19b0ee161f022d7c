// Checks on the GPUs: count, architecture, compute mode, managed memory, peer access.

#include "checks.hpp"
#include "checks_util.hpp"

#include <charconv>
#include <map>
#include <utility>

namespace cohort::doctor {

std::string_view to_string(ComputeMode mode) noexcept {
  switch (mode) {
    case ComputeMode::default_mode:
      return "default";
    case ComputeMode::exclusive_process:
      return "exclusive-process";
    case ComputeMode::prohibited:
      return "prohibited";
    case ComputeMode::unknown:
      return "unknown";
  }
  return "unknown";
}

Finding check_gpu_count(int gpu_count, std::string_view unavailable_reason, bool built_with_cuda) {
  Finding finding{Severity::ok, "GPUs", "", ""};
  if (gpu_count > 0) {
    finding.message = std::to_string(gpu_count) + (gpu_count == 1 ? " GPU" : " GPUs") + " usable";
    return finding;
  }
  finding.severity = Severity::info;
  finding.message =
      "No GPU. Reason: " + std::string(unavailable_reason) +
      ". cohort runs on the host backend (host memory; shared memory between the ranks of a "
      "host, Gloo over TCP between hosts)";
  if (!built_with_cuda) {
    finding.advice = "to train on GPUs, rebuild with a CUDA toolkit and -DCOHORT_WITH_CUDA=ON";
  }
  return finding;
}

namespace {

/// One entry of CMake's CUDA_ARCHITECTURES: "90", "90-real", "90a-virtual", "100f".
struct Architecture {
  int major = 0;
  int minor = 0;
  char suffix = '\0';    // 'a' (only this exact GPU), 'f' (this family) or none
  bool real = true;      // SASS
  bool virtual_ = true;  // PTX
};

std::optional<Architecture> parse_architecture(std::string_view token) {
  Architecture architecture;
  if (token.ends_with("-real")) {
    architecture.virtual_ = false;
    token.remove_suffix(5);
  } else if (token.ends_with("-virtual")) {
    architecture.real = false;
    token.remove_suffix(8);
  }
  if (!token.empty() && (token.back() == 'a' || token.back() == 'f')) {
    architecture.suffix = token.back();
    token.remove_suffix(1);
  }
  int number = 0;
  const auto [rest, error] = std::from_chars(token.data(), token.data() + token.size(), number);
  if (error != std::errc() || rest != token.data() + token.size() || number < 10) {
    return std::nullopt;
  }
  architecture.major = number / 10;
  architecture.minor = number % 10;
  return architecture;
}

std::vector<std::string_view> split_architectures(std::string_view list) {
  std::vector<std::string_view> tokens;
  std::size_t start = 0;
  while (start <= list.size()) {
    const std::size_t end = list.find_first_of(";, ", start);
    const std::string_view token =
        list.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start);
    if (!token.empty()) {
      tokens.push_back(token);
    }
    if (end == std::string_view::npos) {
      break;
    }
    start = end + 1;
  }
  return tokens;
}

std::string sm_name(int major, int minor) {
  return "sm_" + std::to_string(major) + std::to_string(minor);
}

}  // namespace

Finding check_gpu_architecture(const GpuInfo& gpu, std::string_view architectures) {
  Finding finding{Severity::ok, "GPU" + std::to_string(gpu.index) + " architecture", "", ""};
  const std::string device = sm_name(gpu.compute_major, gpu.compute_minor);
  const std::string device_number =
      std::to_string(gpu.compute_major) + std::to_string(gpu.compute_minor);
  const auto tokens = split_architectures(architectures);
  if (tokens.empty() || architectures == "OFF") {
    finding.severity = Severity::info;
    finding.message = device + "; the architectures this build targets are unknown";
    return finding;
  }
  for (const std::string_view token : tokens) {
    if (token == "all" || token == "all-major") {
      finding.message =
          device + ": this build targets every architecture (" + std::string(token) + ")";
      return finding;
    }
    if (token == "native") {
      finding.severity = Severity::info;
      finding.message = device +
                        ": this build targets the GPUs of the machine it was built on "
                        "(native); it runs here only if they were the same kind";
      return finding;
    }
  }
  std::optional<Architecture> binary;
  std::optional<Architecture> ptx;
  for (const std::string_view token : tokens) {
    const auto parsed = parse_architecture(token);
    if (!parsed) {
      continue;
    }
    const Architecture& entry = *parsed;
    const bool exact = entry.major == gpu.compute_major && entry.minor == gpu.compute_minor;
    const bool same_family = entry.major == gpu.compute_major && entry.minor <= gpu.compute_minor;
    if (entry.real && (exact || (entry.suffix != 'a' && same_family))) {
      if (!binary || exact) {
        binary = entry;
      }
    }
    const bool newer_device = gpu.compute_major > entry.major || same_family;
    const bool ptx_runs = entry.suffix == 'a'   ? exact
                          : entry.suffix == 'f' ? same_family
                                                : newer_device;
    if (entry.virtual_ && ptx_runs) {
      ptx = entry;
    }
  }
  const std::string built = "built for " + std::string(architectures);
  if (binary) {
    finding.message = device + ": " + built;
    if (binary->major != gpu.compute_major || binary->minor != gpu.compute_minor) {
      finding.message += " (runs the " + sm_name(binary->major, binary->minor) + " binary)";
    }
    return finding;
  }
  if (ptx) {
    finding.severity = Severity::info;
    finding.message = device + ": " + built + "; no " + device +
                      " binary, so the driver compiles the compute_" + std::to_string(ptx->major) +
                      std::to_string(ptx->minor) +
                      " PTX at first use (slower start, possibly slower kernels)";
    finding.advice = "add " + device_number + " to CMAKE_CUDA_ARCHITECTURES";
    return finding;
  }
  finding.severity = Severity::error;
  finding.message = device + ": " + built +
                    ", which has no kernels this GPU can run (kernel "
                    "launches fail with cudaErrorNoKernelImageForDevice)";
  finding.advice = "rebuild with -DCMAKE_CUDA_ARCHITECTURES=" + device_number;
  return finding;
}

Finding check_compute_mode(const GpuInfo& gpu) {
  Finding finding{Severity::ok, "GPU" + std::to_string(gpu.index) + " compute mode", "", ""};
  finding.message = std::string(to_string(gpu.compute_mode));
  if (gpu.compute_mode == ComputeMode::prohibited) {
    finding.severity = Severity::error;
    finding.message = "compute mode is prohibited: no process can use this GPU";
    finding.advice = "as root: nvidia-smi -i " + std::to_string(gpu.index) + " -c DEFAULT";
  } else if (gpu.compute_mode == ComputeMode::exclusive_process) {
    finding.severity = Severity::info;
    finding.message = "compute mode is exclusive-process: one process (one rank) per GPU";
  }
  return finding;
}

Finding check_managed_memory(const GpuInfo& gpu) {
  Finding finding{Severity::ok, "GPU" + std::to_string(gpu.index) + " managed memory", "", ""};
  const std::string pageable = gpu.pageable_memory_access
                                   ? "; it can also read pageable host memory (HMM/ATS)"
                                   : "; it cannot read pageable host memory (no HMM/ATS)";
  if (gpu.concurrent_managed_access) {
    finding.message =
        "concurrent managed access: CPU and GPU may use managed memory at the same "
        "time, and prefetch/advise hints work" +
        pageable;
    return finding;
  }
  finding.severity = Severity::warn;
  finding.message =
      "no concurrent managed access: the CPU must not touch managed memory while "
      "kernels run (it faults), and prefetch/advise hints are ignored" +
      pageable;
  finding.advice =
      "keep parameters and gradients in device memory (cohort's device memory "
      "resource) rather than managed memory on this machine";
  return finding;
}

std::vector<Finding> check_peer_access(int gpu_count, std::span<const PeerLink> links) {
  if (gpu_count < 2) {
    return {};
  }
  std::map<std::pair<int, int>, const PeerLink*> by_pair;
  for (const PeerLink& link : links) {
    by_pair[{link.from, link.to}] = &link;
  }
  std::string missing;
  int missing_count = 0;
  for (int from = 0; from < gpu_count; ++from) {
    for (int to = from + 1; to < gpu_count; ++to) {
      const auto forward = by_pair.find({from, to});
      const auto backward = by_pair.find({to, from});
      const bool both = forward != by_pair.end() && forward->second->access &&
                        backward != by_pair.end() && backward->second->access;
      if (!both) {
        if (!missing.empty()) {
          missing += ", ";
        }
        missing += "GPU" + std::to_string(from) + "-GPU" + std::to_string(to);
        ++missing_count;
      }
    }
  }
  if (missing_count == 0) {
    return {Finding{Severity::ok, "peer access",
                    "every pair of the " + std::to_string(gpu_count) +
                        " GPUs can access each other's memory directly",
                    ""}};
  }
  return {Finding{Severity::warn, "peer access",
                  std::to_string(missing_count) +
                      (missing_count == 1 ? " pair of GPUs has" : " pairs of GPUs have") +
                      " no peer access (" + missing +
                      "): NCCL sends their traffic through host memory, several times slower",
                  "check `nvidia-smi topo -m`; on bare metal disable PCIe ACS and set the IOMMU "
                  "to passthrough; in a VM enable peer-to-peer in the hypervisor; do not set "
                  "NCCL_P2P_DISABLE"}};
}

Finding check_ranks_per_gpu(int local_world_size, int gpu_count, const EnvMap& environment) {
  Finding finding{Severity::ok, "ranks per GPU", "", ""};
  if (gpu_count <= 0) {
    finding.severity = Severity::info;
    finding.message = "no GPU: ranks on this node use the host backend";
    return finding;
  }
  const std::string counts = std::to_string(local_world_size) + " rank" +
                             (local_world_size == 1 ? "" : "s") + " on this node, " +
                             std::to_string(gpu_count) + " GPU" + (gpu_count == 1 ? "" : "s");
  if (local_world_size <= gpu_count) {
    finding.message = counts + ": one GPU per rank";
    return finding;
  }
  if (detail::switched_on(environment, "NCCL_MULTI_RANK_GPU_ENABLE") ||
      detail::cohort_switch_on(environment, env::kAllowSharedGpu)) {
    finding.severity = Severity::info;
    finding.message = counts +
                      ": ranks share GPUs, as NCCL_MULTI_RANK_GPU_ENABLE or "
                      "COHORT_ALLOW_SHARED_GPU asks (experimental, for tests)";
    return finding;
  }
  finding.severity = Severity::error;
  finding.message = counts +
                    ": ranks would share a GPU, which NCCL refuses (\"Duplicate GPU "
                    "detected\" or \"Multiple Ranks are using the same GPU\")";
  finding.advice = "start at most " + std::to_string(gpu_count) +
                   " ranks per node (cohortrun --nproc-per-node " + std::to_string(gpu_count) +
                   "), or check CUDA_VISIBLE_DEVICES";
  return finding;
}

}  // namespace cohort::doctor
