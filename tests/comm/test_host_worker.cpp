// The host backends' worker thread: how a communicator's destructor stops it
// (Note [Host worker teardown] in src/comm/host/worker.hpp).
#include "comm/host/worker.hpp"
#include "comm/work_state.hpp"

#include <cohort/comm/work.hpp>
#include <cohort/core/error.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>

namespace {

using cohort::detail::HostWorker;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

/// A task that runs until released, shared with the worker so that it outlives the test's frame.
struct Gate {
  std::mutex mutex;
  std::condition_variable changed;
  bool started = false;
  bool released = false;
  bool finished = false;

  void run() {
    std::unique_lock<std::mutex> lock(mutex);
    started = true;
    changed.notify_all();
    changed.wait(lock, [&] { return released; });
    finished = true;
    changed.notify_all();
  }
  void wait_started() {
    std::unique_lock<std::mutex> lock(mutex);
    changed.wait(lock, [&] { return started; });
  }
  void release() {
    const std::lock_guard<std::mutex> lock(mutex);
    released = true;
    changed.notify_all();
  }
};

TEST(HostWorker, StopRunsWhatIsQueuedAndJoins) {
  auto worker = HostWorker::start();
  std::atomic<int> ran{0};
  for (int i = 0; i < 3; ++i) {
    worker->enqueue([&ran] {
      std::this_thread::sleep_for(milliseconds(20));
      ++ran;
    });
  }
  worker->stop(/*aborted=*/false);
  EXPECT_EQ(ran.load(), 3);
}

// After an abort the destructor used to detach the worker at once, so a worker about to end
// still ran (and released the failed communicator) after the program's main had returned.
TEST(HostWorker, StopAfterAnAbortWaitsForATaskThatEndsSoon) {
  auto worker = HostWorker::start();
  auto finished = std::make_shared<std::atomic<bool>>(false);
  auto gate = std::make_shared<Gate>();
  worker->enqueue([gate, finished] {
    gate->run();
    std::this_thread::sleep_for(milliseconds(300));
    *finished = true;
  });
  gate->wait_started();
  gate->release();
  worker->stop(/*aborted=*/true);
  EXPECT_TRUE(finished->load()) << "the worker was left running";
}

TEST(HostWorker, StopGivesUpOnATaskThatDoesNotEndWithinItsPatience) {
  auto worker = HostWorker::start();
  auto gate = std::make_shared<Gate>();
  worker->enqueue([gate] { gate->run(); });
  gate->wait_started();
  const auto begin = Clock::now();
  EXPECT_FALSE(worker->stop_within(milliseconds(200)));
  const auto waited = Clock::now() - begin;
  EXPECT_GE(waited, milliseconds(200));
  EXPECT_LT(waited, milliseconds(5000));
  // The detached worker still finishes its task once it can.
  gate->release();
  std::unique_lock<std::mutex> lock(gate->mutex);
  EXPECT_TRUE(
      gate->changed.wait_for(lock, std::chrono::seconds(30), [&] { return gate->finished; }));
}

TEST(HostWorker, StopWithinReportsAJoinedWorker) {
  auto worker = HostWorker::start();
  worker->enqueue([] { std::this_thread::sleep_for(milliseconds(50)); });
  EXPECT_TRUE(worker->stop_within(std::chrono::seconds(30)));
}

// Note [Buffers after a failure]: the watchdog fails a work at its deadline while the worker is
// still inside the collective; the caller, told, frees its buffers. Its wait must return only
// once the worker has let go of them.
TEST(WorkBuffers, AWaitForAFailedWorkReturnsOnlyOnceTheWorkerReleasedItsBuffers) {
  cohort::CollectiveRecord record;
  record.sequence = 4;
  record.op = cohort::CollectiveOp::all_reduce;
  record.dtype = cohort::DType::f64;
  record.count = 8;
  record.bytes = 64;
  auto state = std::make_shared<cohort::detail::WorkState>(
      record, Clock::now() + std::chrono::seconds(60), nullptr);
  state->hold();
  std::atomic<bool> let_go{false};
  std::thread worker([&] {
    std::this_thread::sleep_for(milliseconds(300));  // still reading the caller's buffer
    let_go = true;
    state->release();
  });
  // As the watchdog does at the deadline, from its own thread.
  state->fail(std::make_exception_ptr(cohort::TimeoutError("#4 did not complete within 3000 ms")));
  const auto begin = Clock::now();
  EXPECT_THROW(cohort::Work(state).wait(), cohort::TimeoutError);
  EXPECT_TRUE(let_go.load()) << "the wait returned while the worker still held the buffers";
  EXPECT_GE(Clock::now() - begin, milliseconds(250));
  worker.join();
}

TEST(WorkBuffers, ACompletedWorkIsNotHeldBack) {
  cohort::CollectiveRecord record;
  auto state = std::make_shared<cohort::detail::WorkState>(
      record, Clock::now() + std::chrono::seconds(60), nullptr);
  state->hold();  // a worker that completes the work releases it later, on its way out
  state->complete();
  const auto begin = Clock::now();
  cohort::Work(state).wait();
  EXPECT_LT(Clock::now() - begin, milliseconds(100));
  state->release();
}

}  // namespace
