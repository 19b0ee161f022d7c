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

}  // namespace
