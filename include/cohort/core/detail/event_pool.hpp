#pragma once

/// @file
/// `EventPool`: events of one device, reused, so that a steady-state step or collective creates
/// no CUDA event (cudaEventCreate and cudaEventDestroy cost microseconds and may synchronize).
///
/// Note [Step events]
/// Once warm, a training step creates no event and no stream and allocates nothing
/// (`detail::created_counts()` counts creations; test_steady_step checks the host backend,
/// ddp_gpu_worker a GPU). DataParallel reuses its two ordering events and draws timing events
/// from a pool; a host worker draws the mark its task waits for from a pool and returns it as
/// soon as it has been waited for; an NCCL collective's completion is a `CompletionMark`. An
/// event returns to its pool when its last holder lets go, so whoever holds one late decides how
/// big the pool grows: the watchdog keeps a collective's completion probe until its next sweep,
/// tens of milliseconds, in which a fast loop issues many collectives. A completion mark
/// therefore gives its event back at the first look that finds it done, and the pool looks at its
/// oldest lent marks itself before it hands out a new one; a step that waited for its
/// collectives then finds every event of the last step free again, whenever the watchdog runs.

#include <cohort/core/stream.hpp>

#include <algorithm>
#include <deque>
#include <iterator>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

namespace cohort::detail {

/// A mark recorded after some work on a stream: `ready()` once that work is done. Its event goes
/// back to its pool at the first `ready()` that finds it done, from any thread; later calls answer
/// true without an event.
class CompletionMark {
 public:
  explicit CompletionMark(std::shared_ptr<Event> event) : event_(std::move(event)) {}
  /// @throws as Event::ready (a sticky CUDA error); the event is then kept.
  bool ready() {
    const std::lock_guard<std::mutex> lock(mutex_);
    if (event_ && event_->ready()) {
      event_.reset();
    }
    return !event_;
  }

 private:
  std::mutex mutex_;
  std::shared_ptr<Event> event_;
};

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

  /// A `CompletionMark` recorded on `stream` now (Note [Step events]). Marks lent earlier are
  /// looked at first, each stream's oldest first until one of that stream's is still pending:
  /// those done give their events back, so the mark made here reuses one (Note [Draining lent
  /// marks]).
  std::shared_ptr<CompletionMark> mark(const Stream& stream) {
    const void* key = stream_key(stream);
    {
      const std::lock_guard<std::mutex> lock(lent_mutex_);
      drain_locked();
    }
    std::shared_ptr<Event> event = acquire();
    event->record(stream);
    auto mark = std::make_shared<CompletionMark>(std::move(event));
    const std::lock_guard<std::mutex> lock(lent_mutex_);
    auto queue = std::find_if(lent_.begin(), lent_.end(),
                              [key](const LentOnStream& lent) { return lent.stream == key; });
    if (queue == lent_.end()) {
      lent_.push_back(LentOnStream{key, {}});
      queue = std::prev(lent_.end());
    }
    queue->marks.push_back(mark);
    return mark;
  }

  /// Marks lent and not yet seen done (for tests).
  std::size_t lent_count() {
    const std::lock_guard<std::mutex> lock(lent_mutex_);
    std::size_t count = 0;
    for (const LentOnStream& lent : lent_) count += lent.marks.size();
    return count;
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
  // Note [Draining lent marks]
  // Marks recorded on one stream complete in the order they were recorded, so a stream's queue
  // is looked at from its oldest mark until the first still pending: the ones after it cannot be
  // done. Marks of different streams have no order: one queue per stream, so that a collective
  // still running on one stream (a slow peer, a long kernel before it) holds back only the marks
  // recorded after it on that stream, never the events of every later collective on the others.
  struct LentOnStream {
    const void* stream;                                 // detail::stream_key
    std::deque<std::shared_ptr<CompletionMark>> marks;  // oldest first
  };
  /// Gives back the events of every lent mark now done. Call with `lent_mutex_` held.
  void drain_locked() {
    for (auto queue = lent_.begin(); queue != lent_.end();) {
      while (!queue->marks.empty()) {
        bool done = false;
        try {
          done = queue->marks.front()->ready();
        } catch (...) {  // its holder sees the error when it asks; this mark stays lent
        }
        if (!done) {
          break;
        }
        queue->marks.pop_front();
      }
      queue = queue->marks.empty() ? lent_.erase(queue) : std::next(queue);
    }
  }

  std::mutex lent_mutex_;
  std::vector<LentOnStream> lent_;  // marks handed out, one queue per stream
};

}  // namespace cohort::detail
