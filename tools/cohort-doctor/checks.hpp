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

/// 1 when any finding is an error, else 0 (2 is a usage error, as for every cohort program).
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

// ---- Settings the library reads, and what will run -------------------------------------------

/// Every `COHORT_*` setting the library reads, through the library's own parsers
/// (`env::parse_duration`, `env::parse_bool`, `parse_log_level`, `parse_host_transport`,
/// `plan_store`): a value the library refuses is an error naming it; a `COHORT_*` name the library
/// does not know is a warning with the nearest known name.
std::vector<Finding> check_library_settings(const EnvMap& environment);

/// Whether `name` holds a secret (`COHORT_STORE_TOKEN`, and any name with TOKEN, SECRET,
/// PASSWORD, PASSWD or CREDENTIAL in it, or ending in _KEY): reports never show its value.
bool is_secret(std::string_view name);
/// `value` as a report shows it: secrets as "(set, N characters, not shown)".
std::string shown_value(std::string_view name, std::string_view value);

/// What the library will run for this launch: the backend and host communicator
/// (`plan_transport`) and the store (`plan_store`); `nccl` is `resolve_backend`'s answer for a
/// program that lets it choose (the probe asks it).
struct TransportCheck {
  Finding backend;                 ///< "transport": the communicator that will carry collectives
  Finding store;                   ///< "store": where the ranks meet
  std::string backend_name;        ///< "nccl", "shm", "hierarchical", "gloo"; "unknown" on error
  std::string store_kind;          ///< "memory", "tcp", "torch", "file"; "unknown" on error
  bool store_expected_up = false;  ///< a launcher already serves the store (cohortrun, torchrun)
};
TransportCheck check_transport(const EnvMap& environment, bool nccl);

/// What resolving and connecting to the rendezvous address gave (probe_host.cpp).
struct RendezvousFacts {
  std::string host;  ///< empty: no address is in play (one process, file or memory store)
  int port = 0;
  std::string source;  ///< "MASTER_ADDR", "COHORT_MASTER_ADDR", "the launcher's default"...
  std::vector<std::string> addresses;  ///< what `host` resolved to
  std::string resolve_error;           ///< getaddrinfo's words when it did not resolve
  enum class Reach : std::uint8_t { not_tried, open, refused, timed_out, failed };
  Reach reach = Reach::not_tried;
  std::string reach_error;
  double connect_ms = 0.0;
};

/// "open", "refused", "timed out", "failed", "not tried".
std::string_view to_string(RendezvousFacts::Reach reach) noexcept;

/// The rendezvous address: one that does not resolve is an error; a loopback address for a world
/// of several nodes is an error; one nothing listens at is an error when a launcher should already
/// serve the store there (`store_expected_up`), else a note (rank 0 starts it with the job).
Finding check_rendezvous(const RendezvousFacts& facts, int num_nodes, bool store_expected_up);

// ---- Host inventory ----------------------------------------------------------------------------

/// The machine, for comparing nodes: CPU, memory, OS, kernel, compiler and library versions.
struct HostInventory {
  std::string cpu_model;
  int sockets = 0;
  int numa_nodes = 0;
  std::uint64_t memory_total_bytes = 0;
  std::uint64_t memory_available_bytes = 0;
  std::string os;                                              ///< PRETTY_NAME of /etc/os-release
  std::string kernel;                                          ///< uname -r
  std::string compiler;                                        ///< what built this cohort-doctor
  std::vector<std::pair<std::string, std::string>> libraries;  ///< name, version
};

// ---- GPU and network health (NVML and sysfs) ---------------------------------------------------

/// PCIe link of one GPU now and at most (0: unknown).
struct PcieLink {
  int generation = 0;
  int width = 0;
  int max_generation = 0;
  int max_width = 0;
};

/// One NVLink of one GPU.
struct NvLink {
  int link = 0;
  bool active = false;
  std::string remote_bus_id;  ///< the PCI bus id at its other end ("" unknown)
  bool remote_is_switch = false;
};

/// What NVML says about one GPU (probe_nvml.cpp). Unset optionals: NVML could not say.
struct GpuHealth {
  int index = 0;
  std::string name;
  std::string uuid;
  std::string pci_bus_id;  ///< "0000:3b:00.0", as sysfs names it
  int compute_major = 0;
  int compute_minor = 0;
  std::optional<PcieLink> pcie;
  std::vector<NvLink> nvlinks;  ///< the links NVML reports, active or not
  std::optional<bool> ecc_enabled;
  std::optional<std::uint64_t> ecc_uncorrected_volatile;
  std::optional<std::uint64_t> ecc_uncorrected_aggregate;
  std::optional<std::uint64_t> ecc_corrected_volatile;
  bool remap_supported = false;
  unsigned remapped_correctable = 0;
  unsigned remapped_uncorrectable = 0;
  bool remap_pending = false;
  bool remap_failure = false;
  std::optional<std::uint64_t> throttle_reasons;  ///< NVML's clock throttle (event) reasons
  std::optional<bool> persistence;
  std::optional<bool> mig;
  std::optional<int> temperature_c;
  std::string pci_path;  ///< sysfs path of the device below /sys/devices ("" unknown)
  int numa_node = -1;
};

/// One InfiniBand (or RoCE) port, from /sys/class/infiniband.
struct IbPort {
  int port = 0;
  std::string state;       ///< "ACTIVE", "DOWN", "INIT"...
  std::string phys_state;  ///< "LinkUp", "Disabled", "Polling"...
  std::string rate;        ///< "200 Gb/sec (4X HDR)"
  double rate_gbps = 0.0;  ///< gigabits per second
  std::string link_layer;  ///< "InfiniBand", "Ethernet"
};

/// One RDMA device and its ports.
struct Nic {
  std::string name;  ///< "mlx5_0"
  std::string pci_bus_id;
  std::string pci_path;
  int numa_node = -1;
  std::vector<IbPort> ports;
};

/// NVML, the GPUs it sees, the RDMA devices and the peer-memory module.
struct GpuSystem {
  bool nvml_loaded = false;
  std::string nvml_problem;  ///< why NVML could not be used, when it could not
  std::string driver_version;
  std::string nvml_version;
  std::vector<GpuHealth> gpus;
  /// NVML's topology level between GPUs i and j (10 single bridge .. 50 system; -1 unknown).
  std::vector<std::vector<int>> nvml_topology;
  int nvidia_pci_devices = -1;  ///< display controllers of vendor 0x10de in sysfs; -1 unknown
  std::vector<Nic> nics;
  std::optional<std::string>
      peer_memory_module;  ///< "nvidia_peermem", "nv_peer_mem"; nullopt: none
};

/// NVIDIA's throttle reasons in words ("hardware thermal slowdown", ...), idle left out.
std::vector<std::string> throttle_reason_names(std::uint64_t reasons);

/// The PCIe relation of two devices from their sysfs paths, in `nvidia-smi topo -m` words: PIX
/// (one PCIe switch between them), PXB (several bridges), PHB (through the host bridge), NODE
/// (between host bridges of one NUMA node), SYS (between NUMA nodes); "?" when a path is unknown.
std::string pci_relation(std::string_view path_a, int numa_a, std::string_view path_b, int numa_b);

/// The GPU-GPU and GPU-NIC matrix: row i is GPU i, columns the GPUs then the NICs. NV<n>: n
/// active NVLinks between the two GPUs (or to a common NVSwitch), else the PCIe relation.
std::vector<std::vector<std::string>> link_matrix(const GpuSystem& system);

/// NVML and the PCI bus: GPUs on the bus that NVML cannot see mean a missing or broken driver,
/// or a container started without its GPUs (a warning).
Finding check_nvml(const GpuSystem& system, int cuda_gpu_count);
/// PCIe width below the maximum is a warning (half a link is half the host bandwidth); a lower
/// generation a note (GPUs lower it when idle: look again under load).
Finding check_pcie(const GpuHealth& gpu);
/// Some NVLinks down while others are up is a warning.
std::optional<Finding> check_nvlinks(const GpuHealth& gpu);
/// Uncorrected ECC errors since the driver loaded are an error, ever a warning; ECC off a warning.
Finding check_ecc(const GpuHealth& gpu);
/// Row remapping: a failure is an error, a pending remap a warning (reset the GPU).
std::optional<Finding> check_row_remapping(const GpuHealth& gpu);
/// Clocks held down by heat or power (hardware slowdown, thermal, power brake) is a warning.
Finding check_throttle(const GpuHealth& gpu);
/// Persistence mode off is a note; MIG on is a warning (NCCL sees MIG slices, not whole GPUs).
std::vector<Finding> check_gpu_modes(const GpuHealth& gpu);
/// InfiniBand ports: not ACTIVE is a warning (an error across nodes when none is active);
/// ports at different rates a warning.
std::vector<Finding> check_infiniband(std::span<const Nic> nics, int num_nodes);
/// GPUs and RDMA devices without a peer-memory module: NCCL cannot use GPUDirect RDMA (warning).
std::optional<Finding> check_gpudirect(const GpuSystem& system);

// ---- Across ranks ----------------------------------------------------------------------------

/// One collective measured by `cohort-doctor --collective`.
struct CollectiveResult {
  std::string name;  ///< "all_reduce", "reduce_scatter", "all_gather", "broadcast"
  int ranks = 0;
  std::uint64_t bytes = 0;  ///< per rank, as nccl-tests counts them
  double time_us = 0.0;     ///< median over iterations of the slowest rank
  double algbw_gbps = 0.0;
  double busbw_gbps = 0.0;
  std::uint64_t wrong = 0;  ///< elements that differ from the expected values, over all ranks
};

/// nccl-tests' bus-bandwidth factor of `name` over `ranks` ranks (all_reduce 2(n-1)/n,
/// reduce_scatter and all_gather (n-1)/n, broadcast 1).
double bus_factor(std::string_view name, int ranks);

/// Wrong values are an error; busbw below `floor_gbps` (when above 0) an error naming the floor.
std::vector<Finding> check_collectives(std::span<const CollectiveResult> results,
                                       double floor_gbps);

/// What each rank found, as rank 0 gathers it under a launcher.
struct RankSummary {
  int rank = 0;
  int local_rank = 0;
  int node_rank = 0;
  std::string host;
  int exit_status = 0;
  int errors = 0;
  int warnings = 0;
  std::vector<Finding> problems;  ///< its errors and warnings
  /// Facts that should be the same on every node: cohort version, driver, CUDA, NCCL, GPU count
  /// and names, CPU, kernel.
  std::map<std::string, std::string> fingerprint;
};

/// Nodes whose fingerprint differs from rank 0's are a warning naming the facts and the hosts.
Finding check_nodes_agree(std::span<const RankSummary> ranks);

/// The summary rank 0 prints: one line per node (ranks, errors, warnings), each rank's errors,
/// then the verdict.
std::string render_summary(std::span<const RankSummary> ranks, const Finding& agreement);

// ---- Formatting ------------------------------------------------------------------------------

/// "64 MiB", "1.5 GiB", "512 B": binary units, at most one decimal.
std::string format_bytes(std::uint64_t bytes);

}  // namespace cohort::doctor
