#include <cohort/core/backoff.hpp>

#include <gtest/gtest.h>

namespace {

using std::chrono::microseconds;

TEST(Backoff, DoublesFromTheFirstPauseUpToTheCap) {
  cohort::Backoff backoff(microseconds(10), microseconds(50));
  EXPECT_EQ(backoff.next(), microseconds(10));
  EXPECT_EQ(backoff.next(), microseconds(20));
  EXPECT_EQ(backoff.next(), microseconds(40));
  EXPECT_EQ(backoff.next(), microseconds(50));
  EXPECT_EQ(backoff.next(), microseconds(50));
}

TEST(Backoff, ACapBelowTheFirstPauseKeepsTheFirst) {
  cohort::Backoff backoff(microseconds(30), microseconds(5));
  EXPECT_EQ(backoff.next(), microseconds(30));
  EXPECT_EQ(backoff.next(), microseconds(30));
}

TEST(Backoff, SleepNeverPassesTheDeadline) {
  using Clock = std::chrono::steady_clock;
  cohort::Backoff backoff(std::chrono::seconds(10), std::chrono::seconds(10));
  const auto start = Clock::now();
  backoff.sleep(start + std::chrono::milliseconds(20));
  const auto slept = Clock::now() - start;
  EXPECT_GE(slept, std::chrono::milliseconds(20));
  EXPECT_LT(slept, std::chrono::seconds(5));  // not the 10 s pause
  // Past the deadline it returns at once.
  const auto late = Clock::now();
  backoff.sleep(late - std::chrono::milliseconds(1));
  EXPECT_LT(Clock::now() - late, std::chrono::seconds(1));
}

}  // namespace
