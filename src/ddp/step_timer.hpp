#pragma once

// What the sharded modes report in `DataParallel::last_step_stats()`: each step's collectives,
// bytes and times, from timing events on the streams (Note [Step events]: from a pool, so a
// steady-state step creates none).

#include <cohort/ddp/data_parallel.hpp>
#include <cohort/detail/event_pool.hpp>

#include <cstddef>
#include <memory>
#include <utility>
#include <vector>

namespace cohort::detail {

class StepTimer {
 public:
  StepTimer(Device device, bool enabled) : enabled_(enabled), events_(device, /*timing=*/true) {}

  /// Before a collective on `comm`: its start (null when timing is off).
  std::shared_ptr<Event> begin(const Stream& comm) {
    if (!enabled_) return nullptr;
    std::shared_ptr<Event> start = events_.acquire();
    start->record(comm);
    return start;
  }
  /// After it: counts it and its bytes, and times it from `start`.
  void end(std::shared_ptr<Event> start, std::size_t bytes, const Stream& comm) {
    ++current_->collectives;
    current_->bytes += bytes;
    if (start) {
      std::shared_ptr<Event> end = events_.acquire();
      end->record(comm);
      current_->spans.emplace_back(std::move(start), std::move(end));
    }
  }
  /// A unit was all-gathered, ahead of the program's asking or not.
  void count_gather(bool prefetched) {
    ++current_->units_gathered;
    current_->units_prefetched += prefetched ? 1 : 0;
  }
  /// The compute stream reached the end of backward (`sync_grads()`).
  void compute_reached(const Stream& compute) {
    if (!enabled_) return;
    current_->compute_done = events_.acquire();
    current_->compute_done->record(compute);
  }
  /// The step's last gradient collective is on `comm`; the step's record is closed (collectives
  /// counted after this, the parameters' all-gathers, go to the next one).
  void finish_step(const Stream& comm) {
    if (enabled_) {
      current_->comm_done = events_.acquire();
      current_->comm_done->record(comm);
    }
    current_->step = ++steps_;
    last_ = std::exchange(current_, std::make_shared<Record>());
  }

  /// The last finished step; waits for its events.
  StepStats last() const {
    StepStats stats;
    if (!last_) return stats;
    stats.step = last_->step;
    stats.collectives = last_->collectives;
    stats.bytes = last_->bytes;
    stats.units_gathered = last_->units_gathered;
    stats.units_prefetched = last_->units_prefetched;
    for (const auto& [start, end] : last_->spans) {
      stats.comm_ms += static_cast<double>(Event::elapsed_ms(*start, *end));
    }
    if (last_->compute_done && last_->comm_done) {
      stats.exposed_ms = std::max(
          0.0, static_cast<double>(Event::elapsed_ms(*last_->compute_done, *last_->comm_done)));
    }
    return stats;
  }

 private:
  struct Record {
    std::uint64_t step = 0;
    std::size_t collectives = 0;
    std::size_t bytes = 0;
    std::size_t units_gathered = 0;
    std::size_t units_prefetched = 0;
    std::vector<std::pair<std::shared_ptr<Event>, std::shared_ptr<Event>>> spans;
    std::shared_ptr<Event> compute_done;
    std::shared_ptr<Event> comm_done;
  };
  bool enabled_;
  EventPool events_;
  std::uint64_t steps_ = 0;
  std::shared_ptr<Record> current_ = std::make_shared<Record>();
  std::shared_ptr<Record> last_;
};

}  // namespace cohort::detail
