// The store suite (store_suite.hpp) over the memory, file and TCP stores, then what only
// FileStore promises. TorchStore's run is test_torch_store.

#include <cohort/core/error.hpp>
#include <cohort/launch/file_store.hpp>
#include <cohort/launch/memory_store.hpp>
#include <cohort/launch/store.hpp>
#include <cohort/launch/tcp_store.hpp>

#include "launch/store_suite.hpp"
#include "support/test_helpers.hpp"

#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
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
using namespace store_suite;

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

using Backends = ::testing::Types<MemoryBackend, FileBackend, TcpBackend>;
INSTANTIATE_TYPED_TEST_SUITE_P(Stores, StoreTest, Backends, BackendName);

/// Upper-cases every value it sets and forwards the rest.
class UpperCaseStore final : public ForwardingStore {
 public:
  using ForwardingStore::ForwardingStore;
  void set(std::string_view key, std::string_view value) override {
    std::string upper(value);
    std::transform(upper.begin(), upper.end(), upper.begin(),
                   [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
    ForwardingStore::set(key, upper);
  }
  std::unique_ptr<Store> clone() const override {
    return std::make_unique<UpperCaseStore>(std::shared_ptr<Store>(base()->clone()));
  }
};

TEST(ForwardingStoreTest, EveryCallItDoesNotChangeReachesTheBase) {
  auto base = std::make_shared<MemoryStore>();
  base->set_timeout(std::chrono::milliseconds(1234));
  UpperCaseStore store(base);
  EXPECT_EQ(store.timeout(), std::chrono::milliseconds(1234));
  EXPECT_EQ(store.describe(), base->describe());

  store.set("k", "value");
  EXPECT_EQ(base->get("k"), "VALUE");
  EXPECT_EQ(store.get("k", std::chrono::milliseconds(10)), "VALUE");
  EXPECT_EQ(store.add("n", 5), 5);
  EXPECT_EQ(base->add("n", 0), 5);
  EXPECT_EQ(store.compare_set("c", "", "x"), "x");
  EXPECT_EQ(base->get("c"), "x");
  EXPECT_TRUE(store.check({"k", "n", "c"}));
  store.wait({"k", "n"}, std::chrono::milliseconds(10));
  EXPECT_TRUE(store.remove("k"));
  EXPECT_FALSE(base->check({"k"}));
  EXPECT_FALSE(store.check({"k"}));
}

TEST(ForwardingStoreTest, ANullBaseIsRefusedNamingTheWrapper) {
  EXPECT_TRUE(cohort_test::contains(cohort_test::message_of<InvalidArgument>(
                                        [] { UpperCaseStore store(nullptr, "UpperCaseStore"); }),
                                    "UpperCaseStore needs a base store"));
  EXPECT_TRUE(cohort_test::contains(
      cohort_test::message_of<InvalidArgument>([] { PrefixStore store("p", nullptr); }),
      "PrefixStore needs a base store"));
}

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
