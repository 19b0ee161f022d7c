// The TCP store server under hostile traffic, on 127.0.0.1 only, bounded in count and time:
// random bytes, huge length prefixes, truncated frames, slow writers, wrong tokens, and idle
// connections past the connection table. Real clients keep being served within their deadlines,
// and the server's memory stays under the bound docs/reliability.md states
// (Note [TCP store admission] in src/launch/tcp_server_loop.cpp).

#include <cohort/core/error.hpp>
#include <cohort/launch/tcp_store.hpp>

#include "support/tcp_store_support.hpp"
#include "support/test_helpers.hpp"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace cohort {
namespace {

using cohort_test::client_of;
using cohort_test::contains;
using cohort_test::elapsed_since;
using cohort_test::field;
using cohort_test::frame;
using cohort_test::kHello;
using cohort_test::kOkReply;
using cohort_test::local_server;
using cohort_test::RawClient;
using cohort_test::u32le;
using cohort_test::u64le;
using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

/// A real client connects, writes, reads and adds within its deadlines.
void expect_served(int port, const std::string& tag, const std::string& token = {}) {
  const auto start = Clock::now();
  TcpStore store(client_of(port, token));
  store.set("served/" + tag, tag);
  EXPECT_EQ(store.get("served/" + tag), tag);
  EXPECT_GE(store.add("served/count", 1), 1);
  EXPECT_LT(elapsed_since(start), milliseconds(5000)) << tag;
}

TEST(StoreHostileTest, HugeLengthPrefixBeforeHelloClosesAtOnce) {
  TcpStoreServer server(local_server());
  for (const std::uint32_t length : {4097u, 1u << 20, 64u << 20, 0xFFFFFFFFu}) {
    RawClient raw(server.port());
    ASSERT_TRUE(raw.connected());
    raw.try_send(u32le(length) + std::string(1000, 'x'));
    EXPECT_TRUE(raw.closed_by_server(milliseconds(2000))) << length;
  }
  // A HELLO whose token does not fit the pre-authentication limit.
  RawClient long_token(server.port());
  long_token.try_send(frame("\x01" + u64le(1) + field(std::string(5000, 't'))));
  EXPECT_TRUE(long_token.closed_by_server(milliseconds(2000)));
  expect_served(server.port(), "after-huge-prefixes");
}

TEST(StoreHostileTest, NoHelloInTimeIsClosedSlowWritersToo) {
  auto options = local_server();
  options.hello_timeout = milliseconds(300);
  TcpStoreServer server(options);
  RawClient idle(server.port());
  RawClient slow(server.port());
  const auto start = Clock::now();
  // A slow writer: one byte of HELLO every 100 ms would need 1.7 s; the deadline counts from the
  // accept, so it is closed at 300 ms like the idle one.
  bool slow_closed = false;
  for (const char byte : kHello) {
    if (!slow.try_send(std::string(1, byte))) {
      slow_closed = true;
      break;
    }
    if (slow.closed_by_server(milliseconds(100))) {
      slow_closed = true;
      break;
    }
  }
  EXPECT_TRUE(slow_closed);
  EXPECT_TRUE(idle.closed_by_server(milliseconds(2000)));
  EXPECT_LT(elapsed_since(start), milliseconds(1600));
  expect_served(server.port(), "after-deadline");
}

TEST(StoreHostileTest, StalledRequestIsClosedButAnIdleClientIsKept) {
  auto options = local_server();
  options.stall_timeout = milliseconds(300);
  TcpStoreServer server(options);
  RawClient stalled(server.port());
  stalled.send(kHello);
  ASSERT_EQ(stalled.receive(kOkReply.size(), milliseconds(2000)), kOkReply);
  stalled.send(u32le(100) + "half a request");
  TcpStore idle(client_of(server.port()));
  EXPECT_TRUE(stalled.closed_by_server(milliseconds(3000)));
  std::this_thread::sleep_for(milliseconds(600));  // twice the stall timeout, with nothing sent
  idle.set("still", "here");
  EXPECT_EQ(idle.get("still"), "here");
}

TEST(StoreHostileTest, IdleUnauthenticatedConnectionsPastTheTableDoNotLockClientsOut) {
  auto options = local_server();
  options.max_connections = 48;
  options.max_unauthenticated = 16;
  TcpStoreServer server(options);
  TcpStore early(client_of(server.port()));
  std::vector<std::unique_ptr<RawClient>> idle;
  for (int i = 0; i < 200; ++i) {
    idle.push_back(std::make_unique<RawClient>(server.port()));
    if (i % 25 == 24) expect_served(server.port(), "during-" + std::to_string(i));
  }
  expect_served(server.port(), "after-flood");
  early.set("early", "alive");
  EXPECT_EQ(early.get("early"), "alive");
  // Most idle connections were evicted: at most max_unauthenticated remain open.
  std::size_t open = 0;
  for (auto& raw : idle) {
    if (!raw->closed_by_server(milliseconds(20))) ++open;
  }
  EXPECT_LE(open, options.max_unauthenticated);
}

TEST(StoreHostileTest, DefaultLimitsSurviveMoreIdleConnectionsThanTheyAdmit) {
  TcpStoreServer server(local_server());
  std::vector<std::unique_ptr<RawClient>> idle;
  for (int i = 0; i < 300; ++i) idle.push_back(std::make_unique<RawClient>(server.port()));
  expect_served(server.port(), "past-256-idle");
}

TEST(StoreHostileTest, AFullTableOfAuthenticatedClientsRefusesTheNextClearly) {
  auto options = local_server();
  options.max_connections = 3;
  TcpStoreServer server(options);
  std::vector<std::unique_ptr<TcpStore>> clients;
  for (int i = 0; i < 3; ++i)
    clients.push_back(std::make_unique<TcpStore>(client_of(server.port())));
  auto late = client_of(server.port());
  late.connect_timeout = milliseconds(800);
  const auto start = Clock::now();
  const auto message = cohort_test::message_of<TimeoutError>([&] { TcpStore refused(late); });
  EXPECT_TRUE(contains(message, "could not connect to the store server"));
  EXPECT_LT(elapsed_since(start), milliseconds(5000));
  for (auto& client : clients) client->set("full", "yes");
  clients.pop_back();
  expect_served(server.port(), "after-one-left");
}

TEST(StoreHostileTest, RandomBytesAndTruncatedFramesHarmNobody) {
  auto options = local_server();
  options.hello_timeout = milliseconds(500);
  TcpStoreServer server(options);
  TcpStore bystander(client_of(server.port()));
  bystander.set("bystander", "1");
  std::mt19937 random(20261203);
  constexpr int kConnections = 200;
  for (int i = 0; i < kConnections; ++i) {
    RawClient raw(server.port());
    ASSERT_TRUE(raw.connected());
    std::string bytes(random() % 600, '\0');
    for (auto& byte : bytes) byte = static_cast<char>(random());
    if (i % 3 == 1) bytes = kHello + bytes;  // garbage after HELLO
    if (i % 3 == 2) bytes = kHello + frame(bytes).substr(0, bytes.size() / 2);  // truncated frame
    raw.try_send(bytes);
    if (i % 20 == 0) {
      EXPECT_EQ(bystander.get("bystander"), "1") << i;
    }
  }
  EXPECT_EQ(bystander.get("bystander"), "1");
  EXPECT_FALSE(bystander.check({"sneaky"}));
  expect_served(server.port(), "after-random-bytes");
}

TEST(StoreHostileTest, WrongTokensAreRefusedAndTheRightOneServed) {
  TcpStoreServer server(local_server("right-token"));
  for (int i = 0; i < 50; ++i) {
    auto options = client_of(server.port(), "wrong-" + std::to_string(i));
    const auto message = cohort_test::message_of<Error>([&] { TcpStore wrong(options); });
    EXPECT_TRUE(contains(message, "refused the token")) << message;
  }
  RawClient no_token(server.port());
  no_token.send(kHello);
  EXPECT_TRUE(no_token.closed_by_server(milliseconds(2000)));
  expect_served(server.port(), "right-token", "right-token");
}

// ---- Memory of a real server process (cohort-store) under attack ----------------------------

/// cohort-store on 127.0.0.1 and a free port; killed and reaped on every exit path.
class StoreProcess {
 public:
  StoreProcess() {
    const std::string dir = cohort_test::test_binary_dir();
    if (dir.empty()) return;
    const std::string program = dir + "/tools/cohort-store/cohort-store";
    port_file_ = ::testing::TempDir() + "cohort_store_port_" + std::to_string(::getpid());
    std::remove(port_file_.c_str());
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, port_file_.c_str(), O_WRONLY | O_CREAT, 0600);
    std::vector<std::string> args = {program, "--host", "127.0.0.1", "--port", "0"};
    std::vector<char*> argv;
    for (auto& arg : args) argv.push_back(arg.data());
    argv.push_back(nullptr);
    if (::posix_spawn(&pid_, program.c_str(), &actions, nullptr, argv.data(), environ) != 0) {
      pid_ = -1;
    }
    posix_spawn_file_actions_destroy(&actions);
  }
  ~StoreProcess() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    std::remove(port_file_.c_str());
  }
  StoreProcess(const StoreProcess&) = delete;
  StoreProcess& operator=(const StoreProcess&) = delete;

  /// The port from "cohort-store listening on 127.0.0.1:PORT", or 0 when it did not start.
  int wait_for_port() const {
    for (int i = 0; pid_ > 0 && i < 200; ++i) {
      std::ifstream in(port_file_);
      std::string line;
      if (std::getline(in, line) && line.find(':') != std::string::npos) {
        return std::atoi(line.substr(line.rfind(':') + 1).c_str());
      }
      std::this_thread::sleep_for(milliseconds(25));
    }
    return 0;
  }

  /// A field of /proc/<pid>/status in KiB (VmRSS, VmHWM), or -1.
  long status_kib(const std::string& name) const {
    std::ifstream in("/proc/" + std::to_string(pid_) + "/status");
    std::string line;
    while (std::getline(in, line)) {
      if (line.rfind(name + ":", 0) == 0) return std::atol(line.c_str() + name.size() + 1);
    }
    return -1;
  }

 private:
  pid_t pid_ = -1;
  std::string port_file_;
};

// The bound docs/reliability.md states: unauthenticated traffic grows the server's peak resident
// memory by at most 16 MiB over its idle level (about 4 KiB per connection it holds, with at most
// 256 of them, plus bookkeeping). Before the limit, the 64 oversized frames below alone made the
// server hold 64 MiB.
constexpr long kMemoryBoundKib = 16 * 1024;

TEST(StoreHostileTest, ServerMemoryStaysUnderTheBound) {
  StoreProcess process;
  const int port = process.wait_for_port();
  if (port == 0) GTEST_SKIP() << "cohort-store did not start (set COHORT_TEST_BINARY_DIR)";
  expect_served(port, "baseline");
  const long baseline = process.status_kib("VmRSS");
  ASSERT_GT(baseline, 0);

  const std::string junk(1 << 20, 'j');
  std::vector<std::unique_ptr<RawClient>> attackers;
  for (int i = 0; i < 64; ++i) {  // oversized frames before HELLO, streamed 1 MiB at a time
    attackers.push_back(std::make_unique<RawClient>(port));
    attackers.back()->try_send(u32le(64u << 20) + junk);
  }
  for (int i = 0; i < 64; ++i) {  // a HELLO frame that never ends
    attackers.push_back(std::make_unique<RawClient>(port));
    attackers.back()->try_send(u32le(4096) + "\x01" + std::string(4000, 'h'));
  }
  for (int i = 0; i < 300; ++i) attackers.push_back(std::make_unique<RawClient>(port));  // idle
  expect_served(port, "under-attack");
  const long peak = process.status_kib("VmHWM");
  EXPECT_LE(peak - baseline, kMemoryBoundKib)
      << "peak " << peak << " KiB, idle " << baseline << " KiB";
  std::cout << "cohort-store resident memory: " << baseline << " KiB idle, peak " << peak
            << " KiB under attack (bound: idle + " << kMemoryBoundKib << " KiB)\n";
}

}  // namespace
}  // namespace cohort
