// What only the TCP store promises: many clients at once, deadlines, a server that survives bad
// bytes, tokens, a server owned by a client, and clients that fail instead of hanging.

#include <cohort/core/error.hpp>
#include <cohort/launch/rendezvous.hpp>
#include <cohort/launch/tcp_store.hpp>

#include "support/tcp_store_support.hpp"
#include "support/test_helpers.hpp"

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace cohort {
namespace {

using Clock = std::chrono::steady_clock;
using cohort_test::client_of;
using cohort_test::contains;
using cohort_test::elapsed_since;
using cohort_test::field;
using cohort_test::frame;
using cohort_test::kHello;
using cohort_test::kOkReply;
using cohort_test::local_server;
using cohort_test::message_of;
using cohort_test::RawClient;
using cohort_test::spawn;
using cohort_test::u32le;
using cohort_test::u64le;
using std::chrono::milliseconds;

TEST(TcpStoreTest, SixteenClientsAtOnce) {
  constexpr int kClients = 16;
  constexpr int kRounds = 40;
  TcpStoreServer server(local_server());
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int client = 0; client < kClients; ++client) {
    threads.emplace_back([&, client] {
      try {
        TcpStore store(client_of(server.port()));
        const std::string mine = "client" + std::to_string(client);
        for (int round = 0; round < kRounds; ++round) {
          store.set(mine + "/" + std::to_string(round), std::to_string(round * client));
          if (store.get(mine + "/" + std::to_string(round)) != std::to_string(round * client)) {
            failures.fetch_add(1);
          }
          store.add("total", 1);
          store.add(mine + "/sum", client);
        }
        store.set(mine + "/done", "");
        std::vector<std::string> everyone;
        for (int other = 0; other < kClients; ++other) {
          everyone.push_back("client" + std::to_string(other) + "/done");
        }
        store.wait(everyone, std::chrono::seconds(10));
      } catch (const std::exception& error) {
        ADD_FAILURE() << "client " << client << ": " << error.what();
        failures.fetch_add(1);
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(failures.load(), 0);
  TcpStore store(client_of(server.port()));
  EXPECT_EQ(store.get("total"), std::to_string(kClients * kRounds));
  for (int client = 0; client < kClients; ++client) {
    EXPECT_EQ(store.add("client" + std::to_string(client) + "/sum", 0), kRounds * client);
  }
}

TEST(TcpStoreTest, BlockingCallsKeepTheirDeadline) {
  TcpStoreServer server(local_server());
  TcpStore store(client_of(server.port()));
  for (const auto timeout : {milliseconds(0), milliseconds(200)}) {
    const auto start = Clock::now();
    EXPECT_THROW(store.get("missing", timeout), TimeoutError);
    EXPECT_GE(elapsed_since(start), timeout);
    EXPECT_LT(elapsed_since(start), timeout + milliseconds(1000));
  }
  const auto start = Clock::now();
  EXPECT_THROW(store.wait({"x", "y"}, milliseconds(200)), TimeoutError);
  EXPECT_LT(elapsed_since(start), milliseconds(1200));
  // The connection is still good after a timeout.
  store.set("x", "1");
  EXPECT_EQ(store.get("x"), "1");
  EXPECT_EQ(store.describe(), "TcpStore(127.0.0.1:" + std::to_string(server.port()) + ")");
  EXPECT_EQ(store.port(), server.port());
}

/// A port on 127.0.0.1 that refuses connections: a bound socket that never listens, so nobody
/// else takes the port while it is open.
class RefusingPort {
 public:
  RefusingPort() : fd_(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = 0;
    ::inet_pton(AF_INET, "127.0.0.1", &address.sin_addr);
    bound_ = ::bind(fd_, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) == 0;
    socklen_t length = sizeof(address);
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&address), &length);
    port_ = ntohs(address.sin_port);
  }
  ~RefusingPort() { ::close(fd_); }
  RefusingPort(const RefusingPort&) = delete;
  RefusingPort& operator=(const RefusingPort&) = delete;
  bool bound() const { return bound_; }
  int port() const { return port_; }

 private:
  int fd_;
  bool bound_ = false;
  int port_ = 0;
};

TEST(TcpStoreTest, ConnectTimeoutNamesHostAndPort) {
  RefusingPort refusing;
  ASSERT_TRUE(refusing.bound());
  const int port = refusing.port();
  auto options = client_of(port);
  options.connect_timeout = milliseconds(300);
  const auto start = Clock::now();
  const auto message = message_of<TimeoutError>([&] { TcpStore store(options); });
  const auto waited = elapsed_since(start);
  EXPECT_GE(waited, milliseconds(300));
  EXPECT_LT(waited, milliseconds(1300));
  EXPECT_TRUE(contains(message, "127.0.0.1:" + std::to_string(port)));
  EXPECT_TRUE(contains(message, "300 ms"));
  EXPECT_TRUE(contains(message, "refused"));  // the last system error
  EXPECT_TRUE(contains(message, "MASTER_ADDR"));
}

TEST(TcpStoreTest, AServerNotAnsweringYetGetsAProgressLine) {
  RefusingPort refusing;
  ASSERT_TRUE(refusing.bound());
  auto options = client_of(refusing.port());
  options.connect_timeout = milliseconds(5600);  // the first progress line comes after 5 s
  ::testing::internal::CaptureStderr();
  message_of<TimeoutError>([&] { TcpStore store(options); });
  const std::string log = ::testing::internal::GetCapturedStderr();
  std::string expected = "still waiting for the store server at 127.0.0.1:";
  expected += std::to_string(refusing.port());
  EXPECT_TRUE(contains(log, expected));
  EXPECT_TRUE(contains(log, "giving up in"));
  EXPECT_TRUE(contains(log, "refused"));
}

TEST(TcpStoreTest, AHostNameThatDoesNotResolveFailsAtOnce) {
  auto options = client_of(29500);
  options.host = "no-such-host.invalid";  // RFC 2606: never resolves
  options.connect_timeout = std::chrono::seconds(30);
  const auto start = Clock::now();
  const auto message = message_of<Error>([&] { TcpStore store(options); });
  EXPECT_LT(elapsed_since(start), milliseconds(10000));  // a resolver's own timeout at most
  EXPECT_TRUE(contains(message, "cannot resolve no-such-host.invalid:29500")) << message;
  EXPECT_TRUE(contains(message, "MASTER_ADDR")) << message;
}

TEST(TcpStoreTest, HelloIsAnsweredInTheDocumentedFormat) {
  TcpStoreServer server(local_server());
  RawClient raw(server.port());
  ASSERT_TRUE(raw.connected());
  raw.send(kHello);
  EXPECT_EQ(raw.receive(kOkReply.size(), milliseconds(2000)), kOkReply);
  raw.send(frame("\x02" + field("k") + field("v")));  // SET k v
  EXPECT_EQ(raw.receive(kOkReply.size(), milliseconds(2000)), kOkReply);
  TcpStore store(client_of(server.port()));
  EXPECT_EQ(store.get("k"), "v");
}

TEST(TcpStoreTest, MalformedRequestsCloseOnlyTheirConnection) {
  TcpStoreServer server(local_server());
  TcpStore bystander(client_of(server.port()));
  bystander.set("before", "1");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"not the protocol at all", "GET / HTTP/1.1\r\nHost: x\r\n\r\n"},
      {"a request before HELLO", frame("\x02" + field("sneaky") + field("v"))},
      {"a second HELLO", kHello + kHello},
      {"an unknown opcode", kHello + frame("\xee")},
      {"an empty payload", kHello + frame("")},
      {"a field running past the end", kHello + frame("\x02" + u32le(1000) + "abc")},
      {"trailing bytes", kHello + frame("\x05" + u32le(0) + "X")},
      {"a key list longer than the message", kHello + frame("\x05" + u32le(0x10000000))},
      {"a length prefix over the limit", kHello + u32le(0xFFFFFFFF)},
  };
  for (const auto& [what, bytes] : cases) {
    RawClient raw(server.port());
    ASSERT_TRUE(raw.connected());
    raw.send(bytes);
    EXPECT_TRUE(raw.closed_by_server(milliseconds(2000))) << what;
    EXPECT_EQ(bystander.get("before"), "1") << what;
  }
  EXPECT_FALSE(bystander.check({"sneaky"}));
  TcpStore newcomer(client_of(server.port()));
  newcomer.set("after", "2");
  EXPECT_EQ(bystander.get("after"), "2");
}

TEST(TcpStoreTest, TruncatedMessagesHarmNobody) {
  TcpStoreServer server(local_server());
  TcpStore store(client_of(server.port()));
  {
    // Half a message, then nothing: the server waits for the rest without blocking anyone.
    RawClient stalled(server.port());
    stalled.send(kHello + u32le(100) + "0123456789");
    store.set("while-stalled", "1");
    EXPECT_EQ(store.get("while-stalled"), "1");
    // Half a message, then the connection closes.
    RawClient quitter(server.port());
    quitter.send(kHello + u32le(100) + "0123456789");
  }
  // A GET left waiting by a client that went away.
  {
    RawClient waiter(server.port());
    waiter.send(kHello + frame("\x03" + field("later") + u64le(10000)));
  }
  store.set("later", "now");
  EXPECT_EQ(store.get("later"), "now");
  TcpStore newcomer(client_of(server.port()));
  EXPECT_EQ(newcomer.add("n", 1), 1);
}

TEST(TcpStoreTest, RequestOverTheServersLimitClosesThatClient) {
  auto options = local_server();
  options.max_message_bytes = 1024;
  TcpStoreServer server(options);
  TcpStore greedy(client_of(server.port()));
  const auto message = message_of<Error>([&] { greedy.set("big", std::string(100000, 'x')); });
  EXPECT_TRUE(contains(message, "by the server"));
  EXPECT_TRUE(contains(message, greedy.describe()));
  // The connection may hold half a reply now: it refuses further use instead of guessing.
  EXPECT_TRUE(contains(message_of<Error>([&] { greedy.check({"big"}); }), "unusable"));
  TcpStore modest(client_of(server.port()));
  modest.set("small", std::string(900, 'y'));
  EXPECT_EQ(modest.get("small"), std::string(900, 'y'));
  EXPECT_FALSE(modest.check({"big"}));
}

TEST(TcpStoreTest, TokenIsRequiredWhenTheServerHasOne) {
  TcpStoreServer server(local_server("s3cret"));
  const auto start = Clock::now();
  const auto wrong = message_of<Error>([&] { TcpStore store(client_of(server.port(), "guess")); });
  EXPECT_TRUE(contains(wrong, "refused the token"));
  EXPECT_TRUE(contains(wrong, "COHORT_STORE_TOKEN"));
  const auto none = message_of<Error>([&] { TcpStore store(client_of(server.port(), "")); });
  EXPECT_TRUE(contains(none, "gave none"));
  EXPECT_TRUE(contains(none, "COHORT_STORE_TOKEN"));
  // A refusal is an answer, not a reason to retry until the connect timeout.
  EXPECT_LT(elapsed_since(start), milliseconds(1000));
  try {
    TcpStore store(client_of(server.port(), "guess"));
  } catch (const TimeoutError&) {
    ADD_FAILURE() << "a refused token must not look like a timeout";
  } catch (const Error&) {
  }

  TcpStore right(client_of(server.port(), "s3cret"));
  right.set("k", "v");
  EXPECT_EQ(right.get("k"), "v");
}

TEST(TcpStoreTest, ConnectStoreTakesTheTokenFromTheEnvironment) {
  TcpStoreServer server(local_server("from-env"));
  LaunchInfo info;
  info.rank = 1;
  info.world_size = 2;
  info.master_port = server.port();
  info.store_is_external = true;
  auto connect = [&](std::string token) {
    const EnvLookup lookup = [token](std::string_view name) -> std::optional<std::string> {
      if (name == "COHORT_STORE_TOKEN") return token;
      return std::nullopt;
    };
    connect_store(info, lookup, std::chrono::seconds(5))->set("k", "v");
  };
  EXPECT_NO_THROW(connect("from-env"));
  EXPECT_THROW(connect("other"), Error);
}

TEST(TcpStoreTest, StartServerOnPortZeroAndClone) {
  TcpStoreOptions options = client_of(0);
  options.start_server = true;
  options.server_host = "127.0.0.1";
  auto owner = std::make_unique<TcpStore>(options);
  const int port = owner->port();
  EXPECT_GT(port, 0);
  owner->set("k", "v");
  auto clone = owner->clone();
  EXPECT_EQ(clone->get("k"), "v");
  TcpStore outsider(client_of(port));
  EXPECT_EQ(outsider.add("n", 2), 2);
  // The server lives as long as any clone of the store that started it.
  owner.reset();
  EXPECT_EQ(clone->add("n", 3), 5);
  clone.reset();
  EXPECT_THROW(outsider.get("k", milliseconds(100)), Error);
}

// Note [The store outlives its host's last call]: the host of a run's store leaves last.
TEST(TcpStoreTest, TheOwnerWaitsForTheClientsOfOtherProcessesOnly) {
  TcpStoreOptions options = client_of(0);
  options.start_server = true;
  options.server_host = "127.0.0.1";
  TcpStore owner(options);
  auto own_clone = owner.clone();  // the owner's own clients do not count
  EXPECT_TRUE(owner.wait_for_clients(milliseconds(0)));
  owner.set("barrier/last", "0123");
  auto other = std::make_unique<TcpStore>(client_of(owner.port()));
  ASSERT_EQ(other->get("barrier/last"), "0123");

  std::atomic<bool> done{false};
  std::atomic<bool> result{false};
  std::thread host([&] {
    result = owner.wait_for_clients(std::chrono::seconds(30));
    done = true;
  });
  // The other client keeps using the store after its host finished, and it still works.
  for (int round = 0; round < 10; ++round) {
    std::this_thread::sleep_for(milliseconds(30));
    EXPECT_FALSE(done.load()) << "the owner stopped waiting with another client connected";
    EXPECT_EQ(other->get("barrier/last"), "0123");
  }
  const auto disconnected = Clock::now();
  other.reset();
  host.join();
  EXPECT_TRUE(result.load());
  EXPECT_LT(elapsed_since(disconnected), milliseconds(2000))
      << "the owner kept waiting after the last other client left";
}

TEST(TcpStoreTest, TheOwnerWaitsForClientsNoLongerThanItsLimit) {
  TcpStoreOptions options = client_of(0);
  options.start_server = true;
  options.server_host = "127.0.0.1";
  TcpStore owner(options);
  TcpStore stays(client_of(owner.port()));
  const auto start = Clock::now();
  EXPECT_FALSE(owner.wait_for_clients(milliseconds(300)));
  const auto waited = elapsed_since(start);
  EXPECT_GE(waited, milliseconds(250));
  EXPECT_LT(waited, milliseconds(5000));
  // A store that serves nobody has nobody to wait for.
  EXPECT_TRUE(stays.wait_for_clients(std::chrono::seconds(30)));
}

TEST(TcpStoreTest, StopWhileAClientIsBlockedFailsItPromptly) {
  TcpStoreServer server(local_server());
  TcpStore store(client_of(server.port()));
  std::string message;
  bool timed_out = false;
  Milliseconds waited{};
  std::thread blocked([&] {
    const auto start = Clock::now();
    try {
      store.get("never", std::chrono::seconds(10));
    } catch (const TimeoutError& error) {
      timed_out = true;
      message = error.what();
    } catch (const Error& error) {
      message = error.what();
    }
    waited = elapsed_since(start);
  });
  EXPECT_TRUE(cohort_test::wait_until([&] { return server.held_requests() == 1; },
                                      "the server holding the GET"));
  server.stop();
  blocked.join();
  EXPECT_FALSE(timed_out);
  EXPECT_TRUE(contains(message, "closed by the server"));
  EXPECT_LT(waited, milliseconds(2000));
  server.stop();  // idempotent
  EXPECT_THROW(store.set("k", "v"), Error);
}

TEST(TcpStoreTest, ABlockedGetDoesNotStopOtherConnections) {
  TcpStoreServer server(local_server());
  TcpStore waiting(client_of(server.port()));
  TcpStore busy(client_of(server.port()));
  std::string value;
  std::thread blocked = spawn([&] { value = waiting.get("release", std::chrono::seconds(30)); });
  EXPECT_TRUE(cohort_test::wait_until([&] { return server.held_requests() == 1; },
                                      "the server holding the GET"));
  const auto start = Clock::now();
  for (int i = 0; i < 50; ++i) {
    busy.set("key" + std::to_string(i), "v");
    EXPECT_EQ(busy.add("count", 1), i + 1);
  }
  EXPECT_LT(elapsed_since(start), milliseconds(2000));
  busy.set("release", "go");
  blocked.join();
  EXPECT_EQ(value, "go");
}

TEST(TcpStoreTest, ServerReportsABusyPort) {
  TcpStoreServer first(local_server());
  auto options = local_server();
  options.port = first.port();
  const auto message = message_of<Error>([&] { TcpStoreServer second(options); });
  EXPECT_TRUE(contains(message, "127.0.0.1:" + std::to_string(first.port())));
}

}  // namespace
}  // namespace cohort
