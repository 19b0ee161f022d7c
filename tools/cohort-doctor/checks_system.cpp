// Checks on the host: /dev/shm, resource limits, environment variables, launcher variables.

#include "checks.hpp"
#include "checks_util.hpp"

#include <cohort/core/error.hpp>
#include <cohort/core/logging.hpp>
#include <cohort/launch/launch_info.hpp>

#include <algorithm>
#include <cctype>

namespace cohort::doctor {

namespace {

constexpr std::uint64_t kLargeMemlockBytes = 16ULL << 30;

std::string describe_limit(std::optional<std::uint64_t> value) {
  return value ? format_bytes(*value) : std::string("unlimited");
}

std::string upper(std::string_view text) {
  std::string result(text);
  std::transform(result.begin(), result.end(), result.begin(),
                 [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  return result;
}

}  // namespace

Finding check_shm(std::optional<FileSystemSize> shm) {
  Finding finding{Severity::ok, "/dev/shm", "", ""};
  const std::string container_advice =
      "run the container with --shm-size=1g (or more) or --ipc=host; on Kubernetes mount an "
      "emptyDir with medium: Memory at /dev/shm";
  if (!shm) {
    finding.severity = Severity::warn;
    finding.message =
        "/dev/shm does not exist: NCCL's shared-memory transport between ranks on "
        "one node cannot work";
    finding.advice = container_advice + "; as a slower fallback set NCCL_SHM_DISABLE=1";
    return finding;
  }
  const std::string sizes =
      format_bytes(shm->total_bytes) + " (" + format_bytes(shm->available_bytes) + " free)";
  if (shm->total_bytes < kMinimumShmBytes) {
    finding.severity = Severity::warn;
    finding.message = "/dev/shm is " + sizes;
    if (shm->total_bytes == kDockerDefaultShmBytes) {
      finding.message += ", Docker's default";
    }
    finding.message +=
        ": NCCL needs more than that between ranks on one node and fails with "
        "\"failed to extend /dev/shm\" or \"No space left on device\"";
    finding.advice = container_advice;
  } else if (shm->available_bytes < kMinimumShmBytes) {
    finding.severity = Severity::warn;
    finding.message = "/dev/shm is " + sizes + ": almost full";
    finding.advice = "remove files left by crashed runs (/dev/shm/nccl-*) or give it more room";
  } else {
    finding.message = "/dev/shm is " + sizes;
  }
  return finding;
}

Finding check_memlock(ResourceLimit limit) {
  Finding finding{Severity::ok, "locked memory", "", ""};
  if (!limit.soft) {
    finding.message = "locked-memory limit (ulimit -l) is unlimited";
    return finding;
  }
  finding.message = "locked-memory limit (ulimit -l) is " + describe_limit(limit.soft) +
                    " (hard limit " + describe_limit(limit.hard) +
                    "): pinned host buffers and InfiniBand registration (NCCL over IB, GPUDirect "
                    "RDMA) fail or fall back to slower paths beyond it";
  finding.severity = *limit.soft >= kLargeMemlockBytes ? Severity::info : Severity::warn;
  if (!limit.hard || *limit.hard > *limit.soft) {
    finding.advice =
        "raise it before starting training: ulimit -l unlimited (the hard limit "
        "allows it)";
  } else {
    finding.advice =
        "Docker: --ulimit memlock=-1; Slurm/systemd: LimitMEMLOCK=infinity; "
        "elsewhere: '* - memlock unlimited' in /etc/security/limits.conf";
  }
  return finding;
}

Finding check_stack(ResourceLimit limit, std::optional<Version> nccl) {
  Finding finding{Severity::ok, "stack size", "", ""};
  if (limit.soft) {
    finding.message = "stack size limit (ulimit -s) is " + describe_limit(limit.soft);
    return finding;
  }
  const bool fixed = nccl && *nccl >= Version{2, 28, 0};
  if (fixed) {
    finding.severity = Severity::info;
    finding.message = "stack size limit (ulimit -s) is unlimited; NCCL " + nccl->to_string() +
                      " copes with that (older NCCL gave its threads 2 MB stacks)";
    return finding;
  }
  finding.severity = Severity::warn;
  finding.message = "stack size limit (ulimit -s) is unlimited: NCCL before 2.28" +
                    (nccl ? " (loaded: " + nccl->to_string() + ")" : std::string()) +
                    " then gives its threads 2 MB stacks, which can crash them";
  finding.advice = "use the default: ulimit -s 8192";
  return finding;
}

EnvMap relevant_variables(const EnvMap& environment) {
  EnvMap relevant;
  for (const auto& [name, value] : environment) {
    const bool prefixed =
        name.starts_with("NCCL_") || name.starts_with("COHORT_") || name.starts_with("GLOO_");
    const bool cuda = name == "CUDA_VISIBLE_DEVICES" || name == "CUDA_DEVICE_ORDER" ||
                      name == "CUDA_LAUNCH_BLOCKING";
    if (prefixed || cuda) {
      relevant.emplace(name, value);
    }
  }
  return relevant;
}

std::vector<Finding> check_environment(const EnvMap& environment, std::optional<Version> nccl) {
  using detail::lookup;
  using detail::switched_on;
  std::vector<Finding> findings;
  const auto add = [&findings](Severity severity, std::string topic, std::string message,
                               std::string advice) {
    findings.push_back(Finding{severity, std::move(topic), std::move(message), std::move(advice)});
  };

  if (switched_on(environment, "NCCL_P2P_DISABLE")) {
    add(Severity::warn, "NCCL_P2P_DISABLE",
        "GPU peer-to-peer (NVLink, PCIe) is off: traffic between GPUs of one node goes through "
        "host memory, several times slower",
        "unset NCCL_P2P_DISABLE; if it works around a hang, fix the cause (PCIe ACS, IOMMU)");
  }
  if (switched_on(environment, "NCCL_SHM_DISABLE")) {
    add(Severity::warn, "NCCL_SHM_DISABLE",
        "NCCL's shared-memory transport is off: where peer access is missing, traffic between "
        "ranks on one node falls back to sockets",
        "give the container enough /dev/shm (--shm-size=1g or --ipc=host) and unset "
        "NCCL_SHM_DISABLE");
  }
  if (switched_on(environment, "NCCL_IB_DISABLE")) {
    add(Severity::info, "NCCL_IB_DISABLE",
        "InfiniBand is off: traffic between nodes uses TCP sockets",
        "unset NCCL_IB_DISABLE on clusters with InfiniBand or RoCE");
  }
  if (const auto proto = lookup(environment, "NCCL_PROTO"); proto && !proto->empty()) {
    add(Severity::warn, "NCCL_PROTO",
        "NCCL_PROTO=" + *proto +
            " overrides NCCL's protocol choice; NCCL's documentation discourages it (LL128 on "
            "platforms that do not support it corrupts data)",
        "unset NCCL_PROTO outside of debugging");
  }
  if (const auto algo = lookup(environment, "NCCL_ALGO"); algo && !algo->empty()) {
    add(Severity::info, "NCCL_ALGO",
        "NCCL_ALGO=" + *algo + " overrides NCCL's algorithm choice (meant for diagnosis)",
        "unset it unless a measurement showed it helps");
  }
  if (const auto debug = lookup(environment, "NCCL_DEBUG")) {
    const std::string level = upper(*debug);
    if (level == "INFO" || level == "TRACE") {
      add(Severity::info, "NCCL_DEBUG",
          "NCCL_DEBUG=" + *debug + ": verbose NCCL logging (slower start, large logs)",
          "use NCCL_DEBUG=WARN in production");
    }
  }
  if (switched_on(environment, "NCCL_MULTI_RANK_GPU_ENABLE")) {
    if (nccl && *nccl < Version{2, 30, 0}) {
      add(Severity::warn, "NCCL_MULTI_RANK_GPU_ENABLE",
          "has no effect before NCCL 2.30 (loaded: " + nccl->to_string() +
              "): two ranks on one GPU still fail",
          "use NCCL 2.30 or newer, or one rank per GPU");
    } else {
      add(Severity::info, "NCCL_MULTI_RANK_GPU_ENABLE",
          "several ranks may share a GPU (experimental in NCCL, at most about 2 per GPU)", "");
    }
  }
  for (const char* name : {"NCCL_BLOCKING_WAIT", "NCCL_ASYNC_ERROR_HANDLING"}) {
    if (lookup(environment, name)) {
      add(Severity::info, name,
          std::string(name) + " is read by PyTorch, not by NCCL or cohort: it has no effect here",
          "cohort's collectives have their own deadlines");
    }
  }
  if (switched_on(environment, "CUDA_LAUNCH_BLOCKING")) {
    add(Severity::warn, "CUDA_LAUNCH_BLOCKING",
        "every kernel launch waits for the GPU: no overlap of computation and communication",
        "unset CUDA_LAUNCH_BLOCKING outside of debugging");
  }
  if (const auto visible = lookup(environment, "CUDA_VISIBLE_DEVICES");
      visible && visible->empty()) {
    add(Severity::warn, "CUDA_VISIBLE_DEVICES",
        "CUDA_VISIBLE_DEVICES is set but empty: it hides every GPU",
        "unset it, or list the GPUs to use (CUDA_VISIBLE_DEVICES=0,1)");
  }
  if (detail::cohort_switch_on(environment, env::kAllowSharedGpu)) {
    add(Severity::info, "COHORT_ALLOW_SHARED_GPU",
        "test hook: ranks may share a GPU (for single-GPU multi-rank tests, not for training)", "");
  }
  return findings;
}

LaunchCheck check_launch(const EnvMap& environment) {
  LaunchCheck check;
  check.finding.topic = "launcher";
  const EnvLookup env = [&environment](std::string_view name) {
    return detail::lookup(environment, name);
  };
  try {
    const LaunchInfo info = LaunchInfo::from_environment(env);
    check.launcher = std::string(to_string(info.launcher));
    check.description = info.describe();
    check.local_world_size = info.local_world_size;
    check.num_nodes = info.num_nodes;
    check.finding.message = info.launcher == Launcher::none
                                ? "no launcher detected: " + check.description
                                : check.description;
  } catch (const cohort::Error& error) {
    check.launcher = "unknown";
    check.finding.severity = Severity::error;
    check.finding.message =
        std::string("cohort would refuse the launch variables: ") + error.what();
    check.finding.advice = "fix the variables named above, or unset them to run one process";
  }
  return check;
}

}  // namespace cohort::doctor
