#include <cohort/launch/launch_info.hpp>

#include <cohort/core/env.hpp>
#include <cohort/core/error.hpp>

#include <algorithm>
#include <array>
#include <charconv>
#include <cstdint>
#include <initializer_list>
#include <random>
#include <sstream>
#include <system_error>
#include <vector>

namespace cohort {
namespace {

/// An integer read from a variable, with the variable's name for messages.
struct Field {
  int value = 0;
  std::string name;
};

/// What one launcher's variables say. Optional fields are the ones a launcher may leave out.
struct Reading {
  Launcher launcher = Launcher::none;
  Field rank;
  Field world_size;
  std::optional<Field> local_rank;
  std::optional<Field> local_world_size;
  std::optional<Field> node_rank;
  std::optional<Field> num_nodes;
  std::string run_id;
};

/// The variable names one MPI-style launcher uses.
struct LauncherVariables {
  Launcher launcher;
  std::string_view rank;
  std::string_view world_size;
  std::string_view local_rank;
  std::string_view local_world_size;
};

constexpr LauncherVariables kCohortrun{Launcher::cohortrun, env::kRank, env::kWorldSize,
                                       env::kLocalRank, env::kLocalWorldSize};
constexpr LauncherVariables kTorchrun{Launcher::torchrun, env::kTorchRank, env::kTorchWorldSize,
                                      env::kTorchLocalRank, env::kTorchLocalWorldSize};
constexpr LauncherVariables kOpenMpi{Launcher::open_mpi, env::kOmpiRank, env::kOmpiSize,
                                     env::kOmpiLocalRank, env::kOmpiLocalSize};
constexpr LauncherVariables kMpich{Launcher::mpich, env::kPmiRank, env::kPmiSize,
                                   env::kMpiLocalRankId, env::kMpiLocalRanks};

constexpr int kDefaultPort = 29500;

/// The environment with empty values treated as unset.
class Environment {
 public:
  explicit Environment(const EnvLookup& lookup) : lookup_(lookup) {}

  std::optional<std::string> text(std::string_view name) const {
    auto value = lookup_(name);
    if (value && value->empty()) return std::nullopt;
    return value;
  }

  bool has(std::string_view name) const { return text(name).has_value(); }

  /// The first of `names` that is set.
  std::optional<std::string> first_text(std::initializer_list<std::string_view> names) const {
    for (auto name : names) {
      if (auto value = text(name)) return value;
    }
    return std::nullopt;
  }

  /// A non-negative integer, or nullopt when unset.
  /// @throws InvalidArgument naming the variable when the value is not one.
  std::optional<Field> integer(std::string_view name) const {
    auto value = text(name);
    if (!value) return std::nullopt;
    const std::string& s = *value;
    const char* first = s.data();
    const char* last = s.data() + s.size();
    std::int64_t parsed = 0;
    auto [end, error] = std::from_chars(first, last, parsed);
    if (error == std::errc::result_out_of_range ||
        (error == std::errc{} && end == last && parsed > std::int64_t{1'000'000'000})) {
      COHORT_FAIL(InvalidArgument, std::string(name) + "=" + s + " is out of range; set " +
                                       std::string(name) +
                                       " to a whole number from 0 to 1000000000");
    }
    if (error != std::errc{} || end != last) {
      COHORT_FAIL(InvalidArgument, std::string(name) + "='" + s + "' is not an integer; set " +
                                       std::string(name) + " to a non-negative whole number");
    }
    if (parsed < 0) {
      COHORT_FAIL(InvalidArgument, std::string(name) + "=" + s + " is negative; set " +
                                       std::string(name) + " to a non-negative whole number");
    }
    return Field{static_cast<int>(parsed), std::string(name)};
  }

  /// The first of `names` that is set, as an integer.
  std::optional<Field> first_integer(std::initializer_list<std::string_view> names) const {
    for (auto name : names) {
      if (has(name)) return integer(name);
    }
    return std::nullopt;
  }

 private:
  const EnvLookup& lookup_;
};

std::string field_text(const Field& field) {
  return field.name + "=" + std::to_string(field.value);
}

[[noreturn]] void fail_missing(const std::string& present, Launcher launcher,
                               std::string_view missing, std::string_view meaning) {
  COHORT_FAIL(InvalidArgument, present + " is set (" + std::string(to_string(launcher)) + ") but " +
                                   std::string(missing) + " is not; set " + std::string(missing) +
                                   " to " + std::string(meaning) + ", or unset " + present);
}

/// Reads the rank, world size and local pair of an MPI-style launcher; nullopt when absent.
std::optional<Reading> read_mpi_style(const Environment& env, const LauncherVariables& names) {
  const bool present = env.has(names.rank) || env.has(names.world_size) ||
                       env.has(names.local_rank) || env.has(names.local_world_size);
  if (!present) return std::nullopt;
  Reading reading;
  reading.launcher = names.launcher;
  auto rank = env.integer(names.rank);
  auto world_size = env.integer(names.world_size);
  auto local_rank = env.integer(names.local_rank);
  auto local_world_size = env.integer(names.local_world_size);
  const std::string some_set(env.has(names.rank)         ? names.rank
                             : env.has(names.world_size) ? names.world_size
                             : env.has(names.local_rank) ? names.local_rank
                                                         : names.local_world_size);
  if (!rank) fail_missing(some_set, names.launcher, names.rank, "the rank of this process");
  if (!world_size) {
    fail_missing(some_set, names.launcher, names.world_size, "the number of processes in the run");
  }
  if (local_rank.has_value() != local_world_size.has_value()) {
    if (!local_rank) {
      fail_missing(std::string(names.local_world_size), names.launcher, names.local_rank,
                   "the rank of this process on its node");
    }
    fail_missing(std::string(names.local_rank), names.launcher, names.local_world_size,
                 "the number of processes on this node");
  }
  reading.rank = *rank;
  reading.world_size = *world_size;
  reading.local_rank = local_rank;
  reading.local_world_size = local_world_size;
  return reading;
}

/// Keeps a launcher-given id usable as a file name: anything but [A-Za-z0-9._-] becomes '_'.
std::string sanitize_run_id(std::string_view id) {
  std::string out;
  for (char c : id) {
    const bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                       c == '.' || c == '_' || c == '-';
    out.push_back(plain ? c : '_');
  }
  if (out == "." || out == "..") out = "run" + out;
  return out;
}

std::optional<Reading> read_cohortrun(const Environment& env) {
  auto reading = read_mpi_style(env, kCohortrun);
  if (!reading) return reading;
  auto node_rank = env.integer(env::kNodeRank);
  auto num_nodes = env.integer(env::kNumNodes);
  if (node_rank.has_value() != num_nodes.has_value()) {
    if (!node_rank) {
      fail_missing(std::string(env::kNumNodes), Launcher::cohortrun, env::kNodeRank,
                   "the index of this node");
    }
    fail_missing(std::string(env::kNodeRank), Launcher::cohortrun, env::kNumNodes,
                 "the number of nodes");
  }
  reading->node_rank = node_rank;
  reading->num_nodes = num_nodes;
  return reading;
}

std::optional<Reading> read_torchrun(const Environment& env) {
  auto reading = read_mpi_style(env, kTorchrun);
  if (!reading) return reading;
  // The node is torchrun's agent group: one agent per node.
  reading->node_rank = env.integer(env::kTorchGroupRank);
  reading->num_nodes = env.integer(env::kTorchGroupWorldSize);
  if (auto id = env.text(env::kTorchRunId); id && *id != "none") {
    reading->run_id = sanitize_run_id(*id);
  }
  return reading;
}

std::optional<Reading> read_open_mpi(const Environment& env) {
  auto reading = read_mpi_style(env, kOpenMpi);
  if (!reading) return reading;
  // Open MPI 4 (ORTE) exports its job id; Open MPI 5 (PRRTE) the PMIx namespace of the job.
  if (auto id = env.first_text({env::kOmpiJobId, env::kPmixNamespace})) {
    reading->run_id = sanitize_run_id(*id);
  }
  return reading;
}

std::optional<Reading> read_mpich(const Environment& env) {
  auto reading = read_mpi_style(env, kMpich);
  if (!reading) return reading;
  if (auto id = env.text(env::kPmiJobId)) reading->run_id = sanitize_run_id(*id);
  return reading;
}

std::optional<Reading> read_slurm(const Environment& env) {
  if (!env.has(env::kSlurmProcId)) return std::nullopt;
  Reading reading;
  reading.launcher = Launcher::slurm;
  reading.rank = *env.integer(env::kSlurmProcId);
  // SLURM_STEP_NUM_TASKS describes this step; SLURM_NTASKS may be the job's.
  auto world_size = env.first_integer({env::kSlurmStepNumTasks, env::kSlurmNumTasks});
  if (!world_size) {
    fail_missing(std::string(env::kSlurmProcId), Launcher::slurm, env::kSlurmNumTasks,
                 "the number of tasks (start the program with srun)");
  }
  reading.world_size = *world_size;
  reading.local_rank = env.integer(env::kSlurmLocalId);
  if (!reading.local_rank) {
    fail_missing(std::string(env::kSlurmProcId), Launcher::slurm, env::kSlurmLocalId,
                 "the rank of this task on its node (start the program with srun)");
  }
  reading.node_rank = env.integer(env::kSlurmNodeId);
  reading.num_nodes =
      env.first_integer({env::kSlurmStepNumNodes, env::kSlurmNumNodes, env::kSlurmJobNumNodes});
  for (std::string_view name : {env::kSlurmStepTasksPerNode, env::kSlurmTasksPerNode}) {
    auto list = env.text(name);
    if (!list) continue;
    const int node = reading.node_rank ? reading.node_rank->value : 0;
    auto tasks = slurm_tasks_on_node(*list, node);
    if (!tasks) {
      COHORT_FAIL(InvalidArgument, std::string(name) + "='" + *list +
                                       "' has no task count for node " + std::to_string(node) +
                                       "; set " + std::string(name) +
                                       " like '2(x3),1' or unset it");
    }
    reading.local_world_size = Field{*tasks, std::string(name)};
    break;
  }
  if (!reading.local_world_size) {
    if (reading.num_nodes && reading.num_nodes->value == 1) {
      reading.local_world_size = Field{reading.world_size.value, reading.world_size.name};
    } else if (reading.num_nodes && reading.num_nodes->value > 0 &&
               reading.world_size.value % reading.num_nodes->value == 0) {
      reading.local_world_size = Field{reading.world_size.value / reading.num_nodes->value,
                                       reading.world_size.name + "/" + reading.num_nodes->name};
    } else {
      fail_missing(std::string(env::kSlurmProcId), Launcher::slurm, env::kSlurmTasksPerNode,
                   "the tasks on each node, like '4(x2)'");
    }
  }
  if (auto job = env.text(env::kSlurmJobId)) {
    std::string id = *job;
    if (auto step = env.first_text({env::kSlurmStepId, env::kSlurmStepIdOld})) id += "." + *step;
    reading.run_id = sanitize_run_id(id);
  }
  return reading;
}

/// The readings of every launcher present, highest precedence first. Launchers below the first
/// that fail to read are dropped: they only fill in what the first leaves out.
std::vector<Reading> read_launchers(const Environment& env) {
  using Reader = std::optional<Reading> (*)(const Environment&);
  constexpr std::array<Reader, 5> kReaders{read_cohortrun, read_torchrun, read_open_mpi, read_mpich,
                                           read_slurm};
  std::vector<Reading> readings;
  for (Reader reader : kReaders) {
    if (readings.empty()) {
      if (auto reading = reader(env)) readings.push_back(std::move(*reading));
      continue;
    }
    try {
      if (auto reading = reader(env)) readings.push_back(std::move(*reading));
    } catch (const InvalidArgument&) {
    }
  }
  return readings;
}

/// Fills the local and node fields the first reading leaves out from a lower launcher that agrees
/// on rank and world size.
void fill_from_lower_launchers(std::vector<Reading>& readings) {
  Reading& chosen = readings.front();
  for (std::size_t i = 1; i < readings.size(); ++i) {
    const Reading& lower = readings[i];
    if (lower.rank.value != chosen.rank.value ||
        lower.world_size.value != chosen.world_size.value) {
      continue;
    }
    if (!chosen.local_rank && lower.local_rank && lower.local_world_size) {
      chosen.local_rank = lower.local_rank;
      chosen.local_world_size = lower.local_world_size;
    }
    if (!chosen.node_rank && lower.node_rank) chosen.node_rank = lower.node_rank;
    if (!chosen.num_nodes && lower.num_nodes) chosen.num_nodes = lower.num_nodes;
    if (chosen.run_id.empty()) chosen.run_id = lower.run_id;
  }
}

void expect_below(const Field& index, const Field& size) {
  if (index.value >= size.value) {
    COHORT_FAIL(InvalidArgument, field_text(index) + " is not below " + field_text(size) +
                                     "; set " + index.name + " to a value from 0 to " + size.name +
                                     "-1");
  }
}

void expect_positive(const Field& size, std::string_view meaning) {
  if (size.value < 1) {
    COHORT_FAIL(InvalidArgument, field_text(size) + " must be at least 1; set " + size.name +
                                     " to " + std::string(meaning));
  }
}

void expect_not_larger(const Field& part, const Field& whole, std::string_view meaning) {
  if (part.value > whole.value) {
    COHORT_FAIL(InvalidArgument, field_text(part) + " is larger than " + field_text(whole) +
                                     "; set " + part.name + " to " + std::string(meaning));
  }
}

void validate(const Reading& reading) {
  expect_positive(reading.world_size, "the number of processes in the run");
  expect_below(reading.rank, reading.world_size);
  if (reading.local_world_size) {
    expect_positive(*reading.local_world_size, "the number of processes on this node");
    expect_not_larger(*reading.local_world_size, reading.world_size,
                      "the number of processes on this node");
    expect_below(*reading.local_rank, *reading.local_world_size);
  }
  if (reading.num_nodes) {
    expect_positive(*reading.num_nodes, "the number of nodes");
    expect_not_larger(*reading.num_nodes, reading.world_size, "the number of nodes");
    if (reading.node_rank) expect_below(*reading.node_rank, *reading.num_nodes);
  }
}

std::string random_run_id() {
  std::random_device device;
  std::ostringstream out;
  out << "run-" << std::hex;
  for (int i = 0; i < 2; ++i) out << device();
  return out.str();
}

int read_port(const Environment& env) {
  auto port = env.first_integer({env::kMasterPort, env::kTorchMasterPort});
  if (!port) return kDefaultPort;
  if (port->value < 1 || port->value > 65535) {
    COHORT_FAIL(InvalidArgument, field_text(*port) + " is outside 1..65535; set " + port->name +
                                     " to a free TCP port on the master host");
  }
  return port->value;
}

}  // namespace

std::string_view to_string(Launcher launcher) noexcept {
  switch (launcher) {
    case Launcher::none:
      return "none";
    case Launcher::cohortrun:
      return "cohortrun";
    case Launcher::torchrun:
      return "torchrun";
    case Launcher::open_mpi:
      return "Open MPI";
    case Launcher::mpich:
      return "MPICH";
    case Launcher::slurm:
      return "Slurm";
  }
  return "unknown";
}

LaunchInfo LaunchInfo::from_environment() {
  return from_environment(process_environment());
}

LaunchInfo LaunchInfo::from_environment(const EnvLookup& lookup) {
  const Environment env(lookup);
  LaunchInfo info;
  std::vector<Reading> readings = read_launchers(env);
  if (!readings.empty()) {
    fill_from_lower_launchers(readings);
    const Reading& reading = readings.front();
    if (!reading.local_rank) {
      const LauncherVariables& names = reading.launcher == Launcher::mpich      ? kMpich
                                       : reading.launcher == Launcher::open_mpi ? kOpenMpi
                                       : reading.launcher == Launcher::torchrun ? kTorchrun
                                                                                : kCohortrun;
      fail_missing(std::string(names.rank), reading.launcher, names.local_rank,
                   "the rank of this process on its node (and " +
                       std::string(names.local_world_size) + " to the processes on the node)");
    }
    validate(reading);
    info.launcher = reading.launcher;
    info.rank = reading.rank.value;
    info.world_size = reading.world_size.value;
    info.local_rank = reading.local_rank->value;
    info.local_world_size = reading.local_world_size->value;
    info.given.local_rank = reading.local_rank->name;
    if (reading.node_rank) info.given.node_rank = reading.node_rank->name;
    if (reading.num_nodes) info.given.num_nodes = reading.num_nodes->name;
    // When a launcher gives no node count, assume equal nodes; round up for uneven ones.
    info.num_nodes = reading.num_nodes
                         ? reading.num_nodes->value
                         : (info.world_size + info.local_world_size - 1) / info.local_world_size;
    info.node_rank = reading.node_rank
                         ? reading.node_rank->value
                         : std::min(info.rank / info.local_world_size, info.num_nodes - 1);
    if (reading.node_rank && !reading.num_nodes) {
      info.num_nodes = std::max(info.num_nodes, info.node_rank + 1);
    }
    info.run_id = reading.run_id;
  }

  info.master_port = read_port(env);
  info.store_is_external = env::boolean(lookup, env::kStoreExternal);
  // torchrun writes "True"; read as a switch so that any spelling of true counts.
  info.torch_agent_store =
      info.launcher == Launcher::torchrun && env::boolean(lookup, env::kTorchUseAgentStore);
  if (auto restarts = env.first_integer({env::kRestartCount, env::kTorchRestartCount})) {
    info.restart_count = restarts->value;
  }
  const bool several_nodes = info.num_nodes > 1 || info.local_world_size < info.world_size;
  if (auto address = env.first_text({env::kMasterAddr, env::kTorchMasterAddr})) {
    info.master_addr = *address;
  } else if (several_nodes) {
    std::optional<std::string> guess;
    for (std::string_view name :
         {env::kSlurmStepNodeList, env::kSlurmJobNodeList, env::kSlurmNodeList}) {
      auto list = env.text(name);
      if (!list) continue;
      guess = first_slurm_host(*list);
      if (!guess) {
        COHORT_FAIL(InvalidArgument, std::string(name) + "='" + *list +
                                         "' is not a Slurm host list; set MASTER_ADDR to the "
                                         "host of rank 0");
      }
      break;
    }
    if (!guess) {
      COHORT_FAIL(InvalidArgument,
                  "the world spans " + std::to_string(info.num_nodes) + " nodes (world size " +
                      std::to_string(info.world_size) + ", " +
                      std::to_string(info.local_world_size) + " per node, via " +
                      std::string(to_string(info.launcher)) +
                      ") but no master address is set; set MASTER_ADDR (or COHORT_MASTER_ADDR) "
                      "to the host name or address of the node running rank 0");
    }
    info.master_addr = *guess;
  }

  if (auto id = env.text(env::kRunId)) {
    info.run_id = *id;
  } else if (info.run_id.empty()) {
    info.run_id = info.world_size == 1
                      ? random_run_id()
                      : sanitize_run_id(info.master_addr + "-" + std::to_string(info.master_port));
  }
  return info;
}

std::string LaunchInfo::describe() const {
  std::string out = "rank " + std::to_string(rank) + " of " + std::to_string(world_size) +
                    " (local " + std::to_string(local_rank) + " of " +
                    std::to_string(local_world_size) + ", node " + std::to_string(node_rank) +
                    " of " + std::to_string(num_nodes) + ")";
  if (launcher == Launcher::none) {
    out += " without a launcher";
  } else {
    out += " via ";
    out += to_string(launcher);
  }
  out += ", store " + master_addr + ":" + std::to_string(master_port);
  if (store_is_external) out += " (hosted by the launcher)";
  return out;
}

std::optional<std::string> first_slurm_host(std::string_view host_list) {
  // The first host ends at the first comma outside brackets.
  std::size_t end = 0;
  int depth = 0;
  for (; end < host_list.size(); ++end) {
    const char c = host_list[end];
    if (c == '[') {
      if (++depth > 1) return std::nullopt;
    } else if (c == ']') {
      if (--depth < 0) return std::nullopt;
    } else if (c == ',' && depth == 0) {
      break;
    }
  }
  if (depth != 0) return std::nullopt;
  const std::string_view entry = host_list.substr(0, end);
  if (entry.empty()) return std::nullopt;
  // Each bracket group "[007-009,012]" contributes the start of its first range, as written.
  std::string host;
  std::size_t i = 0;
  while (i < entry.size()) {
    if (entry[i] != '[') {
      host.push_back(entry[i++]);
      continue;
    }
    const std::size_t close = entry.find(']', i);
    const std::string_view group = entry.substr(i + 1, close - i - 1);
    const std::string_view first = group.substr(0, group.find_first_of(",-"));
    if (first.empty()) return std::nullopt;
    for (char c : first) {
      if (c < '0' || c > '9') return std::nullopt;
    }
    host.append(first);
    i = close + 1;
  }
  return host;
}

std::optional<int> slurm_tasks_on_node(std::string_view tasks_per_node, int node_index) {
  if (node_index < 0) return std::nullopt;
  int node = 0;
  std::size_t position = 0;
  while (position < tasks_per_node.size()) {
    std::size_t comma = tasks_per_node.find(',', position);
    if (comma == std::string_view::npos) comma = tasks_per_node.size();
    const std::string_view item = tasks_per_node.substr(position, comma - position);
    position = comma + 1;
    // "N" or "N(xK)".
    int tasks = 0;
    auto [end, error] = std::from_chars(item.data(), item.data() + item.size(), tasks);
    if (error != std::errc{} || end == item.data() || tasks < 0) return std::nullopt;
    int repeat = 1;
    const std::string_view rest(end, static_cast<std::size_t>(item.data() + item.size() - end));
    if (!rest.empty()) {
      if (rest.size() < 4 || rest.substr(0, 2) != "(x" || rest.back() != ')') return std::nullopt;
      const std::string_view count = rest.substr(2, rest.size() - 3);
      auto [count_end, count_error] =
          std::from_chars(count.data(), count.data() + count.size(), repeat);
      if (count_error != std::errc{} || count_end != count.data() + count.size() || repeat < 1) {
        return std::nullopt;
      }
    }
    if (node_index < node + repeat) return tasks;
    node += repeat;
  }
  return std::nullopt;
}

}  // namespace cohort
