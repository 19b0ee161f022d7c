#include <cohort/core/error.hpp>
#include <cohort/core/stream.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

namespace {

using namespace std::chrono_literals;

TEST(HostStream, RunsTasksInOrderOffTheCallingThread) {
  const cohort::Stream stream = cohort::Stream::create(cohort::Device::host());
  EXPECT_EQ(stream.device(), cohort::Device::host());
  EXPECT_EQ(stream.native_handle(), nullptr);
  std::vector<int> order;
  std::atomic<bool> off_thread{true};
  const auto caller = std::this_thread::get_id();
  for (int i = 0; i < 1000; ++i) {
    stream.enqueue([&, i] {
      if (std::this_thread::get_id() == caller) off_thread = false;
      order.push_back(i);
    });
  }
  stream.synchronize();
  ASSERT_EQ(order.size(), 1000u);
  for (int i = 0; i < 1000; ++i) {
    EXPECT_EQ(order[static_cast<std::size_t>(i)], i);
  }
  EXPECT_TRUE(off_thread);
  EXPECT_TRUE(stream.ready());
}

TEST(HostStream, ReadyIsFalseWhileWorkIsPending) {
  const cohort::Stream stream = cohort::Stream::create(cohort::Device::host());
  std::atomic<bool> release{false};
  stream.enqueue([&] {
    while (!release) std::this_thread::sleep_for(1ms);
  });
  EXPECT_FALSE(stream.ready());
  release = true;
  stream.synchronize();
  EXPECT_TRUE(stream.ready());
}

TEST(HostStream, EventMakesAnotherStreamWait) {
  const cohort::Stream producer = cohort::Stream::create(cohort::Device::host());
  const cohort::Stream consumer = cohort::Stream::create(cohort::Device::host());
  cohort::Event produced = cohort::Event::create(cohort::Device::host());
  EXPECT_TRUE(produced.ready());  // never recorded
  std::atomic<int> value{0};
  int seen = -1;
  producer.enqueue([&] {
    std::this_thread::sleep_for(50ms);
    value = 42;
  });
  produced.record(producer);
  consumer.wait(produced);
  consumer.enqueue([&] { seen = value; });
  consumer.synchronize();
  EXPECT_EQ(seen, 42);
  EXPECT_TRUE(produced.ready());
}

TEST(HostStream, WaitUsesTheRecordingAtTheTimeOfTheCall) {
  const cohort::Stream a = cohort::Stream::create(cohort::Device::host());
  const cohort::Stream b = cohort::Stream::create(cohort::Device::host());
  cohort::Event event = cohort::Event::create(cohort::Device::host());
  event.record(a);
  b.wait(event);
  std::atomic<bool> release{false};
  a.enqueue([&] {
    while (!release) std::this_thread::sleep_for(1ms);
  });
  event.record(a);  // a later mark: b must not wait for it
  b.synchronize();  // would hang if b waited for the second recording
  release = true;
  a.synchronize();
  SUCCEED();
}

TEST(HostStream, FailedTaskSkipsLaterTasksAndRethrows) {
  const cohort::Stream stream = cohort::Stream::create(cohort::Device::host());
  bool later_ran = false;
  stream.enqueue([] { throw std::runtime_error("bucket 3 failed"); });
  stream.enqueue([&] { later_ran = true; });
  try {
    stream.synchronize();
    FAIL() << "synchronize did not rethrow";
  } catch (const std::runtime_error& error) {
    EXPECT_STREQ(error.what(), "bucket 3 failed");
  }
  EXPECT_FALSE(later_ran);
  EXPECT_THROW(stream.synchronize(), std::runtime_error);  // sticky, like a CUDA error
}

TEST(HostStream, AFailedStreamStillCompletesItsEventsWithTheError) {
  const cohort::Stream failing = cohort::Stream::create(cohort::Device::host());
  const cohort::Stream waiting = cohort::Stream::create(cohort::Device::host());
  cohort::Event event = cohort::Event::create(cohort::Device::host());
  bool waiting_ran_on = false;
  failing.enqueue([] { throw std::runtime_error("gradient overflow"); });
  event.record(failing);  // skipped as work, but it must still complete the event
  waiting.wait(event);
  waiting.enqueue([&] { waiting_ran_on = true; });
  // Neither call may hang; both report the first stream's error.
  EXPECT_THROW(event.synchronize(), std::runtime_error);
  try {
    waiting.synchronize();
    FAIL() << "the waiting stream did not fail";
  } catch (const std::runtime_error& error) {
    EXPECT_STREQ(error.what(), "gradient overflow");
  }
  EXPECT_FALSE(waiting_ran_on);
  EXPECT_TRUE(event.ready());
}

TEST(HostStream, WaitTasksKeepTheirPlaceWhoeverRunsThem) {
  // A wait-only task may run on the synchronizing thread or on the worker; either way it runs
  // after what was enqueued before it and before what comes after it, and never alongside.
  const cohort::Stream stream = cohort::Stream::create(cohort::Device::host());
  std::vector<int> order;
  std::atomic<int> running{0};
  std::atomic<bool> overlapped{false};
  auto step = [&](int value) {
    if (running.fetch_add(1) != 0) overlapped = true;
    order.push_back(value);
    running.fetch_sub(1);
  };
  for (int round = 0; round < 500; ++round) {
    stream.enqueue([&, round] { step(3 * round); });
    stream.enqueue_wait([&, round] { step(3 * round + 1); });
    if (round % 2 == 0) stream.synchronize();
    stream.enqueue([&, round] { step(3 * round + 2); });
  }
  stream.synchronize();
  ASSERT_EQ(order.size(), 1500u);
  for (std::size_t i = 0; i < order.size(); ++i) {
    ASSERT_EQ(order[i], static_cast<int>(i));
  }
  EXPECT_FALSE(overlapped);
  // A wait that throws fails the stream like any task.
  stream.enqueue_wait([] { throw std::runtime_error("peer failed"); });
  EXPECT_THROW(stream.synchronize(), std::runtime_error);
}

TEST(HostStream, TimingEventsMeasureElapsedTime) {
  const cohort::Stream stream = cohort::Stream::create(cohort::Device::host());
  cohort::Event start = cohort::Event::create(cohort::Device::host(), true);
  cohort::Event end = cohort::Event::create(cohort::Device::host(), true);
  start.record(stream);
  stream.enqueue([] { std::this_thread::sleep_for(30ms); });
  end.record(stream);
  end.synchronize();
  const float elapsed = cohort::Event::elapsed_ms(start, end);
  EXPECT_GE(elapsed, 29.0f);
  EXPECT_LT(elapsed, 2000.0f);

  cohort::Event untimed = cohort::Event::create(cohort::Device::host());
  untimed.record(stream);
  EXPECT_THROW(cohort::Event::elapsed_ms(start, untimed), cohort::InvalidArgument);
}

TEST(HostStream, CopiesShareTheStreamAndDestructionFinishesWork) {
  std::atomic<int> done{0};
  {
    const cohort::Stream stream = cohort::Stream::create(cohort::Device::host());
    const cohort::Stream copy = stream;  // NOLINT(performance-unnecessary-copy-initialization)
    for (int i = 0; i < 10; ++i) {
      copy.enqueue([&] {
        std::this_thread::sleep_for(1ms);
        ++done;
      });
    }
  }
  EXPECT_EQ(done, 10);
}

TEST(HostStream, EventOutlivesItsHandle) {
  const cohort::Stream stream = cohort::Stream::create(cohort::Device::host());
  std::atomic<bool> release{false};
  stream.enqueue([&] {
    while (!release) std::this_thread::sleep_for(1ms);
  });
  {
    cohort::Event event = cohort::Event::create(cohort::Device::host());
    event.record(stream);
  }  // the recording task still refers to the event's state
  release = true;
  stream.synchronize();
  SUCCEED();
}

// Note [Caller-run host streams]
TEST(CallerHostStream, RunsEachTaskOnTheCallingThreadBeforeEnqueueReturns) {
  const cohort::Stream stream =
      cohort::Stream::create(cohort::Device::host(), cohort::HostExecution::caller);
  const auto caller = std::this_thread::get_id();
  std::vector<int> order;
  for (int i = 0; i < 3; ++i) {
    stream.enqueue([&, i] {
      EXPECT_EQ(std::this_thread::get_id(), caller);
      order.push_back(i);
      if (i == 1) {
        stream.enqueue([&] { order.push_back(10); });  // a task may enqueue on its own stream
      }
    });
    EXPECT_EQ(order.back(), i == 1 ? 10 : i)
        << "task " << i << " had not run when enqueue returned";
  }
  EXPECT_EQ(order, (std::vector<int>{0, 1, 10, 2}));
  EXPECT_TRUE(stream.ready());
  cohort::Event done = cohort::Event::create(cohort::Device::host());
  done.record(stream);
  EXPECT_TRUE(done.ready());
}

TEST(CallerHostStream, WaitBlocksTheCallerUntilTheEventCompletes) {
  const cohort::Stream worker = cohort::Stream::create(cohort::Device::host());
  const cohort::Stream stream =
      cohort::Stream::create(cohort::Device::host(), cohort::HostExecution::caller);
  std::atomic<int> value{0};
  worker.enqueue([&] {
    std::this_thread::sleep_for(50ms);
    value = 42;
  });
  cohort::Event produced = cohort::Event::create(cohort::Device::host());
  produced.record(worker);
  stream.wait(produced);
  EXPECT_EQ(value, 42) << "wait returned before the event completed";
}

TEST(CallerHostStream, AFailedTaskThrowsFromEnqueueAndEveryLaterCall) {
  const cohort::Stream stream =
      cohort::Stream::create(cohort::Device::host(), cohort::HostExecution::caller);
  EXPECT_THROW(stream.enqueue([] { throw std::runtime_error("boom"); }), std::runtime_error);
  bool ran = false;
  EXPECT_THROW(stream.enqueue([&] { ran = true; }), std::runtime_error);
  EXPECT_FALSE(ran);
  EXPECT_THROW(stream.synchronize(), std::runtime_error);
  cohort::Event marker = cohort::Event::create(cohort::Device::host());
  marker.record(stream);
  EXPECT_THROW(marker.synchronize(), std::runtime_error);
}

TEST(Stream, CudaDeviceWithoutAGpuIsAClearError) {
  if (cohort::cuda_device_count() > 0) {
    GTEST_SKIP() << "a GPU is present; test_stream_gpu covers CUDA streams";
  }
  if (cohort::built_with_cuda()) {  // the CUDA runtime reports the missing device
    EXPECT_THROW(cohort::Stream::create(cohort::Device::cuda(0)), cohort::Error);
    EXPECT_THROW(cohort::Event::create(cohort::Device::cuda(0)), cohort::Error);
  } else {
    EXPECT_THROW(cohort::Stream::create(cohort::Device::cuda(0)), cohort::InvalidArgument);
    EXPECT_THROW(cohort::Event::create(cohort::Device::cuda(0)), cohort::InvalidArgument);
  }
}

}  // namespace
