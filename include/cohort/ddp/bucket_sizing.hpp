#pragma once

/// @file
/// Bucket caps from the measured link (Note [Automatic bucket sizes]).
///
/// Note [Automatic bucket sizes]
/// Every all-reduce costs a fixed alpha (latency, synchronization, wake-ups) plus bytes / beta.
/// With `bucket_bytes = kAutoBucketBytes` (the default) DataParallel measures both once, at
/// construction, on its own communicator: the median times of a few all-reduces of 4 KiB (alpha)
/// and of 1 MiB (beta from the difference), alternated, after a warm-up, on rank 0, whose numbers
/// every rank then uses, so every rank plans the same buckets. alpha is never the intercept of
/// the two-point line: noise made that 0 once (256-byte buckets, hundreds of all-reduces a step,
/// which looked like a stall); it is the small probe's whole time, at least 4 KiB / beta.
/// A bucket of B bytes spends alpha / (alpha + B / beta) of its time on the fixed cost; keeping
/// that under 10% needs B >= 9 alpha beta: the first and last caps (the first starts
/// communication early; nothing hides the last) are that size, the middle ones four times it
/// (fewer collectives where backward hides them), none above 64 MiB, none below 256 bytes (a
/// measured link never gets below 36 KiB: alpha x beta >= 4 KiB).
/// On Gloo over TCP (alpha of milliseconds) a small model becomes one bucket; over shared memory
/// or NCCL (alpha of microseconds) buckets are small enough to overlap backward.

#include <cstddef>
#include <string>

namespace cohort {

/// `DataParallelOptions::bucket_bytes` value that asks for caps from the measured link.
inline constexpr std::size_t kAutoBucketBytes = 0;

/// The largest cap a measured link is given (what an estimate made before measuring assumes).
inline constexpr std::size_t kMaxAutoBucketBytes = std::size_t{64} << 20;

/// The link's cost model: an all-reduce of b bytes (per rank) takes alpha_us + b / bytes_per_us.
struct LinkEstimate {
  double alpha_us = 0.0;
  double bytes_per_us = 0.0;  ///< algorithmic bandwidth; 1 byte/us = 1 MB/s
};

/// The caps a DataParallel plans its buckets with, and where they came from.
struct BucketSizing {
  bool automatic = false;  ///< measured (kAutoBucketBytes) rather than given
  LinkEstimate link;       ///< the measurement (zeros when not automatic)
  std::size_t first_bytes = 0;
  std::size_t middle_bytes = 0;
  std::size_t last_bytes = 0;

  /// "auto from alpha 21.3 us, beta 2.10 GB/s: first 384 KiB, middle 1.50 MiB, last 384 KiB",
  /// or "fixed: first 1.00 MiB, middle 25.0 MiB, last 1.00 MiB".
  std::string describe() const;
};

/// The caps of Note [Automatic bucket sizes] for `link`.
BucketSizing choose_bucket_sizes(const LinkEstimate& link);

/// The link model from the median times of all-reduces of `small_bytes` and `large_bytes`
/// (Note [Automatic bucket sizes]): beta from the difference, alpha the small probe's whole time
/// and never less than the time the model gives its bytes, so alpha x beta, hence every cap, is
/// never below `small_bytes` (times 9 for the 10% share) however noisy the times.
/// @throws InvalidArgument unless 0 < small_bytes < large_bytes and both times are finite and
///         not negative.
LinkEstimate fit_link(std::size_t small_bytes, double small_us, std::size_t large_bytes,
                      double large_us);

}  // namespace cohort
