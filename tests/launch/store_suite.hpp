#pragma once

// The store suite: what every Store promises, as a typed test suite that each test program
// instantiates for its stores (test_store: memory, file, TCP; test_torch_store: TorchStore
// against PyTorch's own server). A backend has `kName`, `make()` (nullptr, with `unavailable`
// saying why, to skip) and `wait_until_blocked(requests)`.

#include <cohort/core/error.hpp>
#include <cohort/launch/store.hpp>

#include "support/test_helpers.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace cohort::store_suite {

using Clock = std::chrono::steady_clock;
using cohort_test::contains;
using cohort_test::elapsed_since;
using cohort_test::message_of;
using cohort_test::spawn;
using std::chrono::milliseconds;

// Long enough that a passing run never meets it, short enough that a hang fails fast.
constexpr Milliseconds kStoreTimeout = std::chrono::seconds(10);
// For the tests that expect a timeout.
constexpr Milliseconds kShortTimeout{150};

template <typename Backend>
class StoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ = backend_.make();
    if constexpr (requires { backend_.unavailable; }) {
      if (store_ == nullptr) GTEST_SKIP() << backend_.unavailable;
    }
  }
  Backend backend_;
  std::shared_ptr<Store> store_;
};

struct BackendName {
  template <typename Backend>
  static std::string GetName(int) {
    return Backend::kName;
  }
};

TYPED_TEST_SUITE_P(StoreTest);

TYPED_TEST_P(StoreTest, SetThenGetReturnsTheLatestValue) {
  auto& store = *this->store_;
  store.set("key", "first");
  EXPECT_EQ(store.get("key"), "first");
  store.set("key", "second");
  EXPECT_EQ(store.get("key"), "second");
  EXPECT_EQ(store.timeout(), kStoreTimeout);
}

TYPED_TEST_P(StoreTest, GetBlocksUntilAnotherThreadSets) {
  auto& store = *this->store_;
  auto writer_store = store.clone();
  ASSERT_FALSE(store.check({"late"}));
  std::atomic<bool> returned{false};
  std::string value;
  std::thread reader = spawn([&] {
    value = store.get("late", std::chrono::seconds(30));
    returned = true;
  });
  this->backend_.wait_until_blocked(1);
  EXPECT_FALSE(returned.load()) << "get returned before the key was set";
  writer_store->set("late", "arrived");
  reader.join();
  EXPECT_EQ(value, "arrived");
}

TYPED_TEST_P(StoreTest, GetTimeoutNamesKeyStoreAndTime) {
  auto& store = *this->store_;
  const auto start = Clock::now();
  const auto message = message_of<TimeoutError>([&] { store.get("never-set", kShortTimeout); });
  const auto waited = elapsed_since(start);
  EXPECT_GE(waited, kShortTimeout);
  EXPECT_LT(waited, kShortTimeout + milliseconds(1000));
  EXPECT_TRUE(contains(message, "\"never-set\""));
  EXPECT_TRUE(contains(message, store.describe()));
  EXPECT_TRUE(contains(message, "150 ms"));
  EXPECT_TRUE(contains(message, "check that every rank"));
}

TYPED_TEST_P(StoreTest, WaitReturnsWhenEveryKeyIsSet) {
  auto& store = *this->store_;
  auto writer_store = store.clone();
  std::atomic<bool> returned{false};
  std::thread waiter = spawn([&] {
    store.wait({"w1", "w2", "w3"}, std::chrono::seconds(30));
    returned = true;
  });
  this->backend_.wait_until_blocked(1);
  for (const char* key : {"w1", "w2"}) {
    writer_store->set(key, key);
    EXPECT_FALSE(returned.load()) << "wait returned with " << key << " the last key set";
  }
  writer_store->set("w3", "w3");
  waiter.join();
  EXPECT_TRUE(returned.load());
  EXPECT_TRUE(store.check({"w1", "w2", "w3"}));
  store.wait({});  // nothing to wait for
}

TYPED_TEST_P(StoreTest, WaitTimeoutNamesOnlyTheMissingKeys) {
  auto& store = *this->store_;
  store.set("present", "1");
  const auto message = message_of<TimeoutError>([&] {
    store.wait({"present", "absent-1", "absent-2"}, kShortTimeout);
  });
  EXPECT_TRUE(contains(message, "keys \"absent-1\", \"absent-2\""));
  EXPECT_FALSE(contains(message, "\"present\""));
  EXPECT_TRUE(contains(message, store.describe()));
}

TYPED_TEST_P(StoreTest, CheckNeverBlocks) {
  auto& store = *this->store_;
  EXPECT_FALSE(store.check({"a"}));
  store.set("a", "");
  EXPECT_TRUE(store.check({"a"}));
  EXPECT_FALSE(store.check({"a", "b"}));
  store.set("b", "x");
  EXPECT_TRUE(store.check({"a", "b"}));
  EXPECT_TRUE(store.check({}));
}

TYPED_TEST_P(StoreTest, ConcurrentAddsFromClonesSumExactly) {
  constexpr int kThreads = 8;
  constexpr int kAddsPerThread = 25;
  auto& store = *this->store_;
  std::vector<std::vector<std::int64_t>> returned(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.push_back(spawn([&, t, mine = std::shared_ptr<Store>(store.clone())] {
      for (int i = 0; i < kAddsPerThread; ++i)
        returned[static_cast<std::size_t>(t)].push_back(mine->add("counter", 1));
    }));
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(store.get("counter"), std::to_string(kThreads * kAddsPerThread));
  // Atomic adds hand out every value from 1 to the total exactly once.
  std::set<std::int64_t> seen;
  for (const auto& values : returned) seen.insert(values.begin(), values.end());
  EXPECT_EQ(seen.size(), static_cast<std::size_t>(kThreads * kAddsPerThread));
  EXPECT_EQ(*seen.begin(), 1);
  EXPECT_EQ(*seen.rbegin(), kThreads * kAddsPerThread);
}

TYPED_TEST_P(StoreTest, AddTreatsAbsentAsZeroAndKeepsDecimalText) {
  auto& store = *this->store_;
  EXPECT_EQ(store.add("n", 5), 5);
  EXPECT_EQ(store.add("n", -12), -7);
  EXPECT_EQ(store.get("n"), "-7");
  EXPECT_EQ(store.add("n", 0), -7);
  store.set("preset", "40");
  EXPECT_EQ(store.add("preset", 2), 42);
}

TYPED_TEST_P(StoreTest, AddOnANonIntegerThrowsInvalidArgument) {
  auto& store = *this->store_;
  for (const std::string bad : {"abc", "12abc", " 1", "", "1.5", "99999999999999999999"}) {
    store.set("bad", bad);
    const auto message = message_of<InvalidArgument>([&] { store.add("bad", 1); });
    EXPECT_TRUE(contains(message, "not a decimal integer")) << "value " << bad;
    EXPECT_TRUE(contains(message, "\"bad\""));
    EXPECT_EQ(store.get("bad"), bad);  // unchanged
  }
  store.set("big", std::to_string(INT64_MAX));
  EXPECT_TRUE(contains(message_of<InvalidArgument>([&] { store.add("big", 1); }), "overflow"));
}

TYPED_TEST_P(StoreTest, CompareSet) {
  auto& store = *this->store_;
  // Absent and a non-empty expectation: nothing happens.
  EXPECT_EQ(store.compare_set("cas", "something", "x"), "");
  EXPECT_FALSE(store.check({"cas"}));
  // Absent and an empty expectation: set.
  EXPECT_EQ(store.compare_set("cas", "", "first"), "first");
  EXPECT_EQ(store.get("cas"), "first");
  // Mismatch: returns the current value, changes nothing.
  EXPECT_EQ(store.compare_set("cas", "wrong", "second"), "first");
  EXPECT_EQ(store.get("cas"), "first");
  // Match: set.
  EXPECT_EQ(store.compare_set("cas", "first", "second"), "second");
  EXPECT_EQ(store.get("cas"), "second");
}

TYPED_TEST_P(StoreTest, CompareSetElectsExactlyOneWinner) {
  constexpr int kThreads = 8;
  auto& store = *this->store_;
  std::vector<std::string> seen(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.push_back(spawn([&, t, mine = std::shared_ptr<Store>(store.clone())] {
      seen[static_cast<std::size_t>(t)] =
          mine->compare_set("leader", "", "rank" + std::to_string(t));
    }));
  }
  for (auto& thread : threads) thread.join();
  const auto winner = store.get("leader");
  for (const auto& value : seen) EXPECT_EQ(value, winner);
}

TYPED_TEST_P(StoreTest, RemoveReportsWhetherTheKeyExisted) {
  auto& store = *this->store_;
  store.set("doomed", "v");
  EXPECT_TRUE(store.remove("doomed"));
  EXPECT_FALSE(store.check({"doomed"}));
  EXPECT_FALSE(store.remove("doomed"));
  EXPECT_THROW(store.get("doomed", milliseconds(20)), TimeoutError);
}

TYPED_TEST_P(StoreTest, ValuesAndKeysAreArbitraryBytes) {
  auto& store = *this->store_;
  std::string every_byte;
  for (int byte = 0; byte < 256; ++byte) every_byte.push_back(static_cast<char>(byte));
  const std::string nul_and_ff("a\0b\xff\xff\0", 6);
  store.set("bytes", every_byte);
  store.set("nul", nul_and_ff);
  EXPECT_EQ(store.get("bytes"), every_byte);
  EXPECT_EQ(store.get("nul"), nul_and_ff);
  const std::string binary_key("k\0/../\xff .", 10);
  store.set(binary_key, "v");
  EXPECT_EQ(store.get(binary_key), "v");
  EXPECT_FALSE(store.check({std::string("k", 1)}));
  store.set("..", "dots");
  store.set("a/b", "slash");
  EXPECT_EQ(store.get(".."), "dots");
  EXPECT_EQ(store.get("a/b"), "slash");
}

TYPED_TEST_P(StoreTest, EmptyValueIsAValue) {
  auto& store = *this->store_;
  store.set("empty", "");
  EXPECT_TRUE(store.check({"empty"}));
  EXPECT_EQ(store.get("empty"), "");
}

TYPED_TEST_P(StoreTest, EmptyKeyIsRejected) {
  auto& store = *this->store_;
  EXPECT_THROW(store.set("", "v"), InvalidArgument);
  EXPECT_THROW(store.get("", milliseconds(10)), InvalidArgument);
  EXPECT_THROW(store.wait({"a", ""}, milliseconds(10)), InvalidArgument);
  EXPECT_THROW(store.check({""}), InvalidArgument);
  EXPECT_THROW(store.add("", 1), InvalidArgument);
  EXPECT_THROW(store.compare_set("", "", "v"), InvalidArgument);
  EXPECT_THROW(store.remove(""), InvalidArgument);
}

TYPED_TEST_P(StoreTest, CloneSeesTheSameData) {
  auto& store = *this->store_;
  store.set_timeout(milliseconds(1234));
  auto clone = store.clone();
  EXPECT_EQ(clone->timeout(), milliseconds(1234));
  EXPECT_EQ(clone->describe(), store.describe());
  store.set("from-original", "1");
  clone->set("from-clone", "2");
  EXPECT_EQ(clone->get("from-original"), "1");
  EXPECT_EQ(store.get("from-clone"), "2");
  // A clone of a clone, outliving the first clone.
  auto grandchild = clone->clone();
  clone.reset();
  EXPECT_EQ(grandchild->add("from-original", 1), 2);
}

TYPED_TEST_P(StoreTest, PrefixStoresAreIsolated) {
  const auto a = std::make_shared<PrefixStore>("a", this->store_);
  const auto b = std::make_shared<PrefixStore>("b", this->store_);
  a->set("k", "1");
  b->set("k", "2");
  EXPECT_EQ(a->get("k"), "1");
  EXPECT_EQ(b->get("k"), "2");
  EXPECT_EQ(this->store_->get("a/k"), "1");
  EXPECT_EQ(a->add("n", 3), 3);
  EXPECT_FALSE(b->check({"n"}));
  EXPECT_TRUE(b->remove("k"));
  EXPECT_EQ(a->get("k"), "1");
  EXPECT_EQ(a->compare_set("k", "1", "one"), "one");
  a->wait({"k", "n"}, milliseconds(100));
  EXPECT_THROW(a->set("", "v"), InvalidArgument);  // not "a/"
  const auto message = message_of<TimeoutError>([&] { b->get("k", milliseconds(50)); });
  EXPECT_TRUE(contains(message, "\"b/k\""));
  EXPECT_TRUE(contains(b->describe(), "\"b\""));
  auto clone = a->clone();
  EXPECT_EQ(clone->get("k"), "one");
  EXPECT_EQ(clone->timeout(), a->timeout());
  EXPECT_THROW(PrefixStore("", this->store_), InvalidArgument);
}

TYPED_TEST_P(StoreTest, BarrierHoldsEveryoneUntilAllArriveAndIsReusable) {
  constexpr int kRounds = 3;
  for (const int world_size : {1, 2, 3, 8}) {
    std::vector<std::atomic<int>> arrived(kRounds);
    std::atomic<int> left_early{0};
    std::vector<std::thread> threads;
    for (int rank = 0; rank < world_size; ++rank) {
      threads.push_back(spawn([&, mine = std::shared_ptr<Store>(this->store_->clone())] {
        for (int round = 0; round < kRounds; ++round) {
          arrived[static_cast<std::size_t>(round)].fetch_add(1);
          store_barrier(*mine, "barrier-" + std::to_string(world_size), world_size,
                        std::chrono::seconds(10));
          if (arrived[static_cast<std::size_t>(round)].load() != world_size)
            left_early.fetch_add(1);
        }
      }));
    }
    for (auto& thread : threads) thread.join();
    EXPECT_EQ(left_early.load(), 0) << "world size " << world_size;
  }
}

TYPED_TEST_P(StoreTest, BarrierTimeoutSaysHowManyArrived) {
  const auto alone =
      message_of<TimeoutError>([&] { store_barrier(*this->store_, "lonely", 3, kShortTimeout); });
  EXPECT_TRUE(contains(alone, "1 of 3"));
  EXPECT_TRUE(contains(alone, "\"lonely\""));

  std::string other;
  std::thread second = spawn([&, mine = std::shared_ptr<Store>(this->store_->clone())] {
    other = message_of<TimeoutError>([&] { store_barrier(*mine, "pair", 3, milliseconds(300)); });
  });
  const auto mine =
      message_of<TimeoutError>([&] { store_barrier(*this->store_, "pair", 3, milliseconds(300)); });
  second.join();
  EXPECT_TRUE(contains(mine, "2 of 3"));
  EXPECT_TRUE(contains(other, "2 of 3"));
  EXPECT_THROW(store_barrier(*this->store_, "bad", 0, kShortTimeout), InvalidArgument);
}

// ---- FileStore only ---------------------------------------------------------------------------

REGISTER_TYPED_TEST_SUITE_P(StoreTest, SetThenGetReturnsTheLatestValue,
                            GetBlocksUntilAnotherThreadSets, GetTimeoutNamesKeyStoreAndTime,
                            WaitReturnsWhenEveryKeyIsSet, WaitTimeoutNamesOnlyTheMissingKeys,
                            CheckNeverBlocks, ConcurrentAddsFromClonesSumExactly,
                            AddTreatsAbsentAsZeroAndKeepsDecimalText,
                            AddOnANonIntegerThrowsInvalidArgument, CompareSet,
                            CompareSetElectsExactlyOneWinner, RemoveReportsWhetherTheKeyExisted,
                            ValuesAndKeysAreArbitraryBytes, EmptyValueIsAValue, EmptyKeyIsRejected,
                            CloneSeesTheSameData, PrefixStoresAreIsolated,
                            BarrierHoldsEveryoneUntilAllArriveAndIsReusable,
                            BarrierTimeoutSaysHowManyArrived);

}  // namespace cohort::store_suite
