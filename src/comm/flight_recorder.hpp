#pragma once

// Note [Flight recorder]
// Each communicator keeps its last kCapacity collectives in a ring: what was issued, how big, and
// whether and how fast it finished. At a rank's first failure the watchdog writes every
// communicator's record to one file (Note [One report per failure] in watchdog.cpp), whose path
// the error gives, so the error shows what the rank was doing without carrying it. Every age and
// duration in it is measured from one clock reading per event (Note [One clock for a
// collective] in work.cpp).

#include <cohort/comm/communicator.hpp>

#include <array>
#include <atomic>
#include <chrono>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace cohort::detail {

class FlightRecorder {
 public:
  static constexpr std::size_t kCapacity = 64;
  using Clock = std::chrono::steady_clock;

  void issued(const CollectiveRecord& record, Clock::time_point at);
  void finished(std::uint64_t sequence, CollectiveRecord::State state, Clock::time_point at);

  /// The highest sequence number that has finished (completed or failed).
  std::uint64_t last_finished() const noexcept { return last_finished_.load(); }

  /// The oldest collective not yet finished: {its sequence number, its call as call_signature()
  /// words it}; {0, 0} when every one recorded has finished.
  std::pair<std::uint64_t, std::uint64_t> oldest_unfinished() const;

  /// The call of collective `sequence` as call_signature() words it, if it is still recorded.
  std::optional<std::uint64_t> signature(std::uint64_t sequence) const;

  /// Oldest first, with ages as of `now`.
  std::vector<CollectiveRecord> snapshot(Clock::time_point now) const;
  std::vector<CollectiveRecord> snapshot() const { return snapshot(Clock::now()); }

  /// The snapshot as of `now`, one collective a line, each line indented by `indent`.
  std::string dump(Clock::time_point now, const std::string& indent = "  ") const;

 private:
  struct Entry {
    CollectiveRecord record;
    Clock::time_point issued_at;
    Clock::time_point finished_at;
    bool used = false;
  };
  mutable std::mutex mutex_;
  std::array<Entry, kCapacity> entries_{};
  std::atomic<std::uint64_t> last_finished_{0};
};

}  // namespace cohort::detail
