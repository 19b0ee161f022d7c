#pragma once

/// @file
/// Every `COHORT_*` environment variable, and the one place that reads and parses them.
///
/// Code elsewhere names a variable by its constant here and reads it through `env::text`,
/// `env::boolean` or `env::duration`, so a bad value is always an `InvalidArgument` naming the
/// variable, what it held and what to set, and a switch means the same wherever it is read.
/// Variables of other programs (torchrun's `RANK`, Slurm's `SLURM_PROCID`...) are read by the
/// launch layer through the same `EnvLookup`. Empty values count as unset.

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace cohort {

/// Looks up an environment variable; returns nullopt when unset.
using EnvLookup = std::function<std::optional<std::string>(std::string_view name)>;

/// An `EnvLookup` over this process's environment (`getenv`).
EnvLookup process_environment();

namespace env {

// ---- Logging and diagnosis --------------------------------------------------------------------

/// Log level: error, warn (default), info or debug.
inline constexpr std::string_view kLogLevel = "COHORT_LOG_LEVEL";
/// Deadline of forming a world, of every store call made for it and of every collective: a
/// duration (`600`, `90s`, `10m`, `500ms`; default 10 minutes).
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

// ---- Host collectives -----------------------------------------------------------------------------

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

// ---- Checkpoints ---------------------------------------------------------------------------------

/// Test hook: kill this process (SIGKILL) at a checkpoint save point: shard_written,
/// before_rename or before_latest, optionally followed by `:<rank>`.
inline constexpr std::string_view kCheckpointCrashAt = "COHORT_CHECKPOINT_CRASH_AT";

// ---- Programs -----------------------------------------------------------------------------------

/// The Python with matplotlib that `scaling_bench --plot` runs (default python3 on the PATH).
inline constexpr std::string_view kPython = "COHORT_PYTHON";

// ---- Tests ----------------------------------------------------------------------------------------

/// The top build folder, which ctest gives every test so that it finds the programs it runs.
inline constexpr std::string_view kTestBinaryDir = "COHORT_TEST_BINARY_DIR";

// ---- Reading and parsing --------------------------------------------------------------------------

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

}  // namespace env
}  // namespace cohort
