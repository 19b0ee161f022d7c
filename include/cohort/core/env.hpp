#pragma once

/// @file
/// Every environment variable cohort reads, `COHORT_*` and those of other programs (torchrun's
/// `RANK`, Slurm's `SLURM_PROCID`, Gloo's `GLOO_SOCKET_IFNAME`...), and the one place that reads
/// and parses them; the default deadline.
///
/// Code elsewhere names a variable by its constant here and reads it through `env::text`,
/// `env::boolean` or `env::duration` (the launch layer through an `EnvLookup`, so that tests can
/// give it an environment of their own), so a bad value is always an `InvalidArgument` naming
/// the variable, what it held and what to set, and a switch means the same wherever it is read.
/// Empty values count as unset. Only cohortrun (which passes its whole environment on to the
/// ranks) and cohort-doctor (which reports what is set) look at the environment as a whole.

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace cohort {

/// The deadline when neither the program nor `COHORT_TIMEOUT` gives one: of forming a world, of
/// its collectives and store calls, of cohortrun's exchanges between nodes, and of a store call
/// made without one (`Store::kDefaultTimeout`).
inline constexpr std::chrono::milliseconds kDefaultTimeout{std::chrono::minutes(10)};

/// Looks up an environment variable; returns nullopt when unset.
using EnvLookup = std::function<std::optional<std::string>(std::string_view name)>;

/// An `EnvLookup` over this process's environment (`getenv`).
EnvLookup process_environment();

namespace env {

// ---- Logging and diagnosis --------------------------------------------------------------------

/// Log level: error, warn (default), info or debug.
inline constexpr std::string_view kLogLevel = "COHORT_LOG_LEVEL";
/// Deadline of forming a world, of every store call made for it and of every collective: a
/// duration (`600`, `90s`, `10m`, `500ms`; default `kDefaultTimeout`, 10 minutes).
inline constexpr std::string_view kTimeout = "COHORT_TIMEOUT";
/// Boolean: exchange each collective's signature through the store before running it and name
/// the rank that differs (slow; for debugging). Default off.
inline constexpr std::string_view kDebugCollectives = "COHORT_DEBUG_COLLECTIVES";
/// Boolean: let more ranks share a node than it has GPUs, mapping local ranks to GPUs
/// round-robin (NCCL needs `NCCL_MULTI_RANK_GPU_ENABLE=1`, NCCL 2.30+). Default off.
inline constexpr std::string_view kAllowSharedGpu = "COHORT_ALLOW_SHARED_GPU";
/// Boolean: check the stream contract of `DataParallel` (Note [Debugging streams] in
/// data_parallel.hpp): on the host, gradients written or parameters read while library work on
/// a worker compute stream was not waited for; on a GPU, gradients still being written by work
/// the compute stream does not wait for when `grad_ready` is called. Slow; default off.
inline constexpr std::string_view kDebugStreams = "COHORT_DEBUG_STREAMS";

// ---- Host collectives
// -----------------------------------------------------------------------------

/// How host communicators move data: `shm` (shared memory among the ranks of a host, the
/// automatic choice made explicit), `gloo` (TCP everywhere) or `auto` (default; Note [Host
/// transport selection]).
inline constexpr std::string_view kHostTransport = "COHORT_HOST_TRANSPORT";

// ---- The rendezvous store ---------------------------------------------------------------------

/// Which store the ranks meet through: `tcp` (default), `torch` (a client of PyTorch's TCPStore
/// at the master address; the default under torchrun's agent store), `file:<folder>` or `memory`
/// (one process).
inline constexpr std::string_view kStore = "COHORT_STORE";
/// Token a client of cohort's TCP store presents and its server requires (default none).
inline constexpr std::string_view kStoreToken = "COHORT_STORE_TOKEN";
/// Boolean: a launcher (cohortrun) hosts the TCP store, so rank 0 must not start one.
inline constexpr std::string_view kStoreExternal = "COHORT_STORE_EXTERNAL";

// ---- Set by cohortrun for each rank (Note [Launch variable precedence]) -----------------------

/// Rank of this process in the run.
inline constexpr std::string_view kRank = "COHORT_RANK";
/// Number of processes in the run.
inline constexpr std::string_view kWorldSize = "COHORT_WORLD_SIZE";
/// Rank of this process among those of its node.
inline constexpr std::string_view kLocalRank = "COHORT_LOCAL_RANK";
/// Number of processes on this node.
inline constexpr std::string_view kLocalWorldSize = "COHORT_LOCAL_WORLD_SIZE";
/// Index of this node.
inline constexpr std::string_view kNodeRank = "COHORT_NODE_RANK";
/// Number of nodes.
inline constexpr std::string_view kNumNodes = "COHORT_NUM_NODES";
/// Host where the rendezvous store listens; overrides `MASTER_ADDR`.
inline constexpr std::string_view kMasterAddr = "COHORT_MASTER_ADDR";
/// Port where the rendezvous store listens; overrides `MASTER_PORT`.
inline constexpr std::string_view kMasterPort = "COHORT_MASTER_PORT";
/// Id shared by the ranks of one run and different between runs; overrides any launcher's.
inline constexpr std::string_view kRunId = "COHORT_RUN_ID";
/// How many times cohortrun has restarted the run (0 for the first attempt); torchrun's
/// `TORCHELASTIC_RESTART_COUNT` when unset.
inline constexpr std::string_view kRestartCount = "COHORT_RESTART_COUNT";

// ---- Checkpoints
// ---------------------------------------------------------------------------------

/// Test hook: kill this process (SIGKILL) at a checkpoint save point: shard_written,
/// before_rename or before_latest, optionally followed by `:<rank>`.
inline constexpr std::string_view kCheckpointCrashAt = "COHORT_CHECKPOINT_CRASH_AT";

// ---- Programs -----------------------------------------------------------------------------------

/// The Python with matplotlib that `scaling_bench --plot` runs (default python3 on the PATH).
inline constexpr std::string_view kPython = "COHORT_PYTHON";

// ---- Tests
// ----------------------------------------------------------------------------------------

/// The top build folder, which ctest gives every test so that it finds the programs it runs.
inline constexpr std::string_view kTestBinaryDir = "COHORT_TEST_BINARY_DIR";

// ---- Variables of other programs that cohort reads ----------------------------------------------
// The launchers' are read only where no COHORT_* variable says the same
// (Note [Launch variable precedence]).

/// The folder for temporary files (a failed rank's recent collectives); /tmp when unset.
inline constexpr std::string_view kTmpDir = "TMPDIR";
/// Gloo: the network interface its TCP device binds (Note [Choosing the address]).
inline constexpr std::string_view kGlooSocketIfname = "GLOO_SOCKET_IFNAME";

// torchrun (PyTorch's elastic launcher) and its agent.
/// Rank of this process in the run.
inline constexpr std::string_view kTorchRank = "RANK";
/// Number of processes in the run.
inline constexpr std::string_view kTorchWorldSize = "WORLD_SIZE";
/// Rank of this process among those of its node.
inline constexpr std::string_view kTorchLocalRank = "LOCAL_RANK";
/// Number of processes on this node.
inline constexpr std::string_view kTorchLocalWorldSize = "LOCAL_WORLD_SIZE";
/// Index of this node's agent: the node.
inline constexpr std::string_view kTorchGroupRank = "GROUP_RANK";
/// Number of agents: the nodes.
inline constexpr std::string_view kTorchGroupWorldSize = "GROUP_WORLD_SIZE";
/// Host of the rendezvous store (also set by other launchers, and by hand).
inline constexpr std::string_view kTorchMasterAddr = "MASTER_ADDR";
/// Port of the rendezvous store.
inline constexpr std::string_view kTorchMasterPort = "MASTER_PORT";
/// The run's id ("none" when torchrun was given none).
inline constexpr std::string_view kTorchRunId = "TORCHELASTIC_RUN_ID";
/// How many times the agent has restarted the workers.
inline constexpr std::string_view kTorchRestartCount = "TORCHELASTIC_RESTART_COUNT";
/// Boolean: the agent's own store serves the ranks (Note [torchrun's agent store]).
inline constexpr std::string_view kTorchUseAgentStore = "TORCHELASTIC_USE_AGENT_STORE";
/// Where a failing rank writes its error for torchrun's summary (`record_failure`).
inline constexpr std::string_view kTorchErrorFile = "TORCHELASTIC_ERROR_FILE";

// Open MPI's mpirun.
/// Rank of this process in the job.
inline constexpr std::string_view kOmpiRank = "OMPI_COMM_WORLD_RANK";
/// Number of processes in the job.
inline constexpr std::string_view kOmpiSize = "OMPI_COMM_WORLD_SIZE";
/// Rank of this process among those of its node.
inline constexpr std::string_view kOmpiLocalRank = "OMPI_COMM_WORLD_LOCAL_RANK";
/// Number of processes on this node.
inline constexpr std::string_view kOmpiLocalSize = "OMPI_COMM_WORLD_LOCAL_SIZE";
/// The job's id under Open MPI 4 (ORTE).
inline constexpr std::string_view kOmpiJobId = "OMPI_MCA_ess_base_jobid";
/// The job's PMIx namespace under Open MPI 5 (PRRTE): its id.
inline constexpr std::string_view kPmixNamespace = "PMIX_NAMESPACE";

// MPICH's Hydra (mpiexec).
/// Rank of this process in the job.
inline constexpr std::string_view kPmiRank = "PMI_RANK";
/// Number of processes in the job.
inline constexpr std::string_view kPmiSize = "PMI_SIZE";
/// Rank of this process among those of its node.
inline constexpr std::string_view kMpiLocalRankId = "MPI_LOCALRANKID";
/// Number of processes on this node.
inline constexpr std::string_view kMpiLocalRanks = "MPI_LOCALNRANKS";
/// The job's id.
inline constexpr std::string_view kPmiJobId = "PMI_JOBID";

// Slurm's srun. Where two name the same thing, the step's (first) wins over the job's.
/// Rank of this task in the step.
inline constexpr std::string_view kSlurmProcId = "SLURM_PROCID";
/// Number of tasks of the step.
inline constexpr std::string_view kSlurmStepNumTasks = "SLURM_STEP_NUM_TASKS";
/// Number of tasks (of the job, under sbatch).
inline constexpr std::string_view kSlurmNumTasks = "SLURM_NTASKS";
/// Rank of this task among those of its node.
inline constexpr std::string_view kSlurmLocalId = "SLURM_LOCALID";
/// Index of this task's node.
inline constexpr std::string_view kSlurmNodeId = "SLURM_NODEID";
/// Number of nodes of the step.
inline constexpr std::string_view kSlurmStepNumNodes = "SLURM_STEP_NUM_NODES";
/// Number of nodes (of the allocation).
inline constexpr std::string_view kSlurmNumNodes = "SLURM_NNODES";
/// Number of nodes of the job.
inline constexpr std::string_view kSlurmJobNumNodes = "SLURM_JOB_NUM_NODES";
/// Tasks on each node of the step, like `2(x3),1`.
inline constexpr std::string_view kSlurmStepTasksPerNode = "SLURM_STEP_TASKS_PER_NODE";
/// Tasks on each node (of the job), like `2(x3),1`.
inline constexpr std::string_view kSlurmTasksPerNode = "SLURM_TASKS_PER_NODE";
/// The job's id.
inline constexpr std::string_view kSlurmJobId = "SLURM_JOB_ID";
/// The step's id within the job.
inline constexpr std::string_view kSlurmStepId = "SLURM_STEP_ID";
/// The step's id within the job, older Slurm's name.
inline constexpr std::string_view kSlurmStepIdOld = "SLURM_STEPID";
/// The step's nodes, like `node[1-4]`: the first hosts the store.
inline constexpr std::string_view kSlurmStepNodeList = "SLURM_STEP_NODELIST";
/// The job's nodes.
inline constexpr std::string_view kSlurmJobNodeList = "SLURM_JOB_NODELIST";
/// The job's nodes, older Slurm's name.
inline constexpr std::string_view kSlurmNodeList = "SLURM_NODELIST";

// ---- Reading and parsing
// --------------------------------------------------------------------------

/// The value of `name`, or nullopt when it is unset or empty.
std::optional<std::string> text(std::string_view name);
std::optional<std::string> text(const EnvLookup& lookup, std::string_view name);

/// Parses a switch: 1, true, yes, on (true) or 0, false, no, off (false), any letter case.
/// @throws InvalidArgument naming `name` and the accepted values for anything else.
bool parse_bool(std::string_view name, std::string_view value);

/// `name` as a switch, `fallback` when unset or empty. @throws as `parse_bool`.
bool boolean(std::string_view name, bool fallback = false);
bool boolean(const EnvLookup& lookup, std::string_view name, bool fallback = false);

/// The durations a duration variable accepts: from `min` to `max`, both included. The default,
/// 1 ms to 30 days: below, nothing could finish; above, a typo is likelier than a wish, and the
/// arithmetic on deadlines stays far from overflow.
struct DurationRange {
  std::chrono::milliseconds min{std::chrono::milliseconds(1)};
  std::chrono::milliseconds max{std::chrono::hours(24 * 30)};
};

/// Parses a duration: a number of seconds (`600`, `0.5`) or a number followed by ms, s, m or h
/// (`500ms`, `90s`, `10m`, `1.5h`).
/// @throws InvalidArgument naming `name`, the value and the valid range in words, for anything
///         else: zero, negative, NaN or infinite numbers, other units, and values outside `range`
///         (which also catches durations too large to represent).
std::chrono::milliseconds parse_duration(std::string_view name, std::string_view value,
                                         DurationRange range = {});

/// `name` as a duration, nullopt when unset or empty. @throws as `parse_duration`.
std::optional<std::chrono::milliseconds> duration(std::string_view name, DurationRange range = {});

/// "10 ms", "1.5 s", "10 min", "2 h": a duration in words, for messages.
std::string describe_duration(std::chrono::milliseconds duration);

/// The deadline: `COHORT_TIMEOUT`, else `kDefaultTimeout`. @throws as `parse_duration`.
std::chrono::milliseconds timeout();

/// The token of cohort's TCP store (`COHORT_STORE_TOKEN`) in `lookup`: what a client presents
/// and a server requires. Empty when unset: no token. The one place the token is read.
std::string store_token(const EnvLookup& lookup);
std::string store_token();

}  // namespace env
}  // namespace cohort
