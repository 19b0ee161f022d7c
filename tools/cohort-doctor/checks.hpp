#pragma once

/// @file
/// cohort-doctor's checks: pure functions from plain facts (version numbers, sizes, limits,
/// environment variables, interface lists) to findings. Nothing here touches CUDA or the system,
/// so every rule is tested on made-up inputs; the probes that gather the facts live in
/// probe_*.cpp.

#include <compare>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace cohort::doctor {

/// How much a finding matters. Only `error` makes the doctor exit nonzero.
enum class Severity : std::uint8_t {
  ok,    ///< checked, and fine
  info,  ///< worth knowing; nothing to do
  warn,  ///< training will be slower or fragile; the advice says what to change
  error  ///< training will fail; the advice says what to change
};

/// "ok", "info", "warn" or "error".
std::string_view to_string(Severity severity) noexcept;

/// One result of one check.
struct Finding {
  Severity severity = Severity::ok;
  std::string topic;    ///< what was checked: "CUDA driver", "/dev/shm", "NCCL_P2P_DISABLE"...
  std::string message;  ///< what was found
  std::string advice;   ///< what to do about it; empty when nothing
};

/// 2 when any finding is an error, else 0.
int exit_status(std::span<const Finding> findings) noexcept;

// ---- Versions --------------------------------------------------------------------------------

struct Version {
  int major = 0;
  int minor = 0;
  int patch = 0;

  /// "13.0.2"; "13.0" when `with_patch` is false.
  std::string to_string(bool with_patch = true) const;
  friend auto operator<=>(const Version&, const Version&) = default;
};

/// A CUDA runtime or driver version as `cudaRuntimeGetVersion` gives it: 13000 is 13.0, 12040
/// is 12.4.
Version cuda_version_from_code(int code) noexcept;
/// An NCCL version code: 22809 is 2.28.9 (since 2.9, major*10000+minor*100+patch), 2708 is
/// 2.7.8 (before, major*1000+minor*100+patch).
Version nccl_version_from_code(int code) noexcept;
/// A cuDNN version code: 91900 is 9.19.0 (cuDNN 9, major*10000+minor*100+patch), 8907 is 8.9.7
/// (cuDNN 8 and older, major*1000+minor*100+patch).
Version cudnn_version_from_code(long long code) noexcept;

/// Whether the CUDA driver (`cudaDriverGetVersion`, 0 when none is installed) can run this
/// CUDA runtime (`cudaRuntimeGetVersion`). An older major version is an error; an older minor
/// version of the same major works through minor-version compatibility, with limits (a warning).
Finding check_cuda_driver(int driver_code, int runtime_code);

/// Compares a library loaded at run time with the headers the doctor was compiled against:
/// another major version is an error (the ABI changed), an older one a warning.
Finding check_library_version(std::string_view library, std::optional<Version> loaded,
                              std::optional<Version> compiled);

// ---- GPUs ------------------------------------------------------------------------------------

enum class ComputeMode : std::uint8_t { default_mode, exclusive_process, prohibited, unknown };

/// "default", "exclusive-process", "prohibited" or "unknown".
std::string_view to_string(ComputeMode mode) noexcept;

/// What the doctor reports about one GPU.
struct GpuInfo {
  int index = 0;
  std::string name;
  std::uint64_t total_memory_bytes = 0;
  int compute_major = 0;
  int compute_minor = 0;
  int multiprocessors = 0;
  std::string pci_bus_id;
  ComputeMode compute_mode = ComputeMode::default_mode;
  bool concurrent_managed_access = false;  ///< CPU and GPU may touch managed memory at once
  bool pageable_memory_access = false;     ///< the GPU can read plain malloc'ed memory (HMM/ATS)
};

/// Peer-to-peer facts for one ordered pair of GPUs, from `cudaDeviceGetP2PAttribute`.
struct PeerLink {
  int from = 0;
  int to = 0;
  bool access = false;          ///< `cudaDevP2PAttrAccessSupported`
  int performance_rank = 0;     ///< `cudaDevP2PAttrPerformanceRank`: lower is faster
  bool native_atomics = false;  ///< `cudaDevP2PAttrNativeAtomicSupported` (typical of NVLink)
};

/// Whether there are GPUs; when there are none, says why and that the host backend is used.
Finding check_gpu_count(int gpu_count, std::string_view unavailable_reason, bool built_with_cuda);

/// Whether this build has kernels a GPU of capability major.minor can run. `architectures` is
/// CMake's CUDA_ARCHITECTURES list ("80;90", "90-real", "90a", "native", "all"), ';' or ','
/// separated. A real architecture (SASS) runs on the same major with an equal or higher minor
/// ("90a" only on exactly 9.0); a virtual one (PTX) is compiled by the driver for any equal or
/// newer GPU.
Finding check_gpu_architecture(const GpuInfo& gpu, std::string_view architectures);

/// A GPU in the `prohibited` compute mode cannot be used at all.
Finding check_compute_mode(const GpuInfo& gpu);

/// What managed (unified) memory can do on this GPU.
Finding check_managed_memory(const GpuInfo& gpu);

/// Peer access between every pair of `gpu_count` GPUs: pairs without it are a warning (NCCL then
/// goes through host memory).
std::vector<Finding> check_peer_access(int gpu_count, std::span<const PeerLink> links);

// ---- Host limits -----------------------------------------------------------------------------

/// Size of a file system such as /dev/shm, from statvfs.
struct FileSystemSize {
  std::uint64_t total_bytes = 0;
  std::uint64_t available_bytes = 0;
};

/// What Docker gives a container without --shm-size.
inline constexpr std::uint64_t kDockerDefaultShmBytes = 64ULL << 20;
/// Below this, NCCL's shared-memory transport runs out of room.
inline constexpr std::uint64_t kMinimumShmBytes = 1ULL << 30;

/// /dev/shm: nullopt when it does not exist. Under 1 GiB is a warning.
Finding check_shm(std::optional<FileSystemSize> shm);

/// A resource limit; nullopt stands for unlimited.
struct ResourceLimit {
  std::optional<std::uint64_t> soft;
  std::optional<std::uint64_t> hard;
};

/// Locked (pinned) memory, RLIMIT_MEMLOCK. Unlimited is what NCCL over InfiniBand and pinned host
/// buffers want; a small limit is a warning.
Finding check_memlock(ResourceLimit limit);

/// The stack size, RLIMIT_STACK. NCCL before 2.28 gives its threads a 2 MB stack when the limit
/// is unlimited, which can crash them; `nccl` is the loaded NCCL's version when known.
Finding check_stack(ResourceLimit limit, std::optional<Version> nccl);

// ---- Environment -----------------------------------------------------------------------------

using EnvMap = std::map<std::string, std::string, std::less<>>;

/// The variables worth showing: NCCL_*, COHORT_*, GLOO_*, CUDA_VISIBLE_DEVICES,
/// CUDA_DEVICE_ORDER and CUDA_LAUNCH_BLOCKING.
EnvMap relevant_variables(const EnvMap& environment);

/// Settings that slow training down or are meant only for debugging (NCCL_P2P_DISABLE,
/// NCCL_SHM_DISABLE, NCCL_PROTO, NCCL_DEBUG=INFO, CUDA_LAUNCH_BLOCKING...), and values cohort
/// cannot read (COHORT_LOG_LEVEL). `nccl` is the loaded NCCL's version when known.
std::vector<Finding> check_environment(const EnvMap& environment, std::optional<Version> nccl);

/// More ranks on this node than GPUs puts two ranks on one GPU, which NCCL refuses (an error)
/// unless `NCCL_MULTI_RANK_GPU_ENABLE` (NCCL 2.30+) or cohort's test hook
/// `COHORT_ALLOW_SHARED_GPU` is set (then informational). Nothing to check without GPUs.
Finding check_ranks_per_gpu(int local_world_size, int gpu_count, const EnvMap& environment);

/// What the launcher variables say about this process.
struct LaunchCheck {
  Finding finding;  ///< ok with `LaunchInfo::describe()`, or an error when cohort would refuse
  std::string launcher = "none";  ///< `to_string(Launcher)`; "unknown" on error
  std::string description;        ///< `LaunchInfo::describe()`; empty on error
  int local_world_size = 1;
  int num_nodes = 1;
};
LaunchCheck check_launch(const EnvMap& environment);

// ---- Network ---------------------------------------------------------------------------------

/// One IPv4 address of one network interface.
struct NetworkInterface {
  std::string name;
  std::string address;  ///< dotted IPv4
  bool loopback = false;
  bool up = true;
};

/// Whether interface `name` matches an NCCL interface list (`NCCL_SOCKET_IFNAME` syntax): comma
/// separated prefixes, all negated by a leading '^', exact names with a leading '='; an entry may
/// end in ":port", which is ignored.
bool matches_interface_list(std::string_view list, std::string_view name);

/// The interfaces NCCL's socket code would choose (by name, once each, in order): those matching
/// `NCCL_SOCKET_IFNAME` when it is longer than one character; else ib*, then anything but
/// docker*, lo* and virbr*, then docker*, then lo*, then virbr*. IPv4 only.
std::vector<std::string> nccl_socket_interfaces(const EnvMap& environment,
                                                std::span<const NetworkInterface> interfaces);

/// `NCCL_SOCKET_IFNAME` matching nothing, or only loopback in a world of several nodes, stops
/// NCCL from starting: an error when NCCL is in use (there are GPUs), else a warning.
Finding check_nccl_socket(const EnvMap& environment, std::span<const NetworkInterface> interfaces,
                          int num_nodes, bool nccl_in_use);

/// The host backend's interface (Gloo over TCP): `GLOO_SOCKET_IFNAME` (comma separated exact
/// names) when set; else 127.0.0.1 on one node, and across nodes the local address of the route
/// to the store host (`COHORT_MASTER_ADDR` or `MASTER_ADDR`; a loopback one is a warning), with
/// the host name's address (`hostname_address`, nullopt when it does not resolve) only the
/// fallback. Problems are warnings: whether the host backend is used depends on the program.
Finding check_gloo_socket(const EnvMap& environment, std::span<const NetworkInterface> interfaces,
                          std::optional<std::string> hostname_address, int num_nodes);

// ---- Formatting ------------------------------------------------------------------------------

/// "64 MiB", "1.5 GiB", "512 B": binary units, at most one decimal.
std::string format_bytes(std::uint64_t bytes);

}  // namespace cohort::doctor
