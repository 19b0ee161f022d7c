#pragma once

/// @file
/// `EventPool`: events of one device, reused, so that a steady-state step or collective creates
/// no CUDA event (cudaEventCreate and cudaEventDestroy cost microseconds and may synchronize).

#include <cohort/core/stream.hpp>

#include <memory>
#include <mutex>
#include <utility>
#include <vector>

namespace cohort::detail {

class EventPool {
 public:
  /// Events on `device`; with `timing`, events that `Event::elapsed_ms` can measure.
  EventPool(Device device, bool timing)
      : device_(device), timing_(timing), free_(std::make_shared<Free>()) {}

  /// An event no one else holds: reused when one is free, else created. It goes back to the pool
  /// when the last copy of the returned pointer is dropped (on any thread; the pool may be gone
  /// by then). Recording it moves its mark, as for any event.
  std::shared_ptr<Event> acquire() {
    std::unique_ptr<Event> event;
    {
      const std::lock_guard<std::mutex> lock(free_->mutex);
      if (!free_->events.empty()) {
        event = std::move(free_->events.back());
        free_->events.pop_back();
      }
    }
    if (!event) {
      event = std::make_unique<Event>(Event::create(device_, timing_));
    }
    return std::shared_ptr<Event>(event.release(), [free = free_](Event* returned) noexcept {
      std::unique_ptr<Event> owned(returned);
      try {
        const std::lock_guard<std::mutex> lock(free->mutex);
        free->events.push_back(std::move(owned));
      } catch (...) {  // no room: the event is destroyed instead of reused
      }
    });
  }

  /// Events created so far and now free (for tests).
  std::size_t free_count() const {
    const std::lock_guard<std::mutex> lock(free_->mutex);
    return free_->events.size();
  }

 private:
  struct Free {
    mutable std::mutex mutex;
    std::vector<std::unique_ptr<Event>> events;
  };
  Device device_;
  bool timing_;
  std::shared_ptr<Free> free_;
};

}  // namespace cohort::detail
