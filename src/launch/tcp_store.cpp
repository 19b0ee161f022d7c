#include <cohort/launch/tcp_store.hpp>

#include <cohort/core/backoff.hpp>
#include <cohort/core/env.hpp>
#include <cohort/core/error.hpp>
#include <cohort/core/logging.hpp>

#include "tcp_protocol.hpp"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

// The client side of the TCP store; the wire format is Note [TCP store protocol]
// (tcp_protocol.cpp), the server is in tcp_store_server.cpp.

namespace cohort {
namespace {

using detail::Clock;
using detail::UniqueFd;
namespace tcp = detail::tcp;

// How much longer than a request's own timeout a client waits for the reply.
constexpr Milliseconds kReplyGrace = std::chrono::seconds(5);
// How often a client still trying to reach the server says so (Note [Connecting to the store]).
constexpr auto kProgressEvery = std::chrono::seconds(5);

std::uint64_t to_wire_ms(Milliseconds timeout) noexcept {
  return timeout.count() <= 0 ? 0 : static_cast<std::uint64_t>(timeout.count());
}

}  // namespace

namespace {

/// The server a `TcpStore` started, shared with its clones: it lives while any of them does.
struct HostedServer {
  explicit HostedServer(TcpStoreServerOptions options) : server(std::move(options)) {}
  TcpStoreServer server;
  /// Connections of this process's own clients (the owner and its clones).
  std::atomic<std::size_t> own_clients{0};
};

}  // namespace

struct TcpStore::Impl {
  ~Impl() {
    socket.reset();  // before the count drops, so the server never sees more own than open
    if (hosted) hosted->own_clients.fetch_sub(1);
  }

  std::shared_ptr<HostedServer> hosted;
  /// What this client connected with: the server's actual address, the resolved token.
  TcpStoreOptions options;
  std::string description;
  std::mutex mutex;
  UniqueFd socket;
  /// Why the connection is unusable (empty while it works): after a failed exchange the stream
  /// may hold half a reply, so no later request could trust what it reads.
  std::string broken;

  void connect();
  std::string exchange(std::string_view request, Clock::time_point deadline, Milliseconds budget,
                       std::string& reply);

  /// Sends `request` and waits for the reply (up to `timeout` + a grace), with the mutex held.
  /// @throws Error (and marks the connection broken) when the exchange fails or the reply is
  ///         malformed.
  tcp::Reply round_trip(const tcp::Request& request, Milliseconds timeout);
  /// `reply` when its status is OK; else throws TimeoutError (naming the missing keys, with
  /// `timeout`), InvalidArgument, or Error (the server's message; a refusal with a token hint).
  tcp::Reply expect_ok(tcp::Reply reply, Milliseconds timeout) const;
  /// round_trip then expect_ok, under the mutex.
  tcp::Reply call(const tcp::Request& request, Milliseconds timeout);
};

std::string TcpStore::Impl::exchange(std::string_view request, Clock::time_point deadline,
                                     Milliseconds budget, std::string& reply) {
  const int fd = socket.get();
  const std::string too_slow =
      "no reply from the server within " + std::to_string(budget.count()) + " ms";
  if (auto error = tcp::send_all(fd, request, deadline, too_slow); !error.empty()) return error;
  const auto receive = [&](char* out, std::size_t size) {
    return tcp::receive_exact(fd, out, size, deadline, too_slow);
  };
  char prefix[tcp::kLengthBytes];
  if (auto error = receive(prefix, sizeof(prefix)); !error.empty()) return error;
  const std::uint32_t length = tcp::decode_length(std::string_view(prefix, sizeof(prefix)));
  if (length > options.max_message_bytes) {
    return "the server's reply of " + std::to_string(length) +
           " bytes exceeds max_message_bytes (" + std::to_string(options.max_message_bytes) + ")";
  }
  reply.resize(length);
  return receive(reply.data(), reply.size());
}

tcp::Reply TcpStore::Impl::round_trip(const tcp::Request& request, Milliseconds timeout) {
  COHORT_CHECK(broken.empty(), Error,
               description + ": the connection is unusable after an earlier error (" + broken +
                   "); create a new TcpStore");
  const Milliseconds budget = detail::saturating_add(timeout, kReplyGrace);
  std::string payload;
  if (auto error =
          exchange(tcp::encode_request(request), detail::deadline_after(budget), budget, payload);
      !error.empty()) {
    broken = error;
    socket.reset();
    COHORT_FAIL(Error, description + ": " + error);
  }
  try {
    return tcp::decode_reply(request.opcode, payload);
  } catch (const tcp::DecodeError& error) {
    broken = std::string("malformed reply: ") + error.what();
    socket.reset();
    COHORT_FAIL(Error, description + ": " + broken);
  }
}

tcp::Reply TcpStore::Impl::expect_ok(tcp::Reply reply, Milliseconds timeout) const {
  switch (reply.status) {
    case tcp::Status::ok:
      return reply;
    case tcp::Status::timeout:
      COHORT_FAIL(TimeoutError, detail::timeout_message(description, reply.keys, timeout));
    case tcp::Status::invalid_argument:
      COHORT_FAIL(InvalidArgument, reply.message + " in " + description);
    case tcp::Status::error:
      COHORT_FAIL(Error, description + ": " + reply.message);
    case tcp::Status::refused:
      break;
  }
  const std::string hint = reply.message.find("token") == std::string::npos
                               ? std::string()
                               : "; set " + std::string(env::kStoreToken) +
                                     " (or TcpStoreOptions::token) to the server's token";
  COHORT_FAIL(Error, description + " refused this client: " + reply.message + hint);
}

tcp::Reply TcpStore::Impl::call(const tcp::Request& request, Milliseconds timeout) {
  std::lock_guard lock(mutex);
  return expect_ok(round_trip(request, timeout), timeout);
}

// Note [Connecting to the store]
// Ranks start before the server does, so a refused or unanswered connection is retried (with a
// growing pause) until connect_timeout, with a progress line every kProgressEvery saying where
// the client looks and how long is left. A host name that does not resolve is not retried: that
// is a typo or a missing DNS entry, and waiting ten minutes would only hide it. The HELLO
// exchange is part of an attempt: a server whose connection table is full may drop a new
// connection before it reads HELLO (Note [TCP store admission]), and the next attempt gets in.
void TcpStore::Impl::connect() {
  const auto address = tcp::format_address(options.host, options.port);
  const auto started = Clock::now();
  const auto deadline = detail::deadline_after(options.connect_timeout);
  auto next_progress = started + kProgressEvery;
  Backoff backoff(std::chrono::milliseconds(10), std::chrono::seconds(1));
  std::string error = "no attempt finished";
  tcp::Request hello;
  hello.opcode = tcp::Opcode::hello;
  hello.version = tcp::kProtocolVersion;
  hello.token = options.token;
  for (;;) {
    bool permanent = false;
    socket = tcp::try_connect(options.host, options.port, deadline, error, &permanent);
    COHORT_CHECK(!permanent, Error,
                 error + "; check the store address (MASTER_ADDR or --master-addr)");
    if (socket.valid()) {
      std::optional<tcp::Reply> reply;
      try {
        reply = round_trip(hello, Milliseconds::zero());
      } catch (const Error&) {
        error = broken;  // the connection failed: try again
        broken.clear();
      }
      if (reply) {
        expect_ok(std::move(*reply), Milliseconds::zero());  // a refusal is final
        return;
      }
    }
    const auto now = Clock::now();
    if (now >= deadline) {
      COHORT_FAIL(TimeoutError, "could not connect to the store server at " + address + " within " +
                                    std::to_string(options.connect_timeout.count()) +
                                    " ms (last error: " + error +
                                    "); check MASTER_ADDR and MASTER_PORT, and that rank 0 (or " +
                                    "cohort-store) is running and reachable");
    }
    if (now >= next_progress) {
      const auto waited = std::chrono::duration_cast<std::chrono::seconds>(now - started);
      const auto left = std::chrono::duration_cast<std::chrono::seconds>(deadline - now);
      COHORT_LOG(warn) << "still waiting for the store server at " << address << " after "
                       << waited.count() << " s (last error: " << error << "); giving up in "
                       << left.count() << " s";
      next_progress = now + kProgressEvery;
    }
    backoff.sleep(std::min(deadline, next_progress));
  }
}

namespace {

/// The address a client in this process uses to reach a server listening on `listen_host`.
std::string local_address_of(const std::string& listen_host) {
  if (listen_host.empty() || listen_host == "0.0.0.0") return "127.0.0.1";
  if (listen_host == "::") return "::1";
  return listen_host;
}

tcp::Request make_request(tcp::Opcode opcode, std::vector<std::string> keys) {
  for (const auto& key : keys) detail::check_key(key);
  tcp::Request request;
  request.opcode = opcode;
  request.keys = std::move(keys);
  return request;
}

}  // namespace

TcpStore::TcpStore(TcpStoreOptions options)
    : Store(options.timeout), impl_(std::make_shared<Impl>()) {
  COHORT_EXPECTS(options.port >= (options.start_server ? 0 : 1) && options.port <= 65535,
                 "TcpStore port " + std::to_string(options.port) + " is out of range");
  COHORT_EXPECTS(options.token.size() <= tcp::kMaxTokenBytes,
                 "the TCP store token (COHORT_STORE_TOKEN or TcpStoreOptions::token) is " +
                     std::to_string(options.token.size()) + " bytes long; at most " +
                     std::to_string(tcp::kMaxTokenBytes) + " are allowed");
  std::shared_ptr<HostedServer> hosted;
  if (options.start_server) {
    TcpStoreServerOptions server_options;
    server_options.host = options.server_host;
    server_options.port = options.port;
    server_options.token = options.token;
    server_options.max_message_bytes = options.max_message_bytes;
    hosted = std::make_shared<HostedServer>(std::move(server_options));
    options.host = local_address_of(options.server_host);
    options.port = hosted->server.port();
    options.start_server = false;
  }
  impl_->options = std::move(options);
  impl_->description =
      "TcpStore(" + tcp::format_address(impl_->options.host, impl_->options.port) + ")";
  impl_->connect();
  if (hosted) {
    hosted->own_clients.fetch_add(1);
    impl_->hosted = std::move(hosted);
  }
}

TcpStore::~TcpStore() = default;

void TcpStore::set(std::string_view key, std::string_view value) {
  auto request = make_request(tcp::Opcode::set, {std::string(key)});
  request.value = value;
  impl_->call(request, timeout());
}

std::string TcpStore::get(std::string_view key, Milliseconds timeout) {
  auto request = make_request(tcp::Opcode::get, {std::string(key)});
  request.timeout_ms = to_wire_ms(timeout);
  return std::move(impl_->call(request, timeout).value);
}

void TcpStore::wait(const std::vector<std::string>& keys, Milliseconds timeout) {
  auto request = make_request(tcp::Opcode::wait, keys);
  request.timeout_ms = to_wire_ms(timeout);
  impl_->call(request, timeout);
}

bool TcpStore::check(const std::vector<std::string>& keys) {
  return impl_->call(make_request(tcp::Opcode::check, keys), timeout()).flag;
}

std::int64_t TcpStore::add(std::string_view key, std::int64_t delta) {
  auto request = make_request(tcp::Opcode::add, {std::string(key)});
  request.delta = delta;
  return impl_->call(request, timeout()).number;
}

std::string TcpStore::compare_set(std::string_view key, std::string_view expected,
                                  std::string_view desired) {
  auto request = make_request(tcp::Opcode::compare_set, {std::string(key)});
  request.expected = expected;
  request.value = desired;
  return std::move(impl_->call(request, timeout()).value);
}

bool TcpStore::remove(std::string_view key) {
  return impl_->call(make_request(tcp::Opcode::remove, {std::string(key)}), timeout()).flag;
}

std::unique_ptr<Store> TcpStore::clone() const {
  // impl_->options already names the running server and has start_server off.
  auto copy = std::make_unique<TcpStore>(impl_->options);
  if (impl_->hosted) {
    impl_->hosted->own_clients.fetch_add(1);
    copy->impl_->hosted = impl_->hosted;
  }
  copy->set_timeout(timeout());
  return copy;
}

std::string TcpStore::describe() const {
  return impl_->description;
}

int TcpStore::port() const noexcept {
  return impl_->options.port;
}

// Note [The store outlives its host's last call]
// Under mpirun or srun the store server lives in rank 0's process. Rank 0 can finish a run's last
// store exchange (a barrier, say) and exit while the other ranks are still reading that
// exchange's values; they would then fail with "connection reset by the server" after a run that
// succeeded. So `World` asks its store, as it ends, to wait until the clients of other processes
// have disconnected, up to the run's deadline. Ranks disconnect when their world ends or their
// process exits, whichever way it exits, so the wait ends when the last of them is done; a hung
// rank holds its host until the deadline, which it would reach anyway. The wait is explicit, not
// in a destructor: the last clone of a store may be released on any thread (a watchdog's, say),
// and a process whose main thread returns does not wait for those.
bool TcpStore::wait_for_clients(Milliseconds limit) const noexcept {
  const auto& hosted = impl_->hosted;
  if (!hosted) return true;
  const auto others = [&] {
    const std::size_t open = hosted->server.open_connections();
    const std::size_t own = hosted->own_clients.load();
    return open > own ? open - own : std::size_t{0};
  };
  const auto start = Clock::now();
  const auto deadline = detail::deadline_after(limit);
  bool said = false;
  std::size_t waiting = 0;
  while ((waiting = others()) > 0) {
    const auto now = Clock::now();
    if (now >= deadline) {
      COHORT_LOG(warn) << impl_->description << ": stopping its server with " << waiting
                       << " client(s) of other processes still connected after "
                       << env::describe_duration(limit);
      return false;
    }
    if (!said && now - start >= std::chrono::seconds(1)) {
      COHORT_LOG(info) << impl_->description << ": waiting up to " << env::describe_duration(limit)
                       << " for " << waiting << " client(s) of other ranks to disconnect";
      said = true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return true;
}

}  // namespace cohort
