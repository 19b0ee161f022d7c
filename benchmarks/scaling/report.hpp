#pragma once

// scaling_bench's report: the printed tables, the JSON report (a versioned schema, so that two
// clusters compare), the plot, and --compare.

#include "scaling/model.hpp"
#include "scaling/scaling_types.hpp"

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace scaling {

/// The JSON report's schema; a reader refuses another major version.
inline constexpr const char* kSchema = "cohort.scaling_bench/2";

/// Where the run was: ranks, nodes, ranks per node, backend, device, host of every rank.
struct Topology {
  int ranks = 0, nodes = 0, ranks_per_node = 0;
  std::string backend, device;
  std::vector<std::string> hosts;  // every rank's, in rank order
};

struct Report {
  std::vector<Row> rows;
  std::vector<ModelCheck> checks;  // one per row (invalid for 1 rank or without a probe)
  ProjectionBasis basis;
  std::vector<Projection> projections;
  Topology topology;
};

void print_report(const Setup& setup, const Report& report);

nlohmann::json report_json(const Setup& setup, const Report& report);

/// Draws the JSON report at `json_path` into `picture_path` with python3 and matplotlib.
void write_plot(const std::string& json_path, const std::string& picture_path);

/// `scaling_bench --compare A.json B.json`: two reports side by side. Returns the exit status
/// (2 when a file cannot be read or is not a report of this schema).
int compare_reports(const std::string& a_path, const std::string& b_path);

}  // namespace scaling
