// The event pool's drain (Note [Draining lent marks] in cohort/core/detail/event_pool.hpp), with
// host streams and events, which keep the same order rules as CUDA's: a mark still pending on one
// stream holds back only the later marks of that stream, so a fast loop on another stream keeps
// reusing its events instead of creating one per collective.

#include <cohort/core/detail/event_pool.hpp>
#include <cohort/core/stream.hpp>

#include <gtest/gtest.h>

#include <future>
#include <memory>

namespace {

using cohort::Device;
using cohort::Stream;

TEST(EventPool, APendingMarkOnOneStreamHoldsBackOnlyThatStream) {
  cohort::detail::EventPool pool(Device::host(), /*timing=*/false);
  const Stream slow = Stream::create(Device::host());
  const Stream fast = Stream::create(Device::host());
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  slow.enqueue([released] { released.wait(); });  // a collective that takes its time
  const auto pending = pool.mark(slow);
  pool.mark(fast);
  fast.synchronize();
  const std::uint64_t before = cohort::detail::created_counts().events;
  for (int i = 0; i < 100; ++i) {
    pool.mark(fast);  // the caller drops its mark at once, as a collective's probe may
    fast.synchronize();
  }
  // Each mark found the previous one done and reused its event.
  EXPECT_EQ(cohort::detail::created_counts().events - before, 0u);
  EXPECT_EQ(pool.lent_count(), 2u);  // the pending one and the last one of `fast`
  EXPECT_FALSE(pending->ready());
  release.set_value();
  slow.synchronize();
  EXPECT_TRUE(pending->ready());
  pool.mark(fast);
  fast.synchronize();
  EXPECT_EQ(pool.lent_count(), 1u);  // every earlier mark was given back
}

TEST(EventPool, MarksOfOneStreamAreGivenBackInOrder) {
  cohort::detail::EventPool pool(Device::host(), /*timing=*/false);
  const Stream stream = Stream::create(Device::host());
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  const auto first = pool.mark(stream);
  stream.synchronize();
  stream.enqueue([released] { released.wait(); });
  const auto second = pool.mark(stream);  // pending behind the task
  const auto third = pool.mark(stream);
  EXPECT_TRUE(first->ready());
  EXPECT_FALSE(second->ready());
  EXPECT_FALSE(third->ready());
  EXPECT_EQ(pool.lent_count(), 2u);  // the first was done and went back when the second was made
  release.set_value();
  stream.synchronize();
  EXPECT_TRUE(third->ready());
  EXPECT_TRUE(second->ready());
}

}  // namespace
