#include "comm/flight_recorder.hpp"
#include "comm/work_state.hpp"

#include <cohort/comm/work.hpp>
#include <cohort/core/backoff.hpp>
#include <cohort/core/error.hpp>

#include <cstdio>
#include <thread>

namespace cohort {
namespace detail {

WorkState::WorkState(CollectiveRecord record, Clock::time_point deadline,
                     std::shared_ptr<FlightRecorder> recorder)
    : record_(std::move(record)),
      issued_at_(Clock::now()),
      deadline_(deadline),
      recorder_(std::move(recorder)) {}

void WorkState::finish_locked(CollectiveRecord::State state) {
  done_ = true;
  if (recorder_) {
    recorder_->finished(record_.sequence, state, Clock::now());
  }
  finished_.notify_all();
}

bool WorkState::complete() {
  const std::lock_guard<std::mutex> lock(mutex_);
  if (done_) {
    return false;
  }
  finish_locked(CollectiveRecord::State::completed);
  return true;
}

bool WorkState::fail(std::exception_ptr error) {
  const std::lock_guard<std::mutex> lock(mutex_);
  if (done_) {
    return false;
  }
  error_ = std::move(error);
  finish_locked(CollectiveRecord::State::failed);
  return true;
}

bool WorkState::finished() {
  const std::lock_guard<std::mutex> lock(mutex_);
  return done_;
}

bool WorkState::done() {
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    if (done_) {
      return true;
    }
  }
  if (has_probe_.load(std::memory_order_acquire) && probe_()) {
    complete();
    return true;
  }
  return false;
}

bool WorkState::wait_until(Clock::time_point until) {
  if (!has_probe_.load(std::memory_order_acquire)) {
    std::unique_lock<std::mutex> lock(mutex_);
    return finished_.wait_until(lock, until, [&] { return done_; });
  }
  // A polled backend: check the probe, then sleep a little, until finished or `until`.
  Backoff backoff(std::chrono::microseconds(20), std::chrono::microseconds(1000));
  while (!done()) {
    if (Clock::now() >= until) {
      return false;
    }
    std::unique_lock<std::mutex> lock(mutex_);
    finished_.wait_for(lock, backoff.next(), [&] { return done_; });
  }
  return true;
}

void WorkState::release() {
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    held_.store(false, std::memory_order_relaxed);
  }
  released_.notify_all();
}

bool WorkState::hold_unless_finished() {
  const std::lock_guard<std::mutex> lock(mutex_);
  if (done_) {
    return false;
  }
  held_.store(true, std::memory_order_relaxed);
  return true;
}

bool WorkState::wait_released(Clock::duration patience) {
  std::unique_lock<std::mutex> lock(mutex_);
  const bool released = released_.wait_for(
      lock, patience, [&] { return !held_.load(std::memory_order_relaxed); });
  if (!released) {
    std::fprintf(stderr,
                 "cohort: %s failed, but the backend has not returned from it after %lld ms: "
                 "it may still use its buffers; keep them until the World is destroyed\n",
                 record_.describe().c_str(),
                 static_cast<long long>(
                     std::chrono::duration_cast<std::chrono::milliseconds>(patience).count()));
  }
  return released;
}

bool WorkState::wait_finished_and_released(Clock::time_point until) {
  if (!wait_until(until)) {
    return false;
  }
  bool failed = false;
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    failed = error_ != nullptr;
  }
  if (failed) {
    wait_released(kReleasePatience);  // Note [Buffers after a failure]
  }
  return true;
}

void WorkState::rethrow_if_failed() {
  const std::lock_guard<std::mutex> lock(mutex_);
  if (error_) {
    std::rethrow_exception(error_);
  }
}

}  // namespace detail

bool Work::done() const { return !state_ || state_->done(); }

void Work::wait() const {
  if (!state_) {
    return;
  }
  // The watchdog fails the work at its deadline; the grace covers a watchdog that is late.
  const auto limit = state_->deadline() + std::chrono::seconds(30);
  if (!state_->wait_finished_and_released(limit)) {
    COHORT_FAIL(TimeoutError, "waited past the deadline of " + state_->record().describe() +
                                  " and the watchdog did not end it; the process may be "
                                  "stuck in the backend");
  }
  state_->rethrow_if_failed();
}

void Work::wait(std::chrono::milliseconds timeout) const {
  if (!state_) {
    return;
  }
  if (!state_->wait_finished_and_released(detail::WorkState::Clock::now() + timeout)) {
    COHORT_FAIL(TimeoutError, "Work::wait gave up after " + std::to_string(timeout.count()) +
                                  " ms on " + state_->record().describe() +
                                  " (it is still running)");
  }
  state_->rethrow_if_failed();
}

std::uint64_t Work::sequence() const noexcept { return state_ ? state_->record().sequence : 0; }

CollectiveOp Work::op() const noexcept {
  return state_ ? state_->record().op : CollectiveOp::barrier;
}

}  // namespace cohort
