#include "comm/flight_recorder.hpp"
#include "comm/work_state.hpp"

#include <cohort/comm/work.hpp>
#include <cohort/core/backoff.hpp>
#include <cohort/core/error.hpp>

#include <cstdio>
#include <thread>

namespace cohort {
namespace detail {

// Note [One clock for a collective]
// A collective's age and duration are said in several places: the error of the work, the
// flight recorder's entries, a wait that gives up on it. Each used to read the clock on its own,
// and one never did: a work described its record, whose age was never set, so an error said
// "in flight for 0 ms" of the collective the recorder listed beside it as "in flight for 1513
// ms". Now the issue, the end (completion or failure) and the moment of a description are
// single clock readings that every description of it uses: the work and its recorder entry share
// the instant of issue; the first to fail a work fixes the instant it failed at
// (failure_instant), which its error, the recorder and any other error of it then say; and a
// report takes one `now` for all it says (FlightRecorder::snapshot(now), WorkState::record_at).
WorkState::WorkState(CollectiveRecord record, Clock::time_point issued_at,
                     Clock::time_point deadline, std::shared_ptr<FlightRecorder> recorder)
    : record_(std::move(record)),
      issued_at_(issued_at),
      deadline_(deadline),
      recorder_(std::move(recorder)) {}

WorkState::WorkState(CollectiveRecord record, Clock::time_point deadline,
                     std::shared_ptr<FlightRecorder> recorder)
    : WorkState(std::move(record), Clock::now(), deadline, std::move(recorder)) {}

void WorkState::finish_locked(CollectiveRecord::State state, Clock::time_point at) {
  done_ = true;
  state_ = state;
  finished_at_ = at;
  if (recorder_) {
    recorder_->finished(record_.sequence, state, at);
  }
  finished_.notify_all();
}

CollectiveRecord WorkState::record_at(Clock::time_point now) {
  CollectiveRecord record = record_;
  const std::lock_guard<std::mutex> lock(mutex_);
  record.state = state_;
  record.issued_seconds_ago = std::chrono::duration<double>(now - issued_at_).count();
  if (done_) {
    record.duration_ms =
        std::chrono::duration<double, std::milli>(finished_at_ - issued_at_).count();
  }
  return record;
}

std::string WorkState::describe(Clock::time_point now) {
  return record_at(now).describe();
}

WorkState::Clock::time_point WorkState::failure_instant(Clock::time_point now) {
  const std::lock_guard<std::mutex> lock(mutex_);
  if (!failure_instant_) failure_instant_ = now;
  return *failure_instant_;
}

bool WorkState::complete() {
  const std::lock_guard<std::mutex> lock(mutex_);
  if (done_) {
    return false;
  }
  finish_locked(CollectiveRecord::State::completed, Clock::now());
  return true;
}

bool WorkState::fail(std::exception_ptr error, Clock::time_point at) {
  const std::lock_guard<std::mutex> lock(mutex_);
  if (done_) {
    return false;
  }
  error_ = std::move(error);
  finish_locked(CollectiveRecord::State::failed, at);
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

bool WorkState::wait_released(Clock::duration patience) {
  bool released = false;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    released =
        released_.wait_for(lock, patience, [&] { return !held_.load(std::memory_order_relaxed); });
  }
  if (!released) {
    std::fprintf(stderr,
                 "cohort: %s, but the backend has not returned from it after %lld ms: "
                 "it may still use its buffers; keep them until the World is destroyed\n",
                 describe().c_str(),
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

bool Work::done() const {
  return !state_ || state_->done();
}

void Work::wait() const {
  if (!state_) {
    return;
  }
  // The watchdog fails the work at its deadline; the grace covers a watchdog that is late.
  const auto limit = state_->deadline() + std::chrono::seconds(30);
  if (!state_->wait_finished_and_released(limit)) {
    COHORT_FAIL(TimeoutError, "waited past the deadline of " + state_->describe() +
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
                                  " ms on " + state_->describe() + " (it is still running)");
  }
  state_->rethrow_if_failed();
}

std::uint64_t Work::sequence() const noexcept {
  return state_ ? state_->record().sequence : 0;
}

CollectiveOp Work::op() const noexcept {
  return state_ ? state_->record().op : CollectiveOp::barrier;
}

}  // namespace cohort
