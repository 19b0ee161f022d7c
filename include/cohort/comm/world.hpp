#pragma once

/// @file
/// `World`: this process's place among all ranks, its device, and its communicators.
///
///     cohort::World world = cohort::init();      // cohortrun, torchrun, srun, mpirun...
///     world.comm().all_reduce(grads, cohort::ReduceOp::avg, stream);
///
///     cohort::run_local(4, [](cohort::World& world) { /* this rank's program */ });  // 4 threads

#include <cohort/comm/communicator.hpp>
#include <cohort/launch/launch_info.hpp>
#include <cohort/launch/store.hpp>
#include <cohort/launch/store_group.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>

namespace cohort {

/// Where the world's collectives run: on the GPUs (NCCL) or on the host. Which host backend
/// (shared memory, Gloo, or the two combined) follows from `WorldOptions::host_transport` and
/// where the ranks run; `World::backend()` says what was decided.
enum class BackendChoice : std::uint8_t {
  automatic,  ///< NCCL when this process sees a GPU (and cohort has CUDA), else the host
  nccl,       ///< NCCL on the GPUs; an error where none is visible
  host,       ///< host memory: shared memory within a host, Gloo across (see HostTransport)
  /// The old name of `host`, which never meant Gloo alone (that is `HostTransport::gloo`).
  gloo [[deprecated("BackendChoice::gloo is the host backend: use BackendChoice::host (and "
                    "HostTransport::gloo for Gloo everywhere)")]] = host,
};

struct WorldOptions {
  BackendChoice backend = BackendChoice::automatic;
  /// Deadline of every collective and of forming the world. Unset: `COHORT_TIMEOUT` (e.g. "600",
  /// "90s", "10m", "500ms"), else `kDefaultTimeout` (10 minutes).
  std::optional<std::chrono::milliseconds> timeout = std::nullopt;
  /// Where the ranks are; unset: `LaunchInfo::from_environment()`.
  std::optional<LaunchInfo> launch = std::nullopt;
  /// The store the ranks meet through; unset: `connect_store(launch)`.
  std::shared_ptr<Store> store = nullptr;
  /// Check that every rank issues the same collectives (slow; for debugging). Unset:
  /// `COHORT_DEBUG_COLLECTIVES=1`.
  std::optional<bool> debug_collectives = std::nullopt;
  /// Group ranks into nodes of this many consecutive ranks instead of by host name; lets
  /// `run_local` model several nodes in one process (0: by host name).
  int ranks_per_node = 0;
  /// How host communicators move data (see `HostTransport`). Unset: `COHORT_HOST_TRANSPORT`
  /// (shm, gloo or auto), else automatic.
  std::optional<HostTransport> host_transport = std::nullopt;
  /// The GPU this rank works on with the NCCL backend, where its local rank does not name it: a
  /// world over some ranks of a node (a torch.distributed subgroup, in which global rank 3 may be
  /// local rank 0 and still own cuda:3). Unset: the local_rank-th visible GPU. An error with
  /// the host backend, whose device is the host.
  std::optional<Device> device = std::nullopt;
};

class World {
 public:
  World(World&&) noexcept;
  World& operator=(World&&) noexcept;
  ~World();

  int rank() const noexcept;
  int size() const noexcept;
  /// Rank among the ranks of this node, and their number.
  int local_rank() const noexcept;
  int local_world_size() const noexcept;
  int node_rank() const noexcept;
  int num_nodes() const noexcept;

  /// The device this rank works on: the local_rank-th GPU, or the host.
  Device device() const noexcept;
  /// The global communicator's backend, decided once before any communicator existed: nccl, or
  /// on the host shm (one host), hierarchical (several hosts, as many ranks on each), or gloo
  /// (forced, or uneven ranks per host).
  Backend backend() const noexcept;

  /// Every rank.
  Communicator& comm() noexcept;
  /// The ranks of this node.
  Communicator& local() noexcept;
  /// The ranks with this rank's local rank, one per node.
  Communicator& cross() noexcept;

  /// The store the ranks met through, scoped to this world.
  Store& store() noexcept;
  /// Every rank of the world agreeing through `store()` (collective calls: every rank makes the
  /// same ones in the same order).
  StoreGroup& group() noexcept;
  std::chrono::milliseconds timeout() const noexcept;

  /// "rank 2 of 8 (local 2 of 4, node 0 of 2) on cuda:2, nccl".
  std::string describe() const;

  struct Impl;

 private:
  explicit World(std::unique_ptr<Impl> impl);
  friend World init(WorldOptions options);
  friend void run_local(int ranks, const std::function<void(World&)>& fn, WorldOptions options);
  std::unique_ptr<Impl> impl_;
};

/// Joins the world this process was launched into. Collective: every rank must call it.
/// @throws InvalidArgument for a bad launch environment or more local ranks than GPUs;
///         TimeoutError naming the ranks that never joined.
World init(WorldOptions options = {});

/// Runs `fn` on `ranks` ranks, each a thread of this process with its own World, meeting through
/// an in-process store (GPU i each when `options.backend` picks NCCL, else the host). Returns when
/// every rank has; rethrows the first error a rank raised (the others are aborted by it).
void run_local(int ranks, const std::function<void(World&)>& fn, WorldOptions options = {});

}  // namespace cohort
