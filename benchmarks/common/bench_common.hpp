#pragma once

/// @file
/// What every benchmark program reports the same way: medians and spread, bus bandwidth as
/// nccl-tests defines it, the line that names the machine a number was measured on, and the
/// provenance every JSON report starts with.

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace cohort::bench {

/// The median (the mean of the middle two for an even count); 0 for no values.
double median(std::vector<double> values);

/// The arithmetic mean; 0 for no values.
double mean(const std::vector<double>& values);

/// The `p`-th percentile (0 to 100), linear between the nearest ranks; 0 for no values.
double percentile(std::vector<double> values, double p);

/// The spread of a set of values, as every report gives it.
struct Spread {
  double p10 = 0, median = 0, p90 = 0, min = 0, max = 0, mean = 0;
  std::size_t count = 0;
};
Spread spread(const std::vector<double>& values);
/// {"p10": .., "median": .., "p90": .., "min": .., "max": .., "mean": .., "n": ..}, each value
/// times `scale` (1e-3 turns ms into s); null for no values.
nlohmann::json spread_json(const Spread& spread, double scale = 1.0);

/// The git commit this program was built from ("abc123def456", "+changes" when the tree had
/// uncommitted changes), or "unknown".
std::string commit();

/// The environment worth recording with a measurement: NCCL_*, COHORT_*, GLOO_*, CUDA_*,
/// OMP_NUM_THREADS, OPENBLAS_NUM_THREADS; secrets (names with TOKEN, SECRET, PASSWORD, KEY)
/// as "(set, not shown)".
nlohmann::json relevant_environment();

/// What every JSON report starts with, so that two runs can be compared: `schema` (a name and
/// version, "cohort.scaling_bench/2"), the time (UTC, ISO 8601), cohort's version and commit,
/// `hosts` (each rank's host name, in rank order), the command line and the environment.
nlohmann::json provenance(const std::string& schema, const std::vector<std::string>& command_line,
                          const std::vector<std::string>& hosts);

/// This process's host name.
std::string host_name();

/// Bytes per second of moving `bytes` in `seconds`, in GB/s (1e9 bytes per second); 0 when
/// `seconds` is not positive.
double algbw_gbps(double bytes, double seconds);

/// The collectives whose bus-bandwidth factor differs.
enum class Collective { all_reduce, all_gather, reduce_scatter, broadcast };

/// nccl-tests' bus bandwidth factor over `ranks` ranks: 2(n-1)/n for all-reduce, (n-1)/n for
/// all-gather and reduce-scatter, 1 for broadcast; 0 for one rank of a gather or reduction (no
/// traffic).
double bus_factor(Collective collective, int ranks);

/// "host, CPU model, N hardware threads": where a number was measured.
std::string machine_line();

}  // namespace cohort::bench
