#pragma once

/// @file
/// What every benchmark program reports the same way: medians, bus bandwidth as nccl-tests
/// defines it, and the line that names the machine a number was measured on.

#include <string>
#include <vector>

namespace cohort::bench {

/// The median (the mean of the middle two for an even count); 0 for no values.
double median(std::vector<double> values);

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
