// The settings the library reads, through its own parsers; secrets; what will run; the
// rendezvous address.

#include "checks.hpp"
#include "checks_util.hpp"

#include <cohort/comm/transport.hpp>
#include <cohort/core/env.hpp>
#include <cohort/core/error.hpp>
#include <cohort/core/logging.hpp>
#include <cohort/launch/launch_info.hpp>
#include <cohort/launch/rendezvous.hpp>

#include <algorithm>
#include <array>
#include <cctype>

namespace cohort::doctor {

namespace {

/// The variables the library reads (include/cohort/core/env.hpp), for "did you mean".
constexpr std::array<std::string_view, 22> kLibraryVariables = {
    env::kLogLevel,       env::kTimeout,           env::kDebugCollectives,
    env::kAllowSharedGpu, env::kDebugStreams,      env::kHostTransport,
    env::kStore,          env::kStoreToken,        env::kStoreExternal,
    env::kRank,           env::kWorldSize,         env::kLocalRank,
    env::kLocalWorldSize, env::kNodeRank,          env::kNumNodes,
    env::kMasterAddr,     env::kMasterPort,        env::kRunId,
    env::kRestartCount,   env::kCheckpointCrashAt, env::kPython,
    env::kTestBinaryDir};

/// Levenshtein distance, for names a letter or two off.
std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

std::string upper(std::string_view text) {
  std::string result(text);
  for (char& c : result) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return result;
}

/// An error's words without the "cohort: " every library error starts with.
std::string words_of(const std::exception& error) {
  std::string_view text = error.what();
  if (text.starts_with("cohort: ")) text.remove_prefix(8);
  return std::string(text);
}

Finding refused(std::string_view name, const std::exception& error) {
  return Finding{Severity::error, std::string(name), "cohort refuses it: " + words_of(error),
                 "fix or unset " + std::string(name) + " before starting the job"};
}

}  // namespace

std::vector<Finding> check_library_settings(const EnvMap& environment) {
  std::vector<Finding> findings;
  const auto value_of = [&](std::string_view name) { return detail::lookup(environment, name); };
  const auto present = [&](std::string_view name) {
    const auto value = value_of(name);
    return value && !value->empty();
  };
  if (present(env::kTimeout)) {
    try {
      const auto timeout = env::parse_duration(env::kTimeout, *value_of(env::kTimeout));
      findings.push_back(
          Finding{Severity::ok, std::string(env::kTimeout),
                  "collective and rendezvous deadline " + env::describe_duration(timeout), ""});
    } catch (const std::exception& error) {
      findings.push_back(refused(env::kTimeout, error));
    }
  }
  if (present(env::kLogLevel) && !parse_log_level(*value_of(env::kLogLevel))) {
    findings.push_back(Finding{
        Severity::error, std::string(env::kLogLevel),
        "cohort refuses it: '" + *value_of(env::kLogLevel) + "' is not a log level (init() fails)",
        "set error, warn, info or debug"});
  }
  for (const std::string_view name :
       {env::kDebugCollectives, env::kAllowSharedGpu, env::kDebugStreams, env::kStoreExternal}) {
    if (!present(name)) continue;
    try {
      (void)env::parse_bool(name, *value_of(name));
    } catch (const std::exception& error) {
      findings.push_back(refused(name, error));
    }
  }
  if (present(env::kHostTransport)) {
    try {
      (void)parse_host_transport(*value_of(env::kHostTransport));
    } catch (const std::exception& error) {
      findings.push_back(refused(env::kHostTransport, error));
    }
  }
  // COHORT_STORE through plan_store, with the launch the variables describe (a broken launch is
  // the launcher finding's).
  if (present(env::kStore)) {
    try {
      const EnvLookup lookup = [&environment](std::string_view name) {
        return detail::lookup(environment, name);
      };
      LaunchInfo info;
      try {
        info = LaunchInfo::from_environment(lookup);
      } catch (const Error&) {
        info.world_size = 2;  // a launch: the store choice is what matters here
        info.launcher = Launcher::cohortrun;
      }
      (void)plan_store(info, lookup);
    } catch (const std::exception& error) {
      findings.push_back(refused(env::kStore, error));
    }
  }
  // A COHORT_ name a letter or two away from one the library reads is most likely a typo that
  // the library silently ignores.
  for (const auto& [name, value] : environment) {
    if (!name.starts_with("COHORT_")) continue;
    if (std::find(kLibraryVariables.begin(), kLibraryVariables.end(), name) !=
        kLibraryVariables.end()) {
      continue;
    }
    std::string_view nearest;
    std::size_t best = 3;
    for (const std::string_view known : kLibraryVariables) {
      const std::size_t distance = edit_distance(name, known);
      if (distance < best) {
        best = distance;
        nearest = known;
      }
    }
    if (!nearest.empty()) {
      findings.push_back(Finding{
          Severity::warn, name,
          name + " is not a variable cohort reads (did you mean " + std::string(nearest) + "?)",
          "rename it to " + std::string(nearest)});
    }
  }
  return findings;
}

bool is_secret(std::string_view name) {
  const std::string up = upper(name);
  for (const char* part : {"TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL"}) {
    if (up.find(part) != std::string::npos) return true;
  }
  return up.ends_with("_KEY") || up == "KEY";
}

std::string shown_value(std::string_view name, std::string_view value) {
  if (!is_secret(name)) return std::string(value);
  return "(set, " + std::to_string(value.size()) + " characters, not shown)";
}

TransportCheck check_transport(const EnvMap& environment, bool nccl) {
  TransportCheck check;
  check.backend.topic = "transport";
  check.store.topic = "store";
  const EnvLookup lookup = [&environment](std::string_view name) {
    return detail::lookup(environment, name);
  };
  LaunchInfo info;
  bool launch_ok = true;
  try {
    info = LaunchInfo::from_environment(lookup);
  } catch (const Error&) {
    launch_ok = false;  // the launcher finding says why
  }
  // The ranks per node the launch describes: an even spread, as launchers make it.
  std::vector<int> members(static_cast<std::size_t>(std::max(1, info.num_nodes)),
                           std::max(1, info.local_world_size));
  if (info.num_nodes <= 1)
    members = {std::max(1, std::min(info.world_size, info.local_world_size))};
  try {
    const TransportChoice plan = plan_transport(nccl ? BackendChoice::nccl : BackendChoice::host,
                                                std::nullopt, lookup, members);
    check.backend_name = std::string(to_string(plan.backend));
    check.backend.message = "collectives will run on " + plan.description;
    if (plan.backend == Backend::gloo && info.num_nodes <= 1 && info.world_size > 1) {
      check.backend.severity = Severity::warn;
      check.backend.message +=
          ": TCP loopback within one host, several times slower than "
          "shared memory";
      check.backend.advice = "unset COHORT_HOST_TRANSPORT (or set it to auto or shm)";
    }
  } catch (const std::exception& error) {
    check.backend_name = "unknown";
    check.backend.severity = Severity::error;
    check.backend.message = "cohort would refuse to start: " + words_of(error);
    check.backend.advice = "fix the setting named above";
  }
  if (!launch_ok) {
    check.store_kind = "unknown";
    check.store.severity = Severity::info;
    check.store.message = "unknown: the launch variables are refused (see launcher)";
    return check;
  }
  try {
    const StorePlan store = plan_store(info, lookup);
    check.store_kind = store.kind == StorePlan::Kind::memory  ? "memory"
                       : store.kind == StorePlan::Kind::tcp   ? "tcp"
                       : store.kind == StorePlan::Kind::torch ? "torch"
                                                              : "file";
    check.store.message = "ranks meet through " + store.describe();
    check.store_expected_up = (store.kind == StorePlan::Kind::tcp && info.store_is_external) ||
                              store.kind == StorePlan::Kind::torch;
    if (store.kind == StorePlan::Kind::tcp && !store.has_token && info.num_nodes > 1) {
      check.store.severity = Severity::info;
      check.store.message += ": any host that reaches the port can join or read the keys";
      check.store.advice = "set COHORT_STORE_TOKEN to the same secret on every node";
    }
  } catch (const std::exception& error) {
    check.store_kind = "unknown";
    check.store.severity = Severity::error;
    check.store.message = "cohort would refuse the store: " + words_of(error);
    check.store.advice = "fix COHORT_STORE";
  }
  return check;
}

std::string_view to_string(RendezvousFacts::Reach reach) noexcept {
  switch (reach) {
    case RendezvousFacts::Reach::not_tried:
      return "not tried";
    case RendezvousFacts::Reach::open:
      return "open";
    case RendezvousFacts::Reach::refused:
      return "refused";
    case RendezvousFacts::Reach::timed_out:
      return "timed out";
    case RendezvousFacts::Reach::failed:
      return "failed";
  }
  return "unknown";
}

Finding check_rendezvous(const RendezvousFacts& facts, int num_nodes, bool store_expected_up) {
  Finding finding{Severity::ok, "rendezvous", "", ""};
  if (facts.host.empty()) {
    finding.message = "no rendezvous address in play (one process, or a file or memory store)";
    return finding;
  }
  const std::string address =
      facts.host + ":" + std::to_string(facts.port) + " (" + facts.source + ")";
  if (facts.addresses.empty()) {
    finding.severity = Severity::error;
    finding.message = address + " does not resolve" +
                      (facts.resolve_error.empty() ? std::string() : ": " + facts.resolve_error) +
                      "; every rank's connection to the store fails";
    finding.advice =
        "set MASTER_ADDR (--master-addr) to a name or address every node resolves "
        "(check /etc/hosts or DNS on this node)";
    return finding;
  }
  std::string resolved;
  bool loopback_only = true;
  for (const std::string& a : facts.addresses) {
    resolved += (resolved.empty() ? "" : ", ") + a;
    loopback_only = loopback_only && (a.starts_with("127.") || a == "::1");
  }
  finding.message = address + " resolves to " + resolved;
  if (loopback_only && num_nodes > 1) {
    finding.severity = Severity::error;
    finding.message += ": loopback, which other nodes cannot reach";
    finding.advice = "set MASTER_ADDR to node 0's address on the cluster network";
    return finding;
  }
  switch (facts.reach) {
    case RendezvousFacts::Reach::open: {
      char ms[32];
      std::snprintf(ms, sizeof(ms), "%.1f", facts.connect_ms);
      finding.message += "; a TCP connection to it opened in " + std::string(ms) + " ms";
      return finding;
    }
    case RendezvousFacts::Reach::not_tried:
      return finding;
    default:
      break;
  }
  finding.message += "; nothing answered there (" + std::string(to_string(facts.reach)) +
                     (facts.reach_error.empty() ? std::string() : ": " + facts.reach_error) + ")";
  if (store_expected_up) {
    finding.severity = Severity::error;
    finding.message += ", though the launcher should be serving the store";
    finding.advice =
        "check that the launcher on node 0 is running, that the port is not "
        "firewalled, and that MASTER_PORT is the same on every node";
  } else {
    finding.severity = Severity::info;
    finding.message += ": normal before the job starts (rank 0 starts the store)";
    finding.advice = "if the job then times out joining, check the firewall between the nodes";
  }
  return finding;
}

}  // namespace cohort::doctor
