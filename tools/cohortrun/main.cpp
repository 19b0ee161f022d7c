/// cohortrun: starts the ranks of a cohort run on this node, hosts the rendezvous store, and stops
/// every rank when one fails.
///
///     cohortrun --nproc-per-node 4 ./train --steps 5
///     cohortrun --nproc-per-node 8 --nnodes 2 --node-rank 0 --master-addr node01 ./train

#include "node_sizes.hpp"
#include "supervisor.hpp"

#include <cohort/core/env.hpp>
#include <cohort/core/error.hpp>
#include <cohort/launch/tcp_store.hpp>

#include <CLI/CLI.hpp>
#include <cli_checks.hpp>

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <iomanip>
#include <iostream>
#include <memory>
#include <numeric>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

extern char** environ;

namespace cohortrun {
namespace {

namespace cli = cohort::cli;

struct Options {
  int nproc_per_node = 0;
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr;
  int master_port = -1;  // -1: not given
  std::string run_id;
  double kill_timeout_seconds = 5.0;
  double grace_seconds = 30.0;
  int max_restarts = 0;
  double restart_delay_seconds = 1.0;
  double max_restart_delay_seconds = 60.0;
  bool no_prefix = false;
  std::vector<std::string> command;
};

constexpr int kUsageError = 2;
constexpr int kDefaultMultiNodePort = 29500;

/// `bytes` random bytes as hex, from /dev/urandom (std::random_device if that cannot be read).
std::string random_hex(std::size_t bytes) {
  std::vector<unsigned char> data(bytes);
  std::size_t filled = 0;
  if (const int fd = ::open("/dev/urandom", O_RDONLY | O_CLOEXEC); fd >= 0) {
    while (filled < bytes) {
      const ssize_t count = ::read(fd, data.data() + filled, bytes - filled);
      if (count <= 0) break;
      filled += static_cast<std::size_t>(count);
    }
    ::close(fd);
  }
  if (filled < bytes) {
    std::random_device device;
    for (auto& byte : data) byte = static_cast<unsigned char>(device());
  }
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string hex;
  for (unsigned char byte : data) {
    hex.push_back(kDigits[byte >> 4]);
    hex.push_back(kDigits[byte & 0xf]);
  }
  return hex;
}

/// Seconds as "0.2", "1", "60".
std::string format_seconds(double seconds) {
  std::ostringstream text;
  text << std::setprecision(3) << seconds;
  return text.str();
}

/// Parses the command line; returns an exit status when cohortrun should stop (help, errors).
std::optional<int> parse(int argc, char** argv, Options& options) {
  CLI::App app{
      "Starts --nproc-per-node copies of PROGRAM on this node as the ranks of one cohort run, "
      "hosts the rendezvous store (on node 0), prefixes their output with '[rank R] ', and stops "
      "them all when one fails. Everything from PROGRAM on is passed to it untouched. The ranks' "
      "stdin is /dev/null.",
      "cohortrun"};
  app.add_option("--nproc-per-node", options.nproc_per_node,
                 "Ranks to start on this node (nodes may differ; ranks are numbered node by node)")
      ->required()
      ->check(cli::whole(1, 1 << 16));
  app.add_option("--nnodes", options.nnodes, "Nodes in the run (one cohortrun on each)")
      ->check(cli::whole(1, 1 << 16));
  app.add_option("--node-rank", options.node_rank, "Index of this node, 0 to NNODES-1")
      ->check(cli::whole(0, 1 << 16));
  app.add_option("--master-addr", options.master_addr,
                 "Host of node 0, where the store runs (required with --nnodes > 1; "
                 "default 127.0.0.1 on one node)");
  app.add_option("--master-port", options.master_port,
                 "Port of the store (default 29500 on several nodes, a free port on one)")
      ->check(cli::whole(0, 65535));
  app.add_option("--run-id", options.run_id,
                 "Id shared by all ranks of the run (default: random on one node, derived from "
                 "the master address and port on several)");
  app.add_option("--kill-timeout", options.kill_timeout_seconds,
                 "Seconds between SIGTERM and SIGKILL when stopping the ranks")
      ->check(cli::number(0.0, 86400.0));
  app.add_option("--grace", options.grace_seconds,
                 "Seconds the ranks have to save and exit after cohortrun passes them a SIGTERM "
                 "or SIGINT it received, before SIGKILL")
      ->check(cli::number(0.0, 86400.0));
  app.add_option("--max-restarts", options.max_restarts,
                 "Restart every rank, with a fresh store, up to this many times when one fails "
                 "(not when cohortrun itself is stopped by a signal, nor after a rank's status "
                 "78); one node only")
      ->check(cli::whole(0, 1 << 20));
  app.add_option("--restart-delay", options.restart_delay_seconds,
                 "Seconds to wait before the first restart (default 1); each restart that "
                 "follows an attempt shorter than --max-restart-delay waits twice as long as "
                 "the one before, up to --max-restart-delay; a longer attempt starts again from "
                 "this delay")
      ->check(cli::number(0.0, 86400.0));
  app.add_option("--max-restart-delay", options.max_restart_delay_seconds,
                 "The longest wait before a restart, in seconds (default 60)")
      ->check(cli::number(0.0, 86400.0));
  app.add_flag("--no-prefix", options.no_prefix,
               "Let the ranks write to cohortrun's stdout and stderr directly");
  app.footer(
      "Each rank gets COHORT_RANK, COHORT_WORLD_SIZE, COHORT_LOCAL_RANK, "
      "COHORT_LOCAL_WORLD_SIZE, COHORT_NODE_RANK, COHORT_NUM_NODES, COHORT_MASTER_ADDR, "
      "COHORT_MASTER_PORT, COHORT_RUN_ID, COHORT_RESTART_COUNT and COHORT_STORE_EXTERNAL=1 (and "
      "on one node a fresh COHORT_STORE_TOKEN unless one is set).\n"
      "Exit status:\n"
      "  0      every rank exited 0\n"
      "  75     preempted cleanly: cohortrun passed on a SIGTERM or SIGINT it received and\n"
      "         every rank exited 75 (EX_TEMPFAIL: saved and stopped; requeue the job)\n"
      "  78     a rank exited 78 (EX_CONFIG), whatever the others did: not restarted; the\n"
      "         program says a restart cannot fix this (a checkpoint that can never load)\n"
      "  128+N  cohortrun received signal N (SIGTERM: 143, SIGINT: 130) and the ranks did not\n"
      "         all exit 0, nor all 75\n"
      "  127    PROGRAM cannot be run\n"
      "  2      usage error\n"
      "  1      cohortrun itself failed (such as a store it cannot host)\n"
      "  other  the first failing rank's status, when it failed before any signal reached\n"
      "         cohortrun (128+N when signal N killed it; 75 when it saved and stopped on a\n"
      "         signal of its own), once the others are stopped; with --max-restarts, that\n"
      "         of the last attempt\n"
      "A SIGTERM or SIGINT is passed to every rank, which then have --grace seconds to save\n"
      "and exit; a second one kills them at once. The ranks run in process groups of their\n"
      "own, so a terminal's Ctrl-C reaches them once, through cohortrun.");
  // Stop at PROGRAM: it and everything after it are the ranks' command line.
  app.prefix_command();
  auto usage_error = [&](const std::string& message) {
    std::cerr << "cohortrun: " << message << "\nRun with --help for more information.\n";
    return kUsageError;
  };
  // PROGRAM starts at the first argument that is not one of cohortrun's options, so a mistyped
  // option would be taken for PROGRAM: an argument starting with '-' there is an unknown option
  // (a PROGRAM whose name starts with '-' goes after "--").
  auto unknown_option = [&]() -> std::optional<int> {
    const std::vector<std::string> rest = app.remaining();
    if (!rest.empty() && rest.front().starts_with("-") && rest.front() != "--") {
      return usage_error("unknown option '" + rest.front() +
                         "' (PROGRAM and its arguments come "
                         "after cohortrun's options; put \"--\" before a PROGRAM named -...)");
    }
    return std::nullopt;
  };
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    if (auto status = unknown_option()) return status;
    const int status = app.exit(error);
    return status == 0 ? 0 : kUsageError;
  }
  if (auto status = unknown_option()) return status;
  options.command = app.remaining();
  if (!options.command.empty() && options.command.front() == "--") {
    options.command.erase(options.command.begin());
  }
  if (options.command.empty()) return usage_error("no PROGRAM given");
  if (options.max_restart_delay_seconds < options.restart_delay_seconds) {
    return usage_error("--max-restart-delay " + format_seconds(options.max_restart_delay_seconds) +
                       " is below --restart-delay " +
                       format_seconds(options.restart_delay_seconds));
  }
  if (options.node_rank >= options.nnodes) {
    return usage_error("--node-rank " + std::to_string(options.node_rank) +
                       " is not below --nnodes " + std::to_string(options.nnodes));
  }
  if (options.nnodes > 1) {
    if (options.max_restarts > 0) {
      return usage_error(
          "--max-restarts needs --nnodes 1: restarting ranks on several nodes "
          "needs every node's launcher to agree (use torchrun's elastic agent)");
    }
    if (options.master_addr.empty()) {
      return usage_error("--nnodes " + std::to_string(options.nnodes) +
                         " needs --master-addr, the host name or address of node 0 (where the "
                         "store runs and rank 0 lives)");
    }
    if (options.master_port == 0) {
      return usage_error(
          "--master-port 0 cannot be used with several nodes: the other nodes "
          "must know the port");
    }
  }
  return std::nullopt;
}

/// This process's environment without the variables cohortrun sets for its ranks.
std::vector<std::string> inherited_environment(const std::set<std::string>& replaced) {
  std::vector<std::string> environment;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    const std::string text(*entry);
    if (replaced.count(text.substr(0, text.find('='))) == 0) environment.push_back(text);
  }
  return environment;
}

/// One attempt: hosts a fresh store (on node 0), starts every rank of this node, supervises them.
SuperviseOutcome run_once(Options options, int restart) {
  const bool single_node = options.nnodes == 1;
  const bool hosts_store = options.node_rank == 0;

  std::optional<std::string> token;
  if (std::string given = cohort::env::store_token(); !given.empty()) token = std::move(given);
  if (single_node && !token) token = random_hex(16);

  std::unique_ptr<cohort::TcpStoreServer> server;
  if (hosts_store) {
    cohort::TcpStoreServerOptions server_options;
    // On one node with the default address, nobody else needs to reach the store.
    server_options.host =
        single_node && options.master_addr == "127.0.0.1" ? "127.0.0.1" : "0.0.0.0";
    server_options.port = options.master_port;
    server_options.token = token.value_or("");
    try {
      server = std::make_unique<cohort::TcpStoreServer>(server_options);
    } catch (const cohort::Error& error) {
      std::cerr << "cohortrun: cannot host the store on " << server_options.host << ":"
                << options.master_port << ": " << error.what() << "\n";
      return SuperviseOutcome{1, 0};
    }
    options.master_port = server->port();
  }

  if (options.run_id.empty()) {
    options.run_id = single_node ? random_hex(8)
                                 : "cohortrun-" + options.master_addr + "-" +
                                       std::to_string(options.master_port);
  }

  namespace env = cohort::env;
  std::set<std::string> replaced;
  for (std::string_view name :
       {env::kRank, env::kWorldSize, env::kLocalRank, env::kLocalWorldSize, env::kNodeRank,
        env::kNumNodes, env::kMasterAddr, env::kMasterPort, env::kRunId, env::kStoreExternal,
        env::kStoreToken, env::kRestartCount}) {
    replaced.emplace(name);
  }
  const std::vector<std::string> base = inherited_environment(replaced);
  // Nodes may differ in size: Note [Nodes of unequal size].
  std::vector<int> sizes{options.nproc_per_node};
  if (!single_node) {
    try {
      sizes = exchange_node_sizes({options.master_addr, options.master_port, token.value_or(""),
                                   options.run_id, options.node_rank, options.nnodes,
                                   options.nproc_per_node, env::timeout()});
    } catch (const cohort::Error& error) {
      std::cerr << "cohortrun: node " << options.node_rank << " could not learn the other nodes' "
                << "sizes: " << error.what() << "\n";
      return SuperviseOutcome{1, 0};
    }
  }
  const int world_size = std::accumulate(sizes.begin(), sizes.end(), 0);
  const int first_rank = first_rank_of(sizes, single_node ? 0 : options.node_rank);
  std::vector<RankSpec> ranks;
  for (int local = 0; local < options.nproc_per_node; ++local) {
    RankSpec spec;
    spec.rank = first_rank + local;
    spec.environment = base;
    auto set = [&](std::string_view name, const std::string& value) {
      spec.environment.push_back(std::string(name) + "=" + value);
    };
    set(env::kRank, std::to_string(spec.rank));
    set(env::kWorldSize, std::to_string(world_size));
    set(env::kLocalRank, std::to_string(local));
    set(env::kLocalWorldSize, std::to_string(options.nproc_per_node));
    set(env::kNodeRank, std::to_string(options.node_rank));
    set(env::kNumNodes, std::to_string(options.nnodes));
    set(env::kMasterAddr, options.master_addr);
    set(env::kMasterPort, std::to_string(options.master_port));
    set(env::kRunId, options.run_id);
    set(env::kRestartCount, std::to_string(restart));
    set(env::kStoreExternal, "1");
    if (token) set(env::kStoreToken, *token);
    ranks.push_back(std::move(spec));
  }

  SupervisorOptions supervisor_options;
  supervisor_options.command = options.command;
  supervisor_options.prefix_output = !options.no_prefix;
  supervisor_options.kill_timeout =
      std::chrono::milliseconds(std::llround(options.kill_timeout_seconds * 1000.0));
  supervisor_options.grace =
      std::chrono::milliseconds(std::llround(options.grace_seconds * 1000.0));
  return supervise(supervisor_options, ranks);
}

/// Waits `seconds`, or until cohortrun receives SIGINT or SIGTERM; returns that signal, or 0.
int wait_unless_signalled(double seconds) {
  sigset_t stopping;
  sigemptyset(&stopping);
  sigaddset(&stopping, SIGINT);
  sigaddset(&stopping, SIGTERM);
  sigset_t previous;
  ::sigprocmask(SIG_BLOCK, &stopping, &previous);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  int received = 0;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::nanoseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    timespec timeout{static_cast<time_t>(left.count() / 1'000'000'000),
                     static_cast<long>(left.count() % 1'000'000'000)};
    const int signal_number = ::sigtimedwait(&stopping, nullptr, &timeout);
    if (signal_number > 0) {
      received = signal_number;
      break;
    }
    if (errno != EINTR) break;  // EAGAIN: the time is up
  }
  ::sigprocmask(SIG_SETMASK, &previous, nullptr);
  return received;
}

/// Note [Restarts]: a failed attempt (a rank's non-zero status, including a rank that saved and
/// stopped after a preemption signal) is followed by a new one while restarts remain, unless
/// cohortrun itself received SIGINT or SIGTERM (then the machine is going away), PROGRAM cannot
/// be run (127), or a rank exited 78: EX_CONFIG, the program's way of saying that a restart
/// cannot fix this (a checkpoint that can never load, a bad configuration). Every attempt gets a
/// new store server, port and run id on one node, so nothing of the failed world's keys
/// survives; the ranks find their place again by loading the latest checkpoint.
///
/// Restarts back off: the first waits --restart-delay, each next one twice the one before, up to
/// --max-restart-delay. An attempt that ran at least --max-restart-delay was not failing in a
/// loop (it outlived the longest wait), so the restart after it waits --restart-delay again.
/// A SIGINT or SIGTERM during a wait ends the run with the last attempt's status. Between
/// attempts both stay blocked (each supervisor blocks them as it ends and unblocks them once its
/// handlers are in place), so one that comes while no supervisor runs is not lost to the default
/// action: the wait takes it, or the next attempt's supervisor passes it on to the ranks.
///
/// A failure that repeats identically is not stopped early: the ranks' status cannot tell a
/// deterministic error from a transient one (every rank whose peer died exits alike, whatever
/// killed the peer), and their output differs in pids and times. A program that knows a restart
/// cannot help says so with 78; the backoff bounds the cost of everything else.
int run(Options options) {
  if (options.master_addr.empty()) options.master_addr = "127.0.0.1";
  if (options.master_port < 0)
    options.master_port = options.nnodes == 1 ? 0 : kDefaultMultiNodePort;
  const bool fixed_run_id = !options.run_id.empty();
  double delay = options.restart_delay_seconds;
  for (int restart = 0;; ++restart) {
    Options attempt = options;
    if (!fixed_run_id)
      attempt.run_id.clear();
    else if (restart > 0)
      attempt.run_id += "-restart" + std::to_string(restart);
    const auto started = std::chrono::steady_clock::now();
    const SuperviseOutcome outcome = run_once(attempt, restart);
    const double ran =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    const int restarts_left = options.max_restarts - restart;
    if (outcome.unrecoverable_rank >= 0) {
      std::cerr << "cohortrun: rank " << outcome.unrecoverable_rank << " exited with status "
                << kUnrecoverableStatus << " (EX_CONFIG): the program says a restart cannot "
                << "fix this";
      if (restarts_left > 0 && outcome.received_signal == 0) {
        std::cerr << "; not restarting (" << restarts_left << " restart"
                  << (restarts_left == 1 ? "" : "s") << " left)";
      }
      std::cerr << "\n";
    }
    constexpr int kCannotExecute = 127;  // restarting cannot help
    if (outcome.status == 0 || outcome.status == kCannotExecute ||
        outcome.status == kUnrecoverableStatus || outcome.received_signal != 0 ||
        restarts_left <= 0) {
      return outcome.status;
    }
    if (ran >= options.max_restart_delay_seconds) delay = options.restart_delay_seconds;
    std::cerr << "cohortrun: the run failed with status " << outcome.status << "; restarting every "
              << "rank in " << format_seconds(delay) << " s (restart " << restart + 1 << " of "
              << options.max_restarts << ")" << std::endl;
    if (const int signal_number = wait_unless_signalled(delay)) {
      std::cerr << "cohortrun: received " << (signal_number == SIGINT ? "SIGINT" : "SIGTERM")
                << " while waiting to restart; not restarting\n";
      return outcome.status;
    }
    delay = std::min(delay * 2, options.max_restart_delay_seconds);
  }
}

}  // namespace
}  // namespace cohortrun

int main(int argc, char** argv) {
  cohortrun::Options options;
  if (auto status = cohortrun::parse(argc, argv, options)) return *status;
  try {
    return cohortrun::run(std::move(options));
  } catch (const std::exception& error) {
    std::cerr << "cohortrun: " << error.what() << "\n";
    return 1;
  }
}
