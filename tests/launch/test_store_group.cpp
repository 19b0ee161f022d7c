// StoreGroup: all_gather, barrier and check_same through a store, with ranks as threads; and the
// one timeout message naming the ranks that never arrived.

#include <cohort/core/error.hpp>
#include <cohort/launch/memory_store.hpp>
#include <cohort/launch/store_group.hpp>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace cohort {
namespace {

using ::testing::HasSubstr;
using namespace std::chrono_literals;

/// Runs `body(rank)` on `size` threads sharing one store and rethrows nothing: failures are
/// recorded by gtest in the threads.
template <typename Body>
void on_ranks(int size, const std::shared_ptr<Store>& store, Body body) {
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      StoreGroup group(store, r, size, 10s);
      body(group);
    });
  }
  for (auto& thread : threads) thread.join();
}

class StoreGroupSizes : public ::testing::TestWithParam<int> {};

TEST_P(StoreGroupSizes, AllGatherReturnsEveryMembersValueInOrderRoundAfterRound) {
  const int size = GetParam();
  auto store = std::make_shared<MemoryStore>();
  on_ranks(size, store, [&](StoreGroup& group) {
    for (int round = 0; round < 5; ++round) {
      const auto values = group.all_gather("v", std::to_string(group.rank() * 100 + round));
      ASSERT_EQ(values.size(), static_cast<std::size_t>(size));
      for (int m = 0; m < size; ++m) {
        EXPECT_EQ(values[static_cast<std::size_t>(m)], std::to_string(m * 100 + round));
      }
    }
  });
  // Note [Store group rounds]: rounds older than two are deleted.
  EXPECT_FALSE(store->check({"v/0/0"}));
  EXPECT_FALSE(store->check({"v/2/" + std::to_string(size - 1)}));
  EXPECT_TRUE(store->check({"v/4/0"}));
}

TEST_P(StoreGroupSizes, CheckSamePassesEqualValuesAndNamesTheRankThatDiffers) {
  const int size = GetParam();
  auto store = std::make_shared<MemoryStore>();
  on_ranks(size, store, [&](StoreGroup& group) {
    EXPECT_NO_THROW(group.check_same("shape", "4x4"));
    group.barrier("between");
    const std::string mine = group.rank() == size - 1 && size > 1 ? "4x5" : "4x4";
    if (size == 1) {
      EXPECT_NO_THROW(group.check_same("shape", mine));
      return;
    }
    try {
      group.check_same("shape", mine);
      ADD_FAILURE() << "rank " << group.rank() << " accepted different values";
    } catch (const InvalidArgument& error) {
      EXPECT_THAT(error.what(), HasSubstr("shape differs between ranks"));
      EXPECT_THAT(error.what(), HasSubstr("4x5"));
      EXPECT_THAT(error.what(), HasSubstr("4x4"));
      EXPECT_THAT(error.what(),
                  HasSubstr("rank " + std::to_string(group.rank() == size - 1 ? 0 : size - 1)));
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Sizes, StoreGroupSizes, ::testing::Values(1, 2, 3, 5, 8));

TEST(StoreGroup, TimeoutNamesTheWorldRanksThatNeverArrived) {
  auto store = std::make_shared<MemoryStore>();
  // Members 0 and 1 of 4 arrive; members 2 and 3 (world ranks 12 and 13) never do.
  const std::vector<int> global{10, 11, 12, 13};
  std::vector<std::string> messages(2);
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      StoreGroup group(store, r, 4, 300ms, global, "communicator 'x'");
      try {
        group.barrier("join");
      } catch (const TimeoutError& error) {
        messages[static_cast<std::size_t>(r)] = error.what();
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
  for (const std::string& message : messages) {
    EXPECT_THAT(message, HasSubstr("ranks 12, 13 never arrived after 300 ms"));
    EXPECT_THAT(message, HasSubstr("communicator 'x' at 'join'"));
  }
}

TEST(StoreGroup, AnInterruptEndsTheWaitAndATimeoutStillNamesTheMissing) {
  auto store = std::make_shared<MemoryStore>();
  std::atomic<bool> aborted{false};
  StoreGroup group(store, 0, 2, 10s);
  group.set_interrupt(
      [&](std::string_view key) {
        if (aborted) throw Error("aborted at " + std::string(key));
      },
      20ms);
  std::thread aborter([&] {
    std::this_thread::sleep_for(100ms);
    aborted = true;
  });
  const auto start = std::chrono::steady_clock::now();
  try {
    group.barrier("join");
    ADD_FAILURE() << "the barrier ended without member 1";
  } catch (const TimeoutError& error) {
    ADD_FAILURE() << "timed out instead of being interrupted: " << error.what();
  } catch (const Error& error) {
    EXPECT_THAT(error.what(), HasSubstr("aborted at join"));
  }
  aborter.join();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);  // not the 10 s deadline

  // An interrupt that never fires changes nothing: members that come are seen, and the timeout
  // is the group's, naming who never came.
  StoreGroup patient(store, 0, 2, 300ms);
  patient.set_interrupt([](std::string_view) {}, 20ms);
  std::thread other([&] {
    StoreGroup member(store, 1, 2, 10s);
    member.barrier("second");
  });
  EXPECT_NO_THROW(patient.barrier("second"));
  other.join();
  EXPECT_THAT([&] { patient.barrier("third"); },
              ::testing::ThrowsMessage<TimeoutError>(HasSubstr("rank 1 never arrived after")));
}

TEST(StoreGroup, RefusesABadShape) {
  auto store = std::make_shared<MemoryStore>();
  EXPECT_THROW(StoreGroup(store, 2, 2, 1s), InvalidArgument);
  EXPECT_THROW(StoreGroup(store, 0, 2, 1s, {5}), InvalidArgument);
  EXPECT_THROW(StoreGroup(nullptr, 0, 1, 1s), InvalidArgument);
  EXPECT_EQ(StoreGroup(store, 1, 2, 1s, {7, 9}).global_rank(1), 9);
}

}  // namespace
}  // namespace cohort
