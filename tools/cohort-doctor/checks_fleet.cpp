// Checks across ranks: the collectives measured by --collective, and the nodes compared.

#include "checks.hpp"

#include <cstdio>
#include <map>
#include <set>
#include <sstream>

namespace cohort::doctor {

double bus_factor(std::string_view name, int ranks) {
  if (ranks <= 1) return name == "broadcast" ? 1.0 : 0.0;
  const double n = ranks;
  if (name == "all_reduce") return 2.0 * (n - 1.0) / n;
  if (name == "reduce_scatter" || name == "all_gather") return (n - 1.0) / n;
  return 1.0;  // broadcast
}

std::vector<Finding> check_collectives(std::span<const CollectiveResult> results,
                                       double floor_gbps) {
  std::vector<Finding> findings;
  for (const CollectiveResult& r : results) {
    char text[256];
    std::snprintf(text, sizeof(text),
                  "%d ranks, %.3g MiB messages: %.1f us, algbw %.3f GB/s, busbw %.3f GB/s", r.ranks,
                  static_cast<double>(r.bytes) / 1048576.0, r.time_us, r.algbw_gbps, r.busbw_gbps);
    Finding finding{Severity::ok, "collective " + r.name, text, ""};
    if (r.wrong > 0) {
      finding.severity = Severity::error;
      finding.message += "; " + std::to_string(r.wrong) + " WRONG values";
      finding.advice =
          "the transport corrupts data: run allreduce_bench -c 1 on the same ranks "
          "and report it";
    } else if (floor_gbps > 0.0 && r.ranks > 1 && r.busbw_gbps < floor_gbps) {
      char floor[96];
      std::snprintf(floor, sizeof(floor), "; below the floor of %.3g GB/s (--min-busbw): FAIL",
                    floor_gbps);
      finding.severity = Severity::error;
      finding.message += floor;
      finding.advice =
          "compare with allreduce_bench on the same ranks; check the links above "
          "(PCIe width, NVLinks down, RDMA ports) and NCCL_DEBUG=INFO";
    } else if (floor_gbps > 0.0 && r.ranks > 1) {
      char floor[64];
      std::snprintf(floor, sizeof(floor), "; floor %.3g GB/s: pass", floor_gbps);
      finding.message += floor;
    }
    findings.push_back(std::move(finding));
  }
  return findings;
}

Finding check_nodes_agree(std::span<const RankSummary> ranks) {
  Finding finding{Severity::ok, "nodes agree", "", ""};
  if (ranks.empty()) {
    finding.message = "no ranks";
    return finding;
  }
  const RankSummary& first = ranks.front();
  // fact -> value -> hosts
  std::map<std::string, std::map<std::string, std::set<std::string>>> differing;
  for (const RankSummary& rank : ranks) {
    for (const auto& [fact, value] : rank.fingerprint) {
      const auto mine = first.fingerprint.find(fact);
      if (mine == first.fingerprint.end() || mine->second != value) {
        differing[fact][value].insert(rank.host);
        differing[fact][mine == first.fingerprint.end() ? "(none)" : mine->second].insert(
            first.host);
      }
    }
  }
  std::set<std::string> hosts;
  for (const RankSummary& rank : ranks) hosts.insert(rank.host);
  if (differing.empty()) {
    finding.message = "the " + std::to_string(hosts.size()) +
                      " host(s) report the same versions, GPUs, CPU and kernel";
    return finding;
  }
  finding.severity = Severity::warn;
  std::string text;
  for (const auto& [fact, values] : differing) {
    text += (text.empty() ? "" : "; ") + fact + ":";
    for (const auto& [value, where] : values) {
      text += " " + value + " on";
      for (const std::string& host : where) text += " " + host;
    }
  }
  finding.message = "the nodes differ: " + text;
  finding.advice = "give every node the same driver, CUDA, NCCL and cohort build";
  return finding;
}

std::string render_summary(std::span<const RankSummary> ranks, const Finding& agreement) {
  std::ostringstream out;
  struct Node {
    std::string host;
    std::vector<int> ranks;
    int errors = 0;
    int warnings = 0;
  };
  std::map<int, Node> nodes;
  int errors = 0;
  for (const RankSummary& rank : ranks) {
    Node& node = nodes[rank.node_rank];
    node.host = rank.host;
    node.ranks.push_back(rank.rank);
    node.errors += rank.errors;
    node.warnings += rank.warnings;
    errors += rank.errors;
  }
  out << "\nSummary of " << ranks.size() << " rank(s) on " << nodes.size() << " node(s)\n";
  for (const auto& [index, node] : nodes) {
    std::string list;
    for (const int r : node.ranks) {
      if (!list.empty()) list += ',';
      list += std::to_string(r);
    }
    out << "  node " << index << "  " << node.host << "  ranks " << list << ": " << node.errors
        << " error(s), " << node.warnings << " warning(s)\n";
  }
  for (const RankSummary& rank : ranks) {
    for (const Finding& problem : rank.problems) {
      if (problem.severity != Severity::error) continue;
      out << "  rank " << rank.rank << " (" << rank.host << ") [ERROR] " << problem.topic << ": "
          << problem.message << '\n';
    }
  }
  out << "  " << (agreement.severity == Severity::ok ? "[ok]   " : "[WARN] ") << agreement.topic
      << ": " << agreement.message << '\n';
  out << (errors == 0 ? "Verdict: PASS" : "Verdict: FAIL") << " (" << errors
      << " error(s) over all ranks)\n";
  return out.str();
}

}  // namespace cohort::doctor
