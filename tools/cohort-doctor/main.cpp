// cohort-doctor: whether this node is fit to train with cohort, and what to fix.
//
//   cohort-doctor                                   # this machine: a report for people
//   cohort-doctor --json                            # the same as one JSON object
//   cohortrun --nproc-per-node 8 cohort-doctor      # one report per node, a summary from rank 0
//   cohortrun --nproc-per-node 8 cohort-doctor --collective --min-busbw 200
//                                                   # and every collective, held to a floor
//
// Exit status: 0 when no finding is an error, 1 when one is (on rank 0 under a launcher: on any
// rank), 2 for a usage error.

#include "collective.hpp"
#include "probe.hpp"
#include "report.hpp"

#include <cohort/comm/world.hpp>
#include <cohort/launch/rendezvous.hpp>
#include <cohort/launch/store_group.hpp>
#include <cohort/launch/tcp_store.hpp>
#include <cohort/version.hpp>

#include <CLI/CLI.hpp>
#include <cli_checks.hpp>

#include <exception>
#include <iostream>
#include <optional>

namespace {

using namespace cohort::doctor;
namespace cli = cohort::cli;

struct Options {
  bool json = false;
  bool collective = false;
  double min_busbw = 0.0;
  std::string bytes = "64M";
  int iters = 20;
  int ranks = 0;
  double timeout_s = 60.0;
  ProbeOptions probe;
};

Report probe_everything(const Options& options) {
  Report report;
  probe_host(report, options.probe);
  probe_cuda(report);
  probe_gpu_system(report, options.probe);
  report.busbw_floor_gbps = options.min_busbw;
  return report;
}

nlohmann::json summary_json(const cohort::World* world, const cohort::LaunchInfo& launch,
                            const Report& report, const std::vector<Finding>& findings) {
  nlohmann::json problems = nlohmann::json::array();
  int errors = 0, warnings = 0;
  for (const Finding& f : findings) {
    if (f.severity == Severity::error) ++errors;
    if (f.severity == Severity::warn) ++warnings;
    if (f.severity == Severity::error || f.severity == Severity::warn) {
      problems.push_back({{"severity", std::string(to_string(f.severity))},
                          {"topic", f.topic},
                          {"message", f.message},
                          {"advice", f.advice}});
    }
  }
  return {{"rank", world != nullptr ? world->rank() : launch.rank},
          {"local_rank", launch.local_rank},
          {"node_rank", world != nullptr ? world->node_rank() : launch.node_rank},
          {"host", report.hostname},
          {"exit_status", exit_status(findings)},
          {"errors", errors},
          {"warnings", warnings},
          {"problems", problems},
          {"fingerprint", fingerprint(report)}};
}

RankSummary summary_from_json(const nlohmann::json& in) {
  RankSummary summary;
  summary.rank = in.at("rank");
  summary.local_rank = in.at("local_rank");
  summary.node_rank = in.at("node_rank");
  summary.host = in.at("host");
  summary.exit_status = in.at("exit_status");
  summary.errors = in.at("errors");
  summary.warnings = in.at("warnings");
  for (const auto& p : in.at("problems")) {
    summary.problems.push_back(
        Finding{p.at("severity") == "error" ? Severity::error : Severity::warn, p.at("topic"),
                p.at("message"), p.at("advice")});
  }
  summary.fingerprint = in.at("fingerprint").get<std::map<std::string, std::string>>();
  return summary;
}

void print_report(const Report& report, const std::vector<Finding>& findings, bool json) {
  if (json) {
    std::cout << to_json(report, findings).dump(2) << '\n';
  } else {
    std::cout << render_text(report, findings);
  }
  std::cout.flush();
}

/// `--collective` without a launcher: `ranks` host ranks as threads of this process.
int run_alone(const Options& options) {
  Report report = probe_everything(options);
  if (options.collective) {
    const std::size_t bytes = *cli::size_bytes(options.bytes);
    std::vector<CollectiveResult> results;
    cohort::WorldOptions world_options;
    world_options.timeout =
        std::chrono::milliseconds(static_cast<long long>(options.timeout_s * 1e3));
    cohort::run_local(
        std::max(1, options.ranks),
        [&](cohort::World& world) {
          auto mine = run_collectives(world, bytes, options.iters);
          if (world.rank() == 0) results = std::move(mine);
        },
        world_options);
    report.collectives = std::move(results);
  }
  const std::vector<Finding> findings = diagnose(report);
  print_report(report, findings, options.json);
  return exit_status(findings);
}

/// Under a launcher: every rank probes, joins the others through the store, and (with
/// --collective) forms a world and runs the collectives; local rank 0 prints its node's report
/// and rank 0 a summary of all ranks.
int run_launched(const Options& options, const cohort::LaunchInfo& launch) {
  Report report = probe_everything(options);
  const auto timeout = std::chrono::milliseconds(static_cast<long long>(options.timeout_s * 1e3));
  std::shared_ptr<cohort::Store> store;
  std::optional<cohort::World> world;
  try {
    store = cohort::connect_store(launch, timeout);
    if (options.collective) {
      cohort::WorldOptions world_options;
      world_options.launch = launch;
      world_options.store = store;
      world_options.timeout = timeout;
      world.emplace(cohort::init(world_options));
      report.collectives = run_collectives(*world, *cli::size_bytes(options.bytes), options.iters);
    }
  } catch (const std::exception& error) {
    // This rank cannot reach the others: its own report says so, and why.
    std::vector<Finding> findings = diagnose(report);
    findings.push_back(Finding{Severity::error, "joining the ranks",
                               std::string("rank ") + std::to_string(launch.rank) +
                                   " could not meet the other ranks: " + error.what(),
                               "see the rendezvous and store findings above"});
    print_report(report, findings, options.json);
    return exit_status(findings);
  }
  const std::vector<Finding> findings = diagnose(report);
  cohort::StoreGroup group(std::make_shared<cohort::PrefixStore>("cohort-doctor", store),
                           launch.rank, launch.world_size, timeout);
  const std::string report_text =
      launch.local_rank == 0
          ? (options.json ? to_json(report, findings).dump() : render_text(report, findings))
          : std::string();
  const auto summaries = group.all_gather(
      "summary", summary_json(world ? &*world : nullptr, launch, report, findings).dump());
  int status = exit_status(findings);
  if (!options.json && launch.local_rank == 0) {
    std::cout << "cohort-doctor: node " << report.hostname << " (node " << launch.node_rank
              << " of " << launch.num_nodes << ", reported by rank " << launch.rank << ")\n"
              << report_text;
    std::cout.flush();
  }
  // The node reports first, then the summary.
  const auto reports = group.all_gather("report", report_text);
  if (launch.rank == 0) {
    std::vector<RankSummary> ranks;
    for (const std::string& text : summaries)
      ranks.push_back(summary_from_json(nlohmann::json::parse(text)));
    const Finding agreement = check_nodes_agree(ranks);
    int worst = 0;
    for (const RankSummary& r : ranks) worst = std::max(worst, r.exit_status);
    if (options.json) {
      nlohmann::ordered_json out;
      out["nodes"] = nlohmann::ordered_json::array();
      for (const std::string& text : reports) {
        if (!text.empty()) out["nodes"].push_back(nlohmann::ordered_json::parse(text));
      }
      out["ranks"] = nlohmann::ordered_json::array();
      for (const std::string& text : summaries) {
        out["ranks"].push_back(nlohmann::ordered_json::parse(text));
      }
      out["agreement"] = {{"severity", std::string(to_string(agreement.severity))},
                          {"message", agreement.message}};
      out["verdict"] = worst == 0 ? "pass" : "fail";
      out["exit_status"] = worst;
      std::cout << out.dump(2) << '\n';
    } else {
      std::cout << render_summary(ranks, agreement);
    }
    std::cout.flush();
    status = worst;
  }
  group.barrier("done");
  world.reset();
  if (auto served = std::dynamic_pointer_cast<cohort::TcpStore>(store)) {
    served->wait_for_clients(timeout);
  }
  return status;
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  CLI::App app{
      "cohort-doctor: checks this node for training with cohort and says what to fix: GPUs, "
      "CUDA, NCCL, cuBLAS, cuDNN, the GPUs' links, ECC, clocks and modes (NVML), PCIe and RDMA "
      "ports (sysfs), the settings cohort reads (with its own parsers), the transport and store "
      "that will run, the rendezvous address, /dev/shm and limits, and an inventory of the "
      "host. Under a launcher each node reports once and rank 0 sums up; --collective also "
      "runs every collective across the ranks.\n"
      "Exit status: 0 when nothing is an error, 1 when something is, 2 for a usage error.",
      "cohort-doctor"};
  cli::conventions(app);
  app.add_flag("--json", options.json, "Print the findings as one JSON object");
  app.add_flag("--collective", options.collective,
               "Join all ranks and run all-reduce, reduce-scatter, all-gather and broadcast, "
               "checked and timed");
  app.add_option("--min-busbw", options.min_busbw,
                 "With --collective: fail any collective below this bus bandwidth (GB/s); 0: no "
                 "floor")
      ->check(cli::number(0.0, 1e6));
  app.add_option("--bytes", options.bytes, "With --collective: message size (K, M, G suffixes)")
      ->check(cli::size_text());
  app.add_option("--iters", options.iters, "With --collective: timed runs per collective")
      ->check(cli::whole(1, 1e6));
  app.add_option("--ranks", options.ranks,
                 "With --collective and no launcher: this many host ranks as threads")
      ->check(cli::whole(1, 256));
  app.add_option("--timeout", options.timeout_s, "Seconds to wait for the other ranks")
      ->check(cli::positive(1e6));
  app.add_option("--sysfs-root", options.probe.sysfs_root,
                 "Read sysfs under this folder instead of / (tests, containers)")
      ->check(CLI::ExistingDirectory);
  app.add_option("--nvml-library", options.probe.nvml_library,
                 "The NVML library to load (default libnvidia-ml.so.1)");
  app.set_version_flag("--version", std::string("cohort-doctor ") + cohort::version());
  if (const std::optional<int> status = cli::parse(app, argc, argv)) return *status;

  // Flags that do nothing without --collective, or --ranks under a launcher, are refused.
  std::optional<cohort::LaunchInfo> launch;
  try {
    launch = cohort::LaunchInfo::from_environment();
  } catch (const std::exception&) {
    // The launcher finding explains it; the report is still printed.
  }
  const bool launched = launch && launch->launcher != cohort::Launcher::none;
  if (!options.collective) {
    for (const char* flag : {"--min-busbw", "--bytes", "--iters", "--ranks"}) {
      if (app.count(flag) > 0) {
        return cli::usage_error(app, std::string(flag) + " applies only with --collective");
      }
    }
  }
  if (launched && app.count("--ranks") > 0) {
    return cli::usage_error(app,
                            "--ranks starts host ranks as threads, but this process was "
                            "started by a launcher (" +
                                std::string(cohort::to_string(launch->launcher)) +
                                "), which chose the ranks: drop --ranks");
  }

  try {
    if (launched && launch->world_size > 1) return run_launched(options, *launch);
    return run_alone(options);
  } catch (const std::exception& error) {
    std::cerr << "cohort-doctor: " << error.what() << '\n';
    return 1;
  }
}
