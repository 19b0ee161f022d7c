#pragma once

/// @file
/// Who this process is in the run: its rank, the world, and where the ranks meet, read from the
/// variables that a launcher (cohortrun, torchrun, mpirun, srun) puts in the environment.
///
/// Note [Launch variable precedence]
/// ---------------------------------
/// The first launcher whose variables are present wins, in this order:
///
/// 1. cohortrun: `COHORT_RANK`, `COHORT_WORLD_SIZE`, `COHORT_LOCAL_RANK`,
///    `COHORT_LOCAL_WORLD_SIZE`, `COHORT_NODE_RANK`, `COHORT_NUM_NODES`, `COHORT_MASTER_ADDR`,
///    `COHORT_MASTER_PORT`, `COHORT_RUN_ID`, `COHORT_STORE_EXTERNAL`.
/// 2. torchrun: `RANK`, `WORLD_SIZE`, `LOCAL_RANK`, `LOCAL_WORLD_SIZE`, `GROUP_RANK` (node rank),
///    `MASTER_ADDR`, `MASTER_PORT`, `TORCHELASTIC_RUN_ID`.
/// 3. Open MPI: `OMPI_COMM_WORLD_RANK`, `OMPI_COMM_WORLD_SIZE`, `OMPI_COMM_WORLD_LOCAL_RANK`,
///    `OMPI_COMM_WORLD_LOCAL_SIZE`.
/// 4. MPICH and other PMI launchers: `PMI_RANK`, `PMI_SIZE`, `MPI_LOCALRANKID`,
///    `MPI_LOCALNRANKS`.
/// 5. Slurm: `SLURM_PROCID`, `SLURM_NTASKS` (`SLURM_STEP_NUM_TASKS` when set), `SLURM_LOCALID`,
///    `SLURM_NODEID`, `SLURM_NNODES` or `SLURM_JOB_NUM_NODES`, tasks per node from
///    `SLURM_STEP_TASKS_PER_NODE` or `SLURM_TASKS_PER_NODE`, master address from the first host of
///    `SLURM_STEP_NODELIST`, `SLURM_JOB_NODELIST` or `SLURM_NODELIST`, run id
///    `SLURM_JOB_ID.SLURM_STEP_ID`.
/// 6. None of these: a single process, rank 0 of 1.
///
/// Why this order: launchers nest. Jobs run inside Slurm allocations, so Slurm's variables are
/// present almost everywhere on a cluster, and a `mpirun` or `torchrun` started inside `srun`
/// leaves them in place while it sets its own, which describe the processes it started and so are
/// the more specific ones. The innermost launcher is the one that started this process; the
/// outermost (Slurm) comes last. cohortrun's own variables come first because they are cohort's:
/// a user who sets them means them.
///
/// A launcher counts as present when any of its rank, world size, local rank or local world size
/// variables is set; then its rank and world size must both be set, and its local rank and local
/// world size both or neither. When it gives no local ranks (PMI under `srun` sets only
/// `PMI_RANK` and `PMI_SIZE`), they come from a launcher further down the list that agrees on
/// rank and world size; when none does, that is an error, since the device a rank uses depends on
/// its local rank. Node ranks it does not give come the same way, else from the arithmetic below.
///
/// The master address and port: `COHORT_MASTER_ADDR`/`COHORT_MASTER_PORT`, then
/// `MASTER_ADDR`/`MASTER_PORT` (which override any launcher's guess), then the first Slurm host
/// when the world spans several nodes, then 127.0.0.1 when it spans one node; port 29500 when
/// none is set. A world over several nodes with no master address is an error.
///
/// Node counts: from the launcher where it gives them (`COHORT_NUM_NODES`, `SLURM_NNODES`...);
/// else `world_size / local_world_size` (rounded up) and `rank / local_world_size`, a guess that
/// `cohort::init` replaces with what the host names say (`given` tells which values are guesses).
///
/// Variables set to the empty string count as unset.

#include <cohort/core/env.hpp>

#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace cohort {

/// The program that started this process and set its launch variables.
enum class Launcher { none, cohortrun, torchrun, open_mpi, mpich, slurm };

/// "none", "cohortrun", "torchrun", "Open MPI", "MPICH" or "Slurm".
std::string_view to_string(Launcher launcher) noexcept;

/// This process's place in the run. See Note [Launch variable precedence].
struct LaunchInfo {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  int node_rank = 0;
  int num_nodes = 1;
  /// Where the rendezvous store listens (the host of rank 0, or of cohortrun on node 0).
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  /// The same on every rank of a run and different between runs, so that state a run leaves
  /// (`FileStore` folders) never confuses the next: `COHORT_RUN_ID`, `TORCHELASTIC_RUN_ID`
  /// (unless torchrun's placeholder "none"), the Open MPI or PMIx job id, Slurm's
  /// `SLURM_JOB_ID.SLURM_STEP_ID`. When nothing gives one: random for a single process; for a
  /// world of many, derived from the master address and port (equal on every rank, but equal
  /// for successive runs too: set `COHORT_RUN_ID` when using a `FileStore` that way).
  std::string run_id;
  /// The launcher variables that gave `local_rank` (with `local_world_size`), `node_rank` and
  /// `num_nodes`, e.g. "SLURM_LOCALID"; empty where the value was derived here (or the
  /// `LaunchInfo` was made by hand). `cohort::init` keeps a given value, checks it against the
  /// host names, and fills the others from them (Note [Topology from the launcher]).
  struct Given {
    std::string local_rank;
    std::string node_rank;
    std::string num_nodes;
  } given;
  /// True when a launcher (cohortrun) already hosts the TCP store: rank 0 must not start one.
  bool store_is_external = false;
  /// True under torchrun's agent store (`TORCHELASTIC_USE_AGENT_STORE=True`): torchrun hosts a
  /// PyTorch TCPStore at the master address, which the ranks use as it is (`TorchStore`).
  bool torch_agent_store = false;
  /// How many times the launcher restarted the run: `COHORT_RESTART_COUNT`, else
  /// `TORCHELASTIC_RESTART_COUNT`; 0 for the first attempt. Keys of one attempt never meet
  /// another's in a store that outlives it (torchrun's agent store does).
  int restart_count = 0;
  Launcher launcher = Launcher::none;

  /// Reads the process environment.
  /// @throws InvalidArgument naming the variable, its value and what to set, when a variable is
  ///         not a non-negative integer, a rank is not below its size, a launcher's variables are
  ///         incomplete, a port is outside 1..65535, or a multi-node world has no master address.
  static LaunchInfo from_environment();
  /// The same over any environment (tests).
  static LaunchInfo from_environment(const EnvLookup& env);

  /// One line, e.g. "rank 3 of 8 (local 3 of 4, node 0 of 2) via torchrun, store 10.0.0.1:29500".
  std::string describe() const;
};

/// Tells the launcher why this rank is failing, so that its summary names the root cause: under
/// torchrun, writes `message` to `TORCHELASTIC_ERROR_FILE` as torchrun's JSON error record
/// (`{"message": ..., "timestamp": <unix seconds>}`). Does nothing under other launchers; never
/// throws (a rank that is failing must not fail differently here). Programs call it from the
/// handler that ends them.
void record_failure(std::string_view message) noexcept;

/// The same over any environment (tests).
void record_failure(std::string_view message, const EnvLookup& env) noexcept;

/// The first host of a Slurm host list (`SLURM_JOB_NODELIST`), without expanding the rest:
/// "gpu[007-009,012],cpu01" gives "gpu007" (zero padding kept), "a,b" gives "a".
/// Returns nullopt when the list is empty or malformed (unbalanced brackets, an empty range).
std::optional<std::string> first_slurm_host(std::string_view host_list);

/// The number of tasks on node `node_index` from a Slurm tasks-per-node list such as
/// "2(x3),1" (nodes 0-2 run 2 tasks, node 3 runs 1). Returns nullopt when malformed or when the
/// list has fewer nodes.
std::optional<int> slurm_tasks_on_node(std::string_view tasks_per_node, int node_index);

}  // namespace cohort
