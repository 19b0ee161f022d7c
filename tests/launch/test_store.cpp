// One typed suite over every store (memory, file, TCP), then what only FileStore promises.

#include <cohort/core/error.hpp>
#include <cohort/launch/file_store.hpp>
#include <cohort/launch/memory_store.hpp>
#include <cohort/launch/store.hpp>
#include <cohort/launch/tcp_store.hpp>

#include "support/test_helpers.hpp"

#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace cohort {
namespace {

namespace fs = std::filesystem;
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

/// A fresh folder under the system's temporary directory, removed afterwards.
class TemporaryFolder {
 public:
  TemporaryFolder() {
    static std::atomic<int> counter{0};
    path_ = fs::temp_directory_path() /
            ("cohort-test-store-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TemporaryFolder() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  TemporaryFolder(const TemporaryFolder&) = delete;
  TemporaryFolder& operator=(const TemporaryFolder&) = delete;
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

// A head start for a client about to block in a store that cannot say when it is blocked
// (memory and file). Correctness never depends on it: it only makes it likely that the client is
// already waiting, which is what the blocking tests mean to exercise.
constexpr Milliseconds kHeadStart{50};

struct MemoryBackend {
  static constexpr const char* kName = "MemoryStore";
  std::shared_ptr<Store> make() { return std::make_shared<MemoryStore>(kStoreTimeout); }
  void wait_until_blocked(std::size_t) { std::this_thread::sleep_for(kHeadStart); }
};

struct FileBackend {
  static constexpr const char* kName = "FileStore";
  TemporaryFolder folder;
  std::shared_ptr<Store> make() {
    return std::make_shared<FileStore>(folder.path(), "run", kStoreTimeout);
  }
  void wait_until_blocked(std::size_t) { std::this_thread::sleep_for(kHeadStart); }
};

struct TcpBackend {
  static constexpr const char* kName = "TcpStore";
  TcpStoreServer server{local_server()};
  static TcpStoreServerOptions local_server() {
    TcpStoreServerOptions options;
    options.host = "127.0.0.1";
    options.port = 0;
    return options;
  }
  std::shared_ptr<Store> make() {
    TcpStoreOptions options;
    options.host = "127.0.0.1";
    options.port = server.port();
    options.token = "";
    options.timeout = kStoreTimeout;
    options.connect_timeout = std::chrono::seconds(5);
    return std::make_shared<TcpStore>(options);
  }
  /// The server says when it holds the client's request: no head start needed.
  void wait_until_blocked(std::size_t requests) {
    EXPECT_TRUE(cohort_test::wait_until([&] { return server.held_requests() == requests; },
                                        "the server holding the blocked request"));
  }
};

template <typename Backend>
class StoreTest : public ::testing::Test {
 protected:
  Backend backend_;
  std::shared_ptr<Store> store_ = backend_.make();
};

struct BackendName {
  template <typename Backend>
  static std::string GetName(int) {
    return Backend::kName;
  }
};

using Backends = ::testing::Types<MemoryBackend, FileBackend, TcpBackend>;
TYPED_TEST_SUITE(StoreTest, Backends, BackendName);

TYPED_TEST(StoreTest, SetThenGetReturnsTheLatestValue) {
  auto& store = *this->store_;
  store.set("key", "first");
  EXPECT_EQ(store.get("key"), "first");
  store.set("key", "second");
  EXPECT_EQ(store.get("key"), "second");
  EXPECT_EQ(store.timeout(), kStoreTimeout);
}

TYPED_TEST(StoreTest, GetBlocksUntilAnotherThreadSets) {
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

TYPED_TEST(StoreTest, GetTimeoutNamesKeyStoreAndTime) {
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

TYPED_TEST(StoreTest, WaitReturnsWhenEveryKeyIsSet) {
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

TYPED_TEST(StoreTest, WaitTimeoutNamesOnlyTheMissingKeys) {
  auto& store = *this->store_;
  store.set("present", "1");
  const auto message = message_of<TimeoutError>([&] {
    store.wait({"present", "absent-1", "absent-2"}, kShortTimeout);
  });
  EXPECT_TRUE(contains(message, "keys \"absent-1\", \"absent-2\""));
  EXPECT_FALSE(contains(message, "\"present\""));
  EXPECT_TRUE(contains(message, store.describe()));
}

TYPED_TEST(StoreTest, CheckNeverBlocks) {
  auto& store = *this->store_;
  EXPECT_FALSE(store.check({"a"}));
  store.set("a", "");
  EXPECT_TRUE(store.check({"a"}));
  EXPECT_FALSE(store.check({"a", "b"}));
  store.set("b", "x");
  EXPECT_TRUE(store.check({"a", "b"}));
  EXPECT_TRUE(store.check({}));
}

TYPED_TEST(StoreTest, ConcurrentAddsFromClonesSumExactly) {
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

TYPED_TEST(StoreTest, AddTreatsAbsentAsZeroAndKeepsDecimalText) {
  auto& store = *this->store_;
  EXPECT_EQ(store.add("n", 5), 5);
  EXPECT_EQ(store.add("n", -12), -7);
  EXPECT_EQ(store.get("n"), "-7");
  EXPECT_EQ(store.add("n", 0), -7);
  store.set("preset", "40");
  EXPECT_EQ(store.add("preset", 2), 42);
}

TYPED_TEST(StoreTest, AddOnANonIntegerThrowsInvalidArgument) {
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

TYPED_TEST(StoreTest, CompareSet) {
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

TYPED_TEST(StoreTest, CompareSetElectsExactlyOneWinner) {
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

TYPED_TEST(StoreTest, RemoveReportsWhetherTheKeyExisted) {
  auto& store = *this->store_;
  store.set("doomed", "v");
  EXPECT_TRUE(store.remove("doomed"));
  EXPECT_FALSE(store.check({"doomed"}));
  EXPECT_FALSE(store.remove("doomed"));
  EXPECT_THROW(store.get("doomed", milliseconds(20)), TimeoutError);
}

TYPED_TEST(StoreTest, ValuesAndKeysAreArbitraryBytes) {
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

TYPED_TEST(StoreTest, EmptyValueIsAValue) {
  auto& store = *this->store_;
  store.set("empty", "");
  EXPECT_TRUE(store.check({"empty"}));
  EXPECT_EQ(store.get("empty"), "");
}

TYPED_TEST(StoreTest, EmptyKeyIsRejected) {
  auto& store = *this->store_;
  EXPECT_THROW(store.set("", "v"), InvalidArgument);
  EXPECT_THROW(store.get("", milliseconds(10)), InvalidArgument);
  EXPECT_THROW(store.wait({"a", ""}, milliseconds(10)), InvalidArgument);
  EXPECT_THROW(store.check({""}), InvalidArgument);
  EXPECT_THROW(store.add("", 1), InvalidArgument);
  EXPECT_THROW(store.compare_set("", "", "v"), InvalidArgument);
  EXPECT_THROW(store.remove(""), InvalidArgument);
}

TYPED_TEST(StoreTest, CloneSeesTheSameData) {
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

TYPED_TEST(StoreTest, PrefixStoresAreIsolated) {
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

TYPED_TEST(StoreTest, BarrierHoldsEveryoneUntilAllArriveAndIsReusable) {
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

TYPED_TEST(StoreTest, BarrierTimeoutSaysHowManyArrived) {
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

void write_file(const fs::path& path, const std::string& content) {
  std::ofstream(path, std::ios::binary) << content;
}

TEST(FileStoreTest, KeysLiveInRootSlashRunId) {
  TemporaryFolder root;
  FileStore store(root.path(), "job-17", kStoreTimeout);
  EXPECT_EQ(store.folder(), root.path() / "job-17");
  store.set("a.b/c", "v");
  EXPECT_TRUE(fs::exists(root.path() / "job-17" / "a%2Eb%2Fc"));
  EXPECT_TRUE(contains(store.describe(), (root.path() / "job-17").string()));
}

TEST(FileStoreTest, AnEarlierRunNeverConfusesANewOne) {
  TemporaryFolder root;
  {
    FileStore earlier(root.path(), "run-1", kStoreTimeout);
    earlier.set("address", "old");
    EXPECT_EQ(earlier.add("counter", 41), 41);
  }
  // Debris of a crashed writer in the new run's folder: temporary files and a lock file.
  fs::create_directories(root.path() / "run-2");
  write_file(root.path() / "run-2" / ".tmp-1-2-3", "half a val");
  write_file(root.path() / "run-2" / ".tmp-999-0-0", "");
  write_file(root.path() / "run-2" / ".lock", "garbage");

  FileStore fresh(root.path(), "run-2", kStoreTimeout);
  EXPECT_FALSE(fresh.check({"address"}));
  EXPECT_THROW(fresh.get("address", milliseconds(30)), TimeoutError);
  EXPECT_EQ(fresh.add("counter", 1), 1);
  fresh.set("address", "new");
  EXPECT_EQ(fresh.get("address"), "new");
  EXPECT_EQ(FileStore(root.path(), "run-1", kStoreTimeout).get("address"), "old");
}

TEST(FileStoreTest, TemporaryNamesLeftByAnEarlierProcessAreSkipped) {
  TemporaryFolder root;
  FileStore store(root.path(), "run", kStoreTimeout);
  // The names a new thread of this process would use first, as if a crashed process with the
  // same pid had left them behind.
  std::thread writer = spawn([&] {
    const auto thread = std::hash<std::thread::id>{}(std::this_thread::get_id());
    for (int n = 0; n < 5; ++n) {
      write_file(store.folder() / (".tmp-" + std::to_string(::getpid()) + "-" +
                                   std::to_string(thread) + "-" + std::to_string(n)),
                 "stale");
    }
    store.set("key", "fresh");
    EXPECT_EQ(store.add("counter", 2), 2);
  });
  writer.join();
  EXPECT_EQ(store.get("key"), "fresh");
  EXPECT_EQ(store.get("counter"), "2");
}

TEST(FileStoreTest, InvalidRunIdIsRejected) {
  TemporaryFolder root;
  const std::vector<std::string> bad_ids = {"", "a/b", "..", ".", "/abs", std::string("a\0b", 3)};
  for (const auto& run_id : bad_ids) {
    EXPECT_THROW(FileStore(root.path(), run_id), InvalidArgument) << "run id " << run_id;
  }
  EXPECT_FALSE(fs::exists(root.path() / "a"));
}

TEST(FileStoreTest, FolderThatCannotBeCreatedNamesThePath) {
  TemporaryFolder root;
  write_file(root.path() / "file", "not a folder");
  const auto message =
      message_of<InvalidArgument>([&] { FileStore(root.path() / "file", "run", kStoreTimeout); });
  EXPECT_TRUE(contains(message, (root.path() / "file").string()));
}

TEST(FileStoreTest, KeyWhoseFileNameIsTooLongIsRejected) {
  TemporaryFolder root;
  FileStore store(root.path(), "run", kStoreTimeout);
  store.set(std::string(200, 'a'), "fits");
  store.set(std::string(66, '.'), "fits too");  // 198 characters once encoded
  const auto message = message_of<InvalidArgument>([&] { store.set(std::string(201, 'a'), "v"); });
  EXPECT_TRUE(contains(message, "201 bytes"));
  EXPECT_THROW(store.set(std::string(67, '.'), "v"), InvalidArgument);  // 201 once encoded
  EXPECT_EQ(store.get(std::string(66, '.')), "fits too");
}

}  // namespace
}  // namespace cohort
