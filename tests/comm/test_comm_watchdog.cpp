// The watchdog against backends that misbehave in ways only a GPU shows for real (a completion
// probe that throws on a sticky CUDA error, a collective stuck inside the backend's enqueue),
// played here by host stand-ins built on the library's own internals.
#include "comm/call_signature.hpp"
#include "comm/context.hpp"
#include "comm/flight_recorder.hpp"
#include "comm/watchdog.hpp"
#include "comm/work_state.hpp"

#include <cohort/comm/communicator.hpp>
#include <cohort/core/detail/event_pool.hpp>
#include <cohort/core/error.hpp>
#include <cohort/core/stream.hpp>
#include <cohort/launch/memory_store.hpp>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <random>
#include <set>
#include <span>
#include <stdexcept>
#include <thread>
#include <vector>

namespace {

using cohort::detail::CommContext;
using cohort::detail::WorkState;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

/// One rank's world: a store, its watchdog, and contexts watched by it.
class WatchdogTest : public ::testing::Test {
 protected:
  std::shared_ptr<CommContext> make_context(std::chrono::milliseconds timeout) {
    auto context = std::make_shared<CommContext>(cohort::StoreGroup(
        std::make_shared<cohort::PrefixStore>("test", store_), 0, 1, timeout, {0}, "test"));
    context->name = "test";
    context->id = "test";
    context->monitor_store = std::make_shared<cohort::PrefixStore>("test", store_);
    context->backend_version = "test backend";
    context->watchdog = watchdog_;
    watchdog_->add(context);
    return context;
  }

  bool published() { return store_->check({"failure"}); }

  std::shared_ptr<cohort::MemoryStore> store_ = std::make_shared<cohort::MemoryStore>();
  std::shared_ptr<cohort::detail::Watchdog> watchdog_ =
      cohort::detail::Watchdog::start(store_->clone(), 0);
};

/// Whether `condition` holds within `limit`: the watchdog marks the communicator aborted and
/// fails the work first, then publishes the failure and runs the backend's abort, so a waiter
/// that saw the work fail may look for those a moment too early.
template <typename Condition>
bool eventually(Condition condition, std::chrono::milliseconds limit = 2000ms) {
  const auto give_up = Clock::now() + limit;
  while (!condition()) {
    if (Clock::now() >= give_up) {
      return false;
    }
    std::this_thread::sleep_for(2ms);
  }
  return true;
}

std::shared_ptr<WorkState> make_work(const CommContext& context) {
  cohort::CollectiveRecord record;
  record.sequence = 1;
  record.op = cohort::CollectiveOp::all_reduce;
  record.dtype = cohort::DType::f32;
  record.count = 4;
  record.bytes = 16;
  return std::make_shared<WorkState>(record, Clock::now() + context.timeout(), context.recorder);
}

TEST_F(WatchdogTest, AProbeThatThrowsFailsTheWorkPublishesAndAbortsWithinASecond) {
  auto context = make_context(60s);  // far away: only the probe's error may end the work
  auto work = make_work(*context);
  work->set_completion_probe([]() -> bool {
    throw cohort::CudaError("cudaEventQuery failed: cudaErrorIllegalAddress (sticky)");
  });
  const auto start = Clock::now();
  context->track(work);
  while (!work->finished() && Clock::now() - start < 5s) {
    std::this_thread::sleep_for(5ms);
  }
  const auto took = Clock::now() - start;
  ASSERT_TRUE(work->finished()) << "the watchdog never failed a work whose probe throws";
  EXPECT_LT(took, 1s);
  EXPECT_THAT(
      [&] { work->rethrow_if_failed(); },
      ::testing::ThrowsMessage<cohort::Error>(::testing::HasSubstr("cudaErrorIllegalAddress")));
  EXPECT_TRUE(eventually([&] { return published(); }))
      << "the failure did not reach the store, so peers would wait";
  EXPECT_TRUE(eventually([&] { return context->aborted(); }));
  EXPECT_LT(Clock::now() - start, 1s);
}

// Note [Tracking in-flight work]: a loop that issues far ahead of the collectives running once
// made every issue sweep every outstanding work, quadratic over a run (16k works ahead: about
// 1.3e8 looks, which starved the threads running the collectives and looked like a stall). The
// steps are counted, not timed, so load on the machine cannot change the verdict.
TEST_F(WatchdogTest, TrackingManyOutstandingWorksCostsConstantStepsPerWork) {
  constexpr std::size_t kWorks = 20000;
  auto context = make_context(60s);
  std::vector<std::shared_ptr<WorkState>> works;
  std::mt19937 random(20261203);
  for (std::size_t i = 0; i < kWorks; ++i) {
    works.push_back(make_work(*context));
    context->track(works.back());
    // Half the time, one older work finishes, mostly not the oldest: the list keeps growing
    // and its front stays unfinished.
    if (i % 2 == 1) {
      works[std::uniform_int_distribution<std::size_t>(i / 2, i)(random)]->complete();
    }
  }
  const std::uint64_t steps = context->tracking_steps();
  EXPECT_LE(steps, 4 * kWorks + 64) << "tracking looked at " << steps << " works for " << kWorks
                                    << " issues: it sweeps the outstanding ones every time";
  EXPECT_GE(steps, kWorks);  // it does look at the front every time
  for (const auto& work : works) {
    work->complete();
  }
}

/// A backend whose enqueue does not return until the work it was given has failed (or 10 s).
class StuckBackend final : public cohort::Communicator {
 public:
  explicit StuckBackend(std::shared_ptr<CommContext> context) : Communicator(std::move(context)) {}
  void* native_handle() const noexcept override { return nullptr; }

 protected:
  void run(const Call& /*call*/, const cohort::Stream& /*stream*/,
           const std::shared_ptr<WorkState>& work) override {
    const auto give_up = Clock::now() + 10s;
    while (!work->finished() && Clock::now() < give_up) {
      std::this_thread::sleep_for(2ms);
    }
  }
  std::unique_ptr<Communicator> do_split(int /*color*/, int /*key*/,
                                         std::string /*name*/) override {
    return nullptr;
  }
};

TEST_F(WatchdogTest, ACollectiveStuckInTheBackendsEnqueueIsFailedAtItsDeadline) {
  StuckBackend comm(make_context(300ms));
  std::vector<float> data(4, 1.0f);
  const cohort::Stream stream = cohort::Stream::create(cohort::Device::host());
  const auto start = Clock::now();
  cohort::Work work =
      comm.all_reduce(cohort::TensorView(std::span<float>(data)), cohort::ReduceOp::sum, stream);
  const auto took = Clock::now() - start;
  EXPECT_LT(took, 3s) << "the enqueue was not seen by the watchdog";
  EXPECT_THROW(work.wait(), cohort::TimeoutError);
  EXPECT_TRUE(eventually([&] { return published(); }));
  EXPECT_TRUE(eventually([&] { return comm.aborted(); }));
}

/// The world store behind a watchdog, slow to publish a failure (a store across a busy network).
class SlowToPublishStore final : public cohort::ForwardingStore {
 public:
  using ForwardingStore::ForwardingStore;
  std::string compare_set(std::string_view key, std::string_view expected,
                          std::string_view desired) override {
    std::this_thread::sleep_for(400ms);
    return ForwardingStore::compare_set(key, expected, desired);
  }
  std::unique_ptr<cohort::Store> clone() const override {
    return std::make_unique<SlowToPublishStore>(base()->clone());
  }
  std::string describe() const override { return "slow " + ForwardingStore::describe(); }
};

// Note [Aborted before the waiter wakes]: on an H200 a waiter woken by its collective's deadline
// found the communicator not yet aborted, and its next collective waited 3.3 s for
// ncclCommAbort. Here publishing the failure takes 400 ms and the backend's abort 1 s; the
// waiter must find the communicator aborted the moment it wakes, with the reason.
TEST(WatchdogAbortOrder, AWaiterWokenAtItsDeadlineFindsTheCommunicatorAbortedAlready) {
  auto store = std::make_shared<cohort::MemoryStore>();
  auto watchdog =
      cohort::detail::Watchdog::start(std::make_unique<SlowToPublishStore>(store->clone()), 0);
  auto context = std::make_shared<CommContext>(cohort::StoreGroup(
      std::make_shared<cohort::PrefixStore>("test", store), 0, 1, 300ms, {0}, "test"));
  context->name = "test";
  context->id = "test";
  context->monitor_store = std::make_shared<cohort::PrefixStore>("test", store);
  context->backend_version = "test backend";
  context->watchdog = watchdog;
  std::atomic<bool> backend_aborted{false};
  context->set_backend_abort([&backend_aborted] {
    std::this_thread::sleep_for(1s);  // ncclCommAbort of a communicator: seconds
    backend_aborted = true;
  });
  watchdog->add(context);
  auto work = make_work(*context);
  work->set_completion_probe([] { return false; });  // the collective never completes
  context->track(work);
  ASSERT_TRUE(work->wait_until(Clock::now() + 10s)) << "the deadline never failed the work";
  EXPECT_TRUE(context->aborted()) << "woken by the failure, but the communicator is not aborted";
  EXPECT_THAT(context->abort_reason(), ::testing::HasSubstr("did not complete within 300 ms"));
  EXPECT_FALSE(backend_aborted) << "the waiter was woken only after the backend's abort";
  EXPECT_THROW(work->rethrow_if_failed(), cohort::TimeoutError);
  EXPECT_TRUE(eventually([&] { return backend_aborted.load(); }, 5000ms))
      << "the backend's abort never ran";
  EXPECT_TRUE(eventually([&] { return store->check({"failure"}); }, 5000ms))
      << "the failure was never published";
  watchdog->stop();
}

TEST(EventPool, ReusesAnEventOnceItsLastHolderLetsGo) {
  cohort::detail::EventPool pool(cohort::Device::host(), /*timing=*/false);
  const cohort::Stream stream = cohort::Stream::create(cohort::Device::host());
  const cohort::Event* first_address = nullptr;
  {
    std::shared_ptr<cohort::Event> first = pool.acquire();
    first->record(stream);
    first_address = first.get();
    std::shared_ptr<cohort::Event> second = pool.acquire();
    EXPECT_NE(second.get(), first_address) << "an event in use was handed out twice";
  }
  EXPECT_EQ(pool.free_count(), 2u);
  std::shared_ptr<cohort::Event> again = pool.acquire();
  EXPECT_EQ(pool.free_count(), 1u);
  again->record(stream);
  again->synchronize();
  EXPECT_TRUE(again->ready());
}

// Note [Step events]: a completion mark that is done gives its event back at the pool's next
// mark, although its holder (the watchdog, in a collective's probe) has not let go of it yet.
TEST(EventPool, AMarkFoundDoneGivesItsEventBackBeforeItsHolderLetsGo) {
  cohort::detail::EventPool pool(cohort::Device::host(), /*timing=*/false);
  const cohort::Stream stream = cohort::Stream::create(cohort::Device::host());
  std::promise<void> gate;
  stream.enqueue([opened = gate.get_future().share()] { opened.wait(); });
  const std::shared_ptr<cohort::detail::CompletionMark> first = pool.mark(stream);
  EXPECT_FALSE(first->ready()) << "a mark behind pending work was ready";
  gate.set_value();
  stream.synchronize();
  const auto created = cohort::detail::created_counts().events;
  const std::shared_ptr<cohort::detail::CompletionMark> second = pool.mark(stream);
  EXPECT_EQ(cohort::detail::created_counts().events, created)
      << "the second mark created an event while the first one's was done";
  EXPECT_TRUE(first->ready()) << "a mark that gave its event back must stay ready";
  stream.synchronize();
  EXPECT_TRUE(second->ready());
  EXPECT_EQ(pool.free_count(), 1u);
}

// Note [Call signatures]: calls that differ in any field get different words and, over Gloo,
// different tags; equal calls get equal ones; and the word reads back as the call.
TEST(CallSignatures, DifferentCallsGetDifferentTagsAndReadBack) {
  using cohort::CollectiveOp;
  using cohort::DType;
  using cohort::ReduceOp;
  using cohort::detail::call_signature;
  using cohort::detail::describe_signature;
  using cohort::detail::signature_tag;
  std::set<std::uint64_t> words;
  std::set<std::uint32_t> tags;
  int calls = 0;
  for (const CollectiveOp op : {CollectiveOp::all_reduce, CollectiveOp::reduce_scatter,
                                CollectiveOp::all_gather, CollectiveOp::broadcast}) {
    for (const ReduceOp reduce : {ReduceOp::sum, ReduceOp::avg, ReduceOp::min, ReduceOp::max}) {
      const bool reduces = op == CollectiveOp::all_reduce || op == CollectiveOp::reduce_scatter;
      if (!reduces && reduce != ReduceOp::sum) {
        continue;  // the reduction is no part of a call that does not reduce
      }
      for (const DType dtype : cohort::kAllDTypes) {
        for (const int root : {0, 1, 7}) {
          if (op != CollectiveOp::broadcast && root != 0) {
            continue;
          }
          for (const std::size_t count :
               {std::size_t{1}, std::size_t{4}, std::size_t{5}, std::size_t{1000},
                std::size_t{1024}, std::size_t{1} << 30}) {
            const std::uint64_t word = call_signature(op, reduce, dtype, root, count);
            words.insert(word);
            tags.insert(signature_tag(word));
            ++calls;
          }
        }
      }
    }
  }
  words.insert(call_signature(CollectiveOp::barrier, ReduceOp::sum, DType::u8, 0, 0));
  tags.insert(signature_tag(*words.rbegin()));
  ++calls;
  EXPECT_EQ(words.size(), static_cast<std::size_t>(calls));
  EXPECT_EQ(tags.size(), static_cast<std::size_t>(calls));
  // Fields that a call does not use do not change it.
  EXPECT_EQ(call_signature(CollectiveOp::all_gather, ReduceOp::max, DType::f32, 3, 8),
            call_signature(CollectiveOp::all_gather, ReduceOp::sum, DType::f32, 0, 8));
  EXPECT_EQ(describe_signature(
                call_signature(CollectiveOp::all_reduce, ReduceOp::avg, DType::bf16, 0, 1024)),
            "all_reduce of 1024 x bf16 avg");
  EXPECT_EQ(
      describe_signature(call_signature(CollectiveOp::broadcast, ReduceOp::sum, DType::i64, 2, 8)),
      "broadcast of 8 x i64 from root 2");
  EXPECT_EQ(
      describe_signature(call_signature(CollectiveOp::barrier, ReduceOp::sum, DType::f32, 0, 99)),
      "barrier");
}

// A call reads back the same from the transport's side and from the flight recorder's: a
// reduce-scatter is named by what each rank contributes, not by its part of the result.
TEST(CallSignatures, TheCallAndItsRecordAgree) {
  using cohort::CollectiveOp;
  std::vector<float> input(8);
  std::vector<float> output(2);
  const cohort::TensorView in(input.data(), input.size(), cohort::DType::f32,
                              cohort::Device::host());
  const cohort::TensorView out(output.data(), output.size(), cohort::DType::f32,
                               cohort::Device::host());
  const cohort::TensorView part(input.data(), 2, cohort::DType::f32, cohort::Device::host());
  struct Case {
    CollectiveOp op;
    cohort::TensorView input;
    cohort::TensorView output;
    int root;
  };
  for (const Case& c :
       {Case{CollectiveOp::reduce_scatter, in, out, -1},
        Case{CollectiveOp::all_gather, part, in, -1}, Case{CollectiveOp::all_reduce, in, in, -1},
        Case{CollectiveOp::broadcast, in, in, 3}}) {
    const cohort::Communicator::Call call{c.op, c.input, c.output, cohort::ReduceOp::avg, c.root};
    cohort::CollectiveRecord record;
    record.op = c.op;
    record.dtype = cohort::DType::f32;
    record.reduce = cohort::ReduceOp::avg;
    record.count = c.input.count();
    record.root = c.root;
    EXPECT_EQ(cohort::detail::call_signature(call), cohort::detail::call_signature(record))
        << cohort::to_string(c.op);
  }
  EXPECT_EQ(
      cohort::detail::describe_signature(cohort::detail::call_signature(cohort::Communicator::Call{
          CollectiveOp::reduce_scatter, in, out, cohort::ReduceOp::sum, -1})),
      "reduce_scatter of 8 x f32 sum");
}

// What a rank publishes for Note [Different calls at one point]: its oldest collective not
// finished, and the call of any collective it still records.
TEST(FlightRecorder, TheOldestUnfinishedCollectiveAndItsCall) {
  cohort::detail::FlightRecorder recorder;
  EXPECT_EQ(recorder.oldest_unfinished(), (std::pair<std::uint64_t, std::uint64_t>{0, 0}));
  const auto now = cohort::detail::FlightRecorder::Clock::now();
  for (std::uint64_t sequence = 1; sequence <= 3; ++sequence) {
    cohort::CollectiveRecord record;
    record.sequence = sequence;
    record.op = cohort::CollectiveOp::all_gather;
    record.dtype = cohort::DType::f32;
    record.count = 4 + sequence;
    recorder.issued(record, now);
  }
  recorder.finished(1, cohort::CollectiveRecord::State::completed, now);
  const auto [pending, word] = recorder.oldest_unfinished();
  EXPECT_EQ(pending, 2u);
  EXPECT_EQ(cohort::detail::describe_signature(word), "all_gather of 6 x f32");
  ASSERT_TRUE(recorder.signature(1).has_value());
  EXPECT_EQ(cohort::detail::describe_signature(*recorder.signature(1)), "all_gather of 5 x f32");
  EXPECT_FALSE(recorder.signature(4).has_value());
  recorder.finished(2, cohort::CollectiveRecord::State::failed, now);
  recorder.finished(3, cohort::CollectiveRecord::State::completed, now);
  EXPECT_EQ(recorder.oldest_unfinished().first, 0u);
}

TEST(GraphCapture, AHostStreamIsNeverCapturing) {
  EXPECT_FALSE(cohort::Stream::create(cohort::Device::host()).capturing());
}

}  // namespace
