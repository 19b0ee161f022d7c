#include "watchdog.hpp"

#include "failure_aware_store.hpp"

#include <cohort/core/error.hpp>
#include <cohort/core/logging.hpp>

#include <algorithm>
#include <chrono>
#include <sstream>
#include <thread>

namespace cohort::detail {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kTick = std::chrono::milliseconds(50);
constexpr auto kPeerCheckEvery = std::chrono::milliseconds(100);
constexpr auto kHeartbeatEvery = std::chrono::milliseconds(1000);
constexpr const char* kProgressRequestKey = "progress_request";

}  // namespace

void fail_collective(CommContext& context, WorkState& work, bool timed_out,
                     const std::string& cause) noexcept {
  try {
    if (work.finished()) {  // not done(): that would poll a probe, which may be our caller
      return;
    }
    publish_progress(context);
    CollectiveRecord record = work.record();
    record.issued_seconds_ago =
        std::chrono::duration<double>(Clock::now() - work.issued_at()).count();
    std::string what = "rank " + std::to_string(context.global_rank(context.rank())) + ": " +
                       record.describe() + " on " + context.describe();
    if (timed_out) {
      what += " did not complete within " + std::to_string(context.timeout().count()) + " ms. ";
    } else {
      what += " failed: " + cause + ". ";
    }
    const auto watchdog = context.watchdog.lock();
    if (watchdog) {
      if (auto earlier = watchdog->published_failure()) {
        what += "It follows an earlier failure: " + *earlier + " ";
      }
    }
    what += diagnose_stragglers(context, record.sequence);
    const std::string details = what + "\nWhat to check: the logs of the ranks named above; that "
                                "every rank issues the same collectives in the same order "
                                "(COHORT_DEBUG_COLLECTIVES=1 checks it); COHORT_TIMEOUT for "
                                "steps that are legitimately slow.\n" +
                                versions_line(context) + "\nRecent collectives of this rank:\n" +
                                context.recorder->dump();
    std::exception_ptr error;
    try {
      if (timed_out) {
        COHORT_FAIL(TimeoutError, details);
      } else {
        COHORT_FAIL(Error, details);
      }
    } catch (...) {
      error = std::current_exception();
    }
    if (!work.fail(error)) {
      return;  // finished meanwhile, or failed by someone else first
    }
    COHORT_LOG(error) << what;
    if (watchdog) {
      watchdog->report_failure(what);
    }
    context.abort(what);
    context.fail_in_flight(error);
  } catch (...) {
    work.fail(std::current_exception());
  }
}


Watchdog::Watchdog(std::unique_ptr<Store> world_store, int global_rank)
    : store_(std::move(world_store)), global_rank_(global_rank) {}

std::shared_ptr<Watchdog> Watchdog::start(std::unique_ptr<Store> world_store, int global_rank) {
  auto watchdog = std::shared_ptr<Watchdog>(new Watchdog(std::move(world_store), global_rank));
  watchdog->thread_ = std::thread(&Watchdog::run, std::weak_ptr<Watchdog>(watchdog));
  return watchdog;
}

Watchdog::~Watchdog() {
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (!thread_.joinable()) {
    return;  // stopped by stop()
  }
  if (thread_.get_id() == std::this_thread::get_id()) {
    thread_.detach();  // the last reference went away on the watchdog's own thread
  } else {
    thread_.join();  // it holds no reference now, so it ends at its next look
  }
}

void Watchdog::stop() noexcept {
  std::unique_lock<std::mutex> lock(mutex_);
  stopping_ = true;
  wake_.notify_all();
  if (!thread_.joinable()) {
    return;  // stopped before
  }
  if (thread_.get_id() == std::this_thread::get_id()) {
    thread_.detach();  // the last reference went away on the watchdog's own thread
    return;
  }
  const bool ended = wake_.wait_for(lock, kStopPatience, [&] { return ended_; });
  lock.unlock();
  if (ended) {
    thread_.join();
  } else {
    thread_.detach();  // stuck in a store call: it holds the watchdog until it returns
  }
}

void Watchdog::add(const std::shared_ptr<CommContext>& context) {
  const std::lock_guard<std::mutex> lock(mutex_);
  contexts_.push_back(context);
}

std::vector<std::shared_ptr<CommContext>> Watchdog::contexts() {
  const std::lock_guard<std::mutex> lock(mutex_);
  std::vector<std::shared_ptr<CommContext>> alive;
  std::erase_if(contexts_, [&](const std::weak_ptr<CommContext>& weak) {
    auto context = weak.lock();
    const bool expired = context == nullptr;
    if (!expired) {
      alive.push_back(std::move(context));
    }
    return expired;
  });
  return alive;
}

void Watchdog::report_failure(const std::string& message) noexcept {
  {
    const std::lock_guard<std::mutex> lock(store_mutex_);
    if (!publish_world_failure(*store_, message)) {
      COHORT_LOG(warn) << "could not publish a failure to the other ranks";
    }
  }
  for (const auto& context : contexts()) {
    context->abort("another communicator of this rank failed: " + message);
  }
}

std::optional<std::string> Watchdog::published_failure() noexcept {
  try {
    const std::lock_guard<std::mutex> lock(store_mutex_);
    if (store_->check({kWorldFailureKey})) {
      return store_->get(kWorldFailureKey, std::chrono::seconds(5));
    }
  } catch (const std::exception& error) {
    COHORT_LOG(debug) << "watchdog could not read the failure key: " << error.what();
  }
  return std::nullopt;
}

std::int64_t Watchdog::request_progress() noexcept {
  try {
    const std::lock_guard<std::mutex> lock(store_mutex_);
    const std::int64_t request = store_->add(kProgressRequestKey, 1);
    answered_request_.store(std::max(answered_request_.load(), request));
    return request;
  } catch (const std::exception& error) {
    COHORT_LOG(debug) << "could not ask the other ranks for progress: " << error.what();
    return 0;
  }
}

void Watchdog::answer_progress_request() {
  std::int64_t request = 0;
  {
    const std::lock_guard<std::mutex> lock(store_mutex_);
    if (!store_->check({kProgressRequestKey})) {
      return;
    }
    request = std::stoll(store_->get(kProgressRequestKey, std::chrono::seconds(5)));
  }
  if (request > answered_request_.load()) {
    answered_request_.store(request);
    publish_all_progress();
  }
}

void Watchdog::check_deadlines() {
  const auto now = Clock::now();
  for (const auto& context : contexts()) {
    for (const auto& work : context->in_flight()) {
      if (!work->done() && now >= work->deadline()) {
        fail_collective(*context, *work, /*timed_out=*/true, "");
      }
    }
  }
}

void Watchdog::check_peer_failure() {
  if (failure_handled_) {
    return;
  }
  const auto failure = published_failure();
  if (!failure) {
    return;
  }
  failure_handled_ = true;
  for (const auto& context : contexts()) {
    if (context->abort("a rank failed: " + *failure)) {
      std::exception_ptr error;
      try {
        COHORT_FAIL(Error, "rank " + std::to_string(global_rank_) + ": " + context->describe() +
                               " was aborted because a rank failed: " + *failure + "\n" +
                               versions_line(*context) + "\nRecent collectives of this rank:\n" +
                               context->recorder->dump());
      } catch (...) {
        error = std::current_exception();
      }
      context->fail_in_flight(error);
    }
  }
}

void Watchdog::publish_all_progress() {
  for (const auto& context : contexts()) {
    if (!context->aborted()) {
      publish_progress(*context);
    }
  }
}

void Watchdog::run(const std::weak_ptr<Watchdog>& weak) {
  while (true) {
    const std::shared_ptr<Watchdog> self = weak.lock();
    if (!self) {
      return;  // touches nothing of the watchdog after this: it is gone
    }
    if (!self->tick()) {
      const std::lock_guard<std::mutex> lock(self->mutex_);
      self->ended_ = true;
      self->wake_.notify_all();
      return;
    }
  }
}

bool Watchdog::tick() {
  {
    std::unique_lock<std::mutex> lock(mutex_);
    wake_.wait_for(lock, kTick, [&] { return stopping_; });
    if (stopping_) {
      return false;
    }
  }
  try {
    check_deadlines();
    const auto now = Clock::now();
    if (now >= next_peer_check_) {
      check_peer_failure();
      answer_progress_request();
      next_peer_check_ = now + kPeerCheckEvery;
    }
    if (now >= next_heartbeat_) {
      publish_all_progress();
      next_heartbeat_ = now + kHeartbeatEvery;
    }
  } catch (const std::exception& error) {
    // With nothing in flight no one depends on the store: it going away is how a run ends when
    // the rank that hosts it (rank 0) exits first, and no reason to print an error.
    bool busy = false;
    for (const auto& context : contexts()) {
      try {
        busy = busy || !context->in_flight().empty();
      } catch (const std::exception&) {
        busy = true;
      }
    }
    if (busy) {
      COHORT_LOG(error) << "watchdog: " << error.what();
    } else {
      COHORT_LOG(debug) << "watchdog, with nothing in flight: " << error.what();
    }
  }
  return true;
}

}  // namespace cohort::detail
