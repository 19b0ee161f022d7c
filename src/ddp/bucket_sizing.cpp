#include <cohort/ddp/bucket_sizing.hpp>

#include "link_measure.hpp"

#include <cohort/core/error.hpp>
#include <cohort/memory/buffer.hpp>
#include <cohort/memory/detail/stream_copy.hpp>
#include <cohort/memory/memory_report.hpp>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <vector>

namespace cohort {
namespace {

constexpr std::size_t kSmallProbeBytes = std::size_t{4} << 10;
constexpr std::size_t kLargeProbeBytes = std::size_t{1} << 20;
constexpr int kWarmup = 2;
constexpr int kRepeats = 7;
constexpr double kFixedShare = 0.10;  // of a bucket's time, at most
constexpr double kMiddleFactor = 4.0;
constexpr std::size_t kMinCap = 256;
constexpr std::size_t kMaxCap = kMaxAutoBucketBytes;
constexpr double kMinProbeUs = 1.0;

std::size_t clamp_cap(double bytes) {
  if (!(bytes >= static_cast<double>(kMinCap))) {  // also NaN
    return kMinCap;
  }
  if (bytes >= static_cast<double>(kMaxCap)) {
    return kMaxCap;
  }
  return (static_cast<std::size_t>(bytes) + kMinCap - 1) / kMinCap * kMinCap;
}

}  // namespace

BucketSizing choose_bucket_sizes(const LinkEstimate& link) {
  COHORT_EXPECTS(link.alpha_us >= 0.0 && link.bytes_per_us > 0.0,
                 "choose_bucket_sizes needs a non-negative alpha and a positive bandwidth");
  // alpha / (alpha + B / beta) <= share  <=>  B >= alpha beta (1 - share) / share
  const double smallest = link.alpha_us * link.bytes_per_us * (1.0 - kFixedShare) / kFixedShare;
  BucketSizing sizing;
  sizing.automatic = true;
  sizing.link = link;
  sizing.first_bytes = clamp_cap(smallest);
  sizing.last_bytes = sizing.first_bytes;
  sizing.middle_bytes = clamp_cap(smallest * kMiddleFactor);
  return sizing;
}

std::string BucketSizing::describe() const {
  std::string text;
  if (automatic) {
    char numbers[96];
    std::snprintf(numbers, sizeof(numbers),
                  "auto from alpha %.1f us, beta %.2f GB/s: ", link.alpha_us,
                  link.bytes_per_us / 1000.0);
    text = numbers;
  } else {
    text = "fixed: ";
  }
  return text + "first " + format_bytes(first_bytes) + ", middle " + format_bytes(middle_bytes) +
         ", last " + format_bytes(last_bytes);
}

LinkEstimate fit_link(std::size_t small_bytes, double small_us, std::size_t large_bytes,
                      double large_us) {
  COHORT_EXPECTS(small_bytes > 0 && small_bytes < large_bytes,
                 "fit_link needs 0 < small_bytes < large_bytes, got " +
                     std::to_string(small_bytes) + " and " + std::to_string(large_bytes));
  COHORT_EXPECTS(
      std::isfinite(small_us) && std::isfinite(large_us) && small_us >= 0.0 && large_us >= 0.0,
      "fit_link needs finite, non-negative times, got " + std::to_string(small_us) + " and " +
          std::to_string(large_us) + " us");
  // t(b) = alpha + b / beta. Noise can make the large probe no slower than the small one: then
  // the bandwidth is at least what it alone shows. A time of 0 (a clock too coarse) counts as
  // one microsecond rather than an infinite bandwidth.
  const double small = std::max(small_us, kMinProbeUs);
  const double large = std::max(large_us, kMinProbeUs);
  const double extra = static_cast<double>(large_bytes - small_bytes);
  LinkEstimate link;
  link.bytes_per_us =
      large > small ? extra / (large - small) : static_cast<double>(large_bytes) / large;
  // Not the intercept small - small_bytes / beta, which noise makes 0 or negative (see Note
  // [Automatic bucket sizes]): the small probe's whole time, and no less than the time the
  // model gives its bytes.
  link.alpha_us = std::max(small, static_cast<double>(small_bytes) / link.bytes_per_us);
  return link;
}

namespace detail {

LinkEstimate measure_link(Communicator& comm, Store& store,
                          const std::shared_ptr<MemoryResource>& memory, const Stream& stream,
                          std::chrono::milliseconds timeout) {
  Buffer buffer(memory, kLargeProbeBytes, MemoryCategory::buckets);
  const TensorView whole(buffer.data(), kLargeProbeBytes / sizeof(float), DType::f32,
                         stream.device());
  zero_async(whole, stream);  // sums of zeros: the probe writes nothing that matters
  stream.synchronize();
  auto time_us = [&](std::size_t bytes) {
    const auto start = std::chrono::steady_clock::now();
    comm.all_reduce(whole.slice(0, bytes / sizeof(float)), ReduceOp::sum, stream);
    stream.synchronize();
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
        .count();
  };
  // The two sizes alternate, so that a burst of load on a shared machine slows both alike.
  std::vector<double> small_times, large_times;
  for (int i = 0; i < kWarmup + kRepeats; ++i) {
    const double small = time_us(kSmallProbeBytes);
    const double large = time_us(kLargeProbeBytes);
    if (i >= kWarmup) {
      small_times.push_back(small);
      large_times.push_back(large);
    }
  }
  auto median = [](std::vector<double>& times) {
    std::nth_element(times.begin(), times.begin() + kRepeats / 2, times.end());
    return times[kRepeats / 2];
  };
  LinkEstimate mine =
      fit_link(kSmallProbeBytes, median(small_times), kLargeProbeBytes, median(large_times));

  // Rank 0's numbers for everyone. The n-th construction has the same number on every rank.
  const int rank = comm.rank();
  const std::int64_t generation = store.add("ddp/link_count/" + std::to_string(rank), 1);
  const std::string key = "ddp/link/" + std::to_string(generation);
  if (rank == 0) {
    char text[64];
    std::snprintf(text, sizeof(text), "%.17g %.17g", mine.alpha_us, mine.bytes_per_us);
    store.set(key, text);
    return mine;
  }
  const std::string text = store.get(key, timeout);
  LinkEstimate agreed;
  const char* end = text.data() + text.size();
  std::from_chars_result parsed = std::from_chars(text.data(), end, agreed.alpha_us);
  if (parsed.ec == std::errc() && parsed.ptr != end) {
    parsed = std::from_chars(parsed.ptr + 1, end, agreed.bytes_per_us);
  }
  COHORT_CHECK(
      parsed.ec == std::errc() && agreed.bytes_per_us > 0.0, Error,
      "DataParallel: rank 0's link measurement '" + text + "' under " + key + " cannot be read");
  return agreed;
}

}  // namespace detail
}  // namespace cohort
