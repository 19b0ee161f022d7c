#include <cohort/launch/tcp_store.hpp>

#include <cohort/core/error.hpp>
#include <cohort/core/logging.hpp>

#include "tcp_protocol.hpp"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <unordered_map>
#include <utility>

// The server side of the TCP store; the wire format is Note [TCP store protocol]
// (tcp_protocol.cpp), the client is in tcp_store.cpp.

namespace cohort {
namespace {

using detail::Clock;
using detail::UniqueFd;
namespace tcp = detail::tcp;

constexpr std::size_t kMaxConnections = 4096;
constexpr std::size_t kReadChunkBytes = 64 * 1024;
// Bytes read from one connection per poll round, so that one busy client cannot starve others.
constexpr std::size_t kReadBudgetBytes = 4 << 20;
// Replies a client has not read yet; past this, the server reads no more of its requests.
constexpr std::size_t kMaxUnsentBytes = 1 << 20;
// How long the server stops accepting when it runs out of file descriptors.
constexpr auto kAcceptPause = std::chrono::milliseconds(100);

Milliseconds from_wire_ms(std::uint64_t timeout_ms) noexcept {
  constexpr auto kMax = static_cast<std::uint64_t>(Milliseconds::max().count());
  return Milliseconds(static_cast<Milliseconds::rep>(std::min(timeout_ms, kMax)));
}

/// Compares in time independent of where the tokens first differ.
bool same_token(std::string_view a, std::string_view b) noexcept {
  if (a.size() != b.size()) return false;
  unsigned char difference = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    difference |= static_cast<unsigned char>(a[i] ^ b[i]);
  }
  return difference == 0;
}

std::string status_message(tcp::Status status, std::string_view message) {
  tcp::MessageWriter writer;
  writer.u8(static_cast<std::uint8_t>(status)).bytes(message);
  return std::move(writer).finish();
}

/// A GET or WAIT held until its keys are all set or its deadline passes.
struct Pending {
  tcp::Opcode opcode = tcp::Opcode::get;
  std::vector<std::string> keys;
  Clock::time_point deadline;
  /// Keys before this index were seen set; while `watching`, the server waits for this one.
  std::size_t scan_from = 0;
  bool watching = false;
};

struct Connection {
  UniqueFd fd;
  std::string peer;
  std::string input;   ///< received bytes not yet decoded
  std::string output;  ///< replies not yet sent, from `output_sent` on
  std::size_t output_sent = 0;
  bool greeted = false;
  bool closing = false;  ///< close once the output is sent (after REFUSED)
  bool closed = false;   ///< erased at the end of the poll round
  std::optional<Pending> pending;

  std::size_t unsent() const noexcept { return output.size() - output_sent; }
};

/// The server's state and its poll() loop; lives on the server thread only, so it needs no lock.
class ServerLoop {
 public:
  ServerLoop(const TcpStoreServerOptions& options, UniqueFd listener, int wake, std::string name)
      : options_(options),
        listener_(std::move(listener)),
        wake_(wake),
        name_(std::move(name)),
        input_limit_(options.max_message_bytes > SIZE_MAX - kReadChunkBytes
                         ? SIZE_MAX
                         : options.max_message_bytes + tcp::kLengthBytes),
        read_buffer_(kReadChunkBytes) {}

  /// Serves until `wake` becomes readable, then closes every connection and the listener.
  void run() noexcept {
    try {
      serve();
    } catch (const std::exception& error) {
      COHORT_LOG(error) << name_ << " stopped serving: " << error.what();
    }
    connections_.clear();
    listener_.reset();
  }

 private:
  void serve();
  void accept_all();
  void read_from(std::uint64_t id, Connection& connection);
  void flush(Connection& connection);
  void process_input(std::uint64_t id, Connection& connection);
  void handle(std::uint64_t id, Connection& connection, tcp::Request request);
  bool try_answer(std::uint64_t id, Connection& connection);
  void finish_pending(std::uint64_t id, Connection& connection);
  void key_set(const std::string& key);
  void expire(Clock::time_point now);
  void send(Connection& connection, std::string message);
  void close(std::uint64_t id, Connection& connection, std::string_view reason, bool expected);

  bool has(std::string_view key) const { return values_.find(key) != values_.end(); }

  TcpStoreServerOptions options_;
  UniqueFd listener_;
  int wake_;
  std::string name_;
  std::size_t input_limit_;
  std::vector<char> read_buffer_;
  Clock::time_point accept_paused_until_{};
  std::uint64_t next_id_ = 1;
  std::unordered_map<std::uint64_t, Connection> connections_;
  std::map<std::string, std::string, std::less<>> values_;
  /// key -> connections whose pending request waits for it.
  std::map<std::string, std::set<std::uint64_t>, std::less<>> watchers_;
  std::set<std::pair<Clock::time_point, std::uint64_t>> deadlines_;
  /// Connections whose pending request was answered: they may have more requests buffered.
  std::vector<std::uint64_t> resumable_;
};

void ServerLoop::serve() {
  std::vector<pollfd> fds;
  std::vector<std::uint64_t> ids;
  for (;;) {
    fds.clear();
    ids.clear();
    fds.push_back({wake_, POLLIN, 0});
    const bool accepting = Clock::now() >= accept_paused_until_;
    if (accepting) fds.push_back({listener_.get(), POLLIN, 0});
    for (auto& [id, connection] : connections_) {
      short events = POLLRDHUP;
      if (connection.input.size() < input_limit_) events |= POLLIN;
      if (connection.unsent() > 0) events |= POLLOUT;
      fds.push_back({connection.fd.get(), events, 0});
      ids.push_back(id);
    }
    auto wake_at = deadlines_.empty() ? Clock::time_point::max() : deadlines_.begin()->first;
    if (!accepting) wake_at = std::min(wake_at, accept_paused_until_);

    if (::poll(fds.data(), static_cast<nfds_t>(fds.size()), tcp::poll_timeout_ms(wake_at)) < 0) {
      if (errno == EINTR) continue;
      COHORT_FAIL(Error, "poll() failed: " + detail::system_error_text(errno));
    }
    if (fds[0].revents != 0) return;  // stop() was called
    const std::size_t first = accepting ? 2 : 1;
    if (accepting && fds[1].revents != 0) accept_all();
    for (std::size_t i = first; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      const std::uint64_t id = ids[i - first];
      auto& connection = connections_.at(id);
      if ((fds[i].revents & POLLOUT) != 0) flush(connection);
      if ((fds[i].revents & (POLLIN | POLLRDHUP | POLLHUP | POLLERR)) != 0) {
        read_from(id, connection);
      }
      process_input(id, connection);
    }
    expire(Clock::now());
    while (!resumable_.empty()) {
      const std::uint64_t id = resumable_.back();
      resumable_.pop_back();
      if (const auto it = connections_.find(id); it != connections_.end()) {
        process_input(id, it->second);
      }
    }
    std::erase_if(connections_, [](const auto& entry) { return entry.second.closed; });
  }
}

void ServerLoop::accept_all() {
  for (;;) {
    UniqueFd fd(::accept4(listener_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
    if (!fd.valid()) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      // Out of descriptors or memory: pause rather than spin on a listener that stays readable.
      COHORT_LOG(warn) << name_ << ": accept() failed (" << detail::system_error_text(errno)
                       << "); pausing new connections for " << kAcceptPause.count() << " ms";
      accept_paused_until_ = Clock::now() + kAcceptPause;
      return;
    }
    std::string peer = tcp::socket_address(fd.get(), /*peer=*/true);
    if (connections_.size() >= kMaxConnections) {
      COHORT_LOG(warn) << name_ << ": refusing a connection from " << peer << ": already serving "
                       << kMaxConnections << " connections";
      continue;
    }
    const int on = 1;
    ::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &on, sizeof(on));
    Connection connection;
    connection.fd = std::move(fd);
    connection.peer = std::move(peer);
    connections_.emplace(next_id_++, std::move(connection));
  }
}

void ServerLoop::read_from(std::uint64_t id, Connection& connection) {
  std::size_t received = 0;
  while (!connection.closed && received < kReadBudgetBytes) {
    const ssize_t got = ::recv(connection.fd.get(), read_buffer_.data(), read_buffer_.size(), 0);
    if (got > 0) {
      connection.input.append(read_buffer_.data(), static_cast<std::size_t>(got));
      received += static_cast<std::size_t>(got);
    } else if (got == 0) {
      process_input(id, connection);  // answer what came before the end, if we can
      close(id, connection, "the client closed the connection", /*expected=*/true);
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      return;
    } else if (errno == ECONNRESET) {
      close(id, connection, "the client reset the connection", /*expected=*/true);
    } else if (errno != EINTR) {
      close(id, connection, "recv() failed: " + detail::system_error_text(errno), false);
    }
  }
}

void ServerLoop::flush(Connection& connection) {
  while (!connection.closed && connection.unsent() > 0) {
    const ssize_t sent =
        ::send(connection.fd.get(), connection.output.data() + connection.output_sent,
               connection.unsent(), MSG_NOSIGNAL);
    if (sent >= 0) {
      connection.output_sent += static_cast<std::size_t>(sent);
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      break;
    } else if (errno != EINTR) {
      connection.closed = true;  // the peer is gone; close() logs and cleans up at the caller
      return;
    }
  }
  if (connection.unsent() == 0) {
    connection.output.clear();
    connection.output_sent = 0;
    if (connection.closing) connection.closed = true;
  } else if (connection.output_sent > connection.output.size() / 2) {
    connection.output.erase(0, connection.output_sent);
    connection.output_sent = 0;
  }
}

void ServerLoop::process_input(std::uint64_t id, Connection& connection) {
  std::size_t offset = 0;
  while (!connection.closed && !connection.closing && !connection.pending &&
         connection.unsent() < kMaxUnsentBytes &&
         connection.input.size() - offset >= tcp::kLengthBytes) {
    const std::string_view available = std::string_view(connection.input).substr(offset);
    const std::uint32_t length = tcp::decode_length(available);
    if (length > options_.max_message_bytes) {
      close(id, connection,
            "a message of " + std::to_string(length) + " bytes exceeds max_message_bytes (" +
                std::to_string(options_.max_message_bytes) + ")",
            false);
      return;
    }
    if (available.size() - tcp::kLengthBytes < length) break;
    offset += tcp::kLengthBytes + length;
    tcp::Request request;
    try {
      request = tcp::decode_request(available.substr(tcp::kLengthBytes, length));
    } catch (const tcp::DecodeError& error) {
      close(id, connection, std::string("malformed request: ") + error.what(), false);
      return;
    }
    handle(id, connection, std::move(request));
  }
  if (!connection.closed) connection.input.erase(0, offset);
  // A connection that sent REFUSED (closing) or failed to send (closed) needs cleaning up.
  if (connection.closed) close(id, connection, "sending failed or the client was refused", true);
}

void ServerLoop::handle(std::uint64_t id, Connection& connection, tcp::Request request) {
  using tcp::Opcode;
  using tcp::Status;
  if ((request.opcode == Opcode::hello) == connection.greeted) {
    close(id, connection, connection.greeted ? "a second HELLO" : "a request before HELLO", false);
    return;
  }
  tcp::MessageWriter ok;
  ok.u8(static_cast<std::uint8_t>(Status::ok));
  if (request.opcode == Opcode::hello) {
    std::string refusal;
    if (request.version != tcp::kProtocolVersion) {
      refusal = "the client speaks TCP store protocol version " + std::to_string(request.version) +
                " and the server version " + std::to_string(tcp::kProtocolVersion);
    } else if (!options_.token.empty() && !same_token(request.token, options_.token)) {
      refusal = request.token.empty() ? "the server requires a token and the client gave none"
                                      : "the server refused the token";
    }
    if (!refusal.empty()) {
      COHORT_LOG(warn) << name_ << ": refusing " << connection.peer << ": " << refusal;
      connection.closing = true;  // flush() closes it once the refusal is sent
      send(connection, status_message(Status::refused, refusal));
      return;
    }
    connection.greeted = true;
    send(connection, std::move(ok).finish());
    return;
  }
  for (const auto& key : request.keys) {
    if (key.empty()) {
      send(connection, status_message(Status::invalid_argument, "store keys must not be empty"));
      return;
    }
  }
  const std::string& key = request.keys.empty() ? std::string() : request.keys.front();
  switch (request.opcode) {
    case Opcode::set:
      values_.insert_or_assign(key, std::move(request.value));
      send(connection, std::move(ok).finish());
      key_set(key);
      return;
    case Opcode::get:
    case Opcode::wait: {
      Pending pending;
      pending.opcode = request.opcode;
      pending.keys = std::move(request.keys);
      pending.deadline = detail::deadline_after(from_wire_ms(request.timeout_ms));
      deadlines_.emplace(pending.deadline, id);
      connection.pending = std::move(pending);
      try_answer(id, connection);  // otherwise key_set() or expire() answers it
      return;
    }
    case Opcode::check: {
      const bool all = std::all_of(request.keys.begin(), request.keys.end(),
                                   [&](const std::string& k) { return has(k); });
      send(connection, std::move(ok.u8(all ? 1 : 0)).finish());
      return;
    }
    case Opcode::add: {
      const auto it = values_.find(key);
      std::string error;
      const auto sum =
          detail::apply_add(key, it == values_.end() ? nullptr : &it->second, request.delta, error);
      if (!sum) {
        send(connection, status_message(Status::invalid_argument, error));
        return;
      }
      values_.insert_or_assign(key, std::to_string(*sum));
      send(connection, std::move(ok.i64(*sum)).finish());
      key_set(key);
      return;
    }
    case Opcode::compare_set: {
      const auto it = values_.find(key);
      if (it == values_.end() ? !request.expected.empty() : it->second != request.expected) {
        send(connection, std::move(ok.bytes(it == values_.end() ? "" : it->second)).finish());
        return;
      }
      send(connection, std::move(ok.bytes(request.value)).finish());
      values_.insert_or_assign(key, std::move(request.value));
      key_set(key);
      return;
    }
    case Opcode::remove:
      send(connection, std::move(ok.u8(values_.erase(key) > 0 ? 1 : 0)).finish());
      return;
    case Opcode::hello:
      return;  // handled above
  }
}

bool ServerLoop::try_answer(std::uint64_t id, Connection& connection) {
  auto& pending = *connection.pending;
  const auto& keys = pending.keys;
  for (;;) {
    while (pending.scan_from < keys.size() && has(keys[pending.scan_from])) ++pending.scan_from;
    if (pending.scan_from < keys.size()) {
      watchers_[keys[pending.scan_from]].insert(id);
      pending.watching = true;
      return false;
    }
    // Every key was seen set, but a DELETE may have taken an earlier one away since.
    const auto missing =
        std::find_if(keys.begin(), keys.end(), [&](const std::string& key) { return !has(key); });
    if (missing == keys.end()) break;
    pending.scan_from = static_cast<std::size_t>(missing - keys.begin());
  }
  tcp::MessageWriter reply;
  reply.u8(static_cast<std::uint8_t>(tcp::Status::ok));
  if (pending.opcode == tcp::Opcode::get) reply.bytes(values_.find(keys.front())->second);
  finish_pending(id, connection);
  send(connection, std::move(reply).finish());
  return true;
}

void ServerLoop::finish_pending(std::uint64_t id, Connection& connection) {
  auto& pending = *connection.pending;
  if (pending.watching) {
    if (const auto it = watchers_.find(pending.keys[pending.scan_from]); it != watchers_.end()) {
      it->second.erase(id);
      if (it->second.empty()) watchers_.erase(it);
    }
  }
  deadlines_.erase({pending.deadline, id});
  connection.pending.reset();
}

void ServerLoop::key_set(const std::string& key) {
  const auto it = watchers_.find(key);
  if (it == watchers_.end()) return;
  const std::set<std::uint64_t> ids = std::move(it->second);
  watchers_.erase(it);
  for (const std::uint64_t id : ids) {
    const auto found = connections_.find(id);
    if (found == connections_.end() || !found->second.pending) continue;
    found->second.pending->watching = false;
    if (try_answer(id, found->second)) resumable_.push_back(id);
  }
}

void ServerLoop::expire(Clock::time_point now) {
  while (!deadlines_.empty() && deadlines_.begin()->first <= now) {
    const std::uint64_t id = deadlines_.begin()->second;
    const auto found = connections_.find(id);
    if (found == connections_.end() || !found->second.pending) {
      deadlines_.erase(deadlines_.begin());  // not expected: close() clears its deadline
      continue;
    }
    auto& connection = found->second;
    std::vector<std::string> missing;
    for (const auto& key : connection.pending->keys) {
      if (!has(key)) missing.push_back(key);
    }
    finish_pending(id, connection);
    tcp::MessageWriter reply;
    reply.u8(static_cast<std::uint8_t>(tcp::Status::timeout)).key_list(missing);
    send(connection, std::move(reply).finish());
    resumable_.push_back(id);
  }
}

void ServerLoop::send(Connection& connection, std::string message) {
  if (connection.closed) return;
  connection.output.append(message);
  flush(connection);
}

void ServerLoop::close(std::uint64_t id, Connection& connection, std::string_view reason,
                       bool expected) {
  if (connection.fd.valid()) {
    if (expected) {
      COHORT_LOG(debug) << name_ << ": closing the connection from " << connection.peer << ": "
                        << reason;
    } else {
      COHORT_LOG(warn) << name_ << ": closing the connection from " << connection.peer << ": "
                       << reason;
    }
  }
  if (connection.pending) finish_pending(id, connection);
  connection.closed = true;
  connection.fd.reset();
}

}  // namespace

struct TcpStoreServer::Impl {
  std::string name;
  int port = 0;
  UniqueFd wake;
  std::unique_ptr<ServerLoop> loop;
  std::thread thread;
  std::mutex stop_mutex;
  bool stopped = false;
};

TcpStoreServer::TcpStoreServer(TcpStoreServerOptions options) : impl_(std::make_unique<Impl>()) {
  COHORT_EXPECTS(options.port >= 0 && options.port <= 65535,
                 "TcpStoreServer port " + std::to_string(options.port) + " is not in [0, 65535]");
  COHORT_EXPECTS(options.max_message_bytes > 0, "TcpStoreServer max_message_bytes must be > 0");
  UniqueFd listener = tcp::listen_on(options.host, options.port);
  sockaddr_storage address{};
  socklen_t length = sizeof(address);
  COHORT_CHECK(::getsockname(listener.get(), reinterpret_cast<sockaddr*>(&address), &length) == 0,
               Error, "getsockname() failed: " + detail::system_error_text(errno));
  impl_->port = ntohs(address.ss_family == AF_INET6
                          ? reinterpret_cast<const sockaddr_in6*>(&address)->sin6_port
                          : reinterpret_cast<const sockaddr_in*>(&address)->sin_port);
  impl_->name = "TcpStoreServer(" + tcp::format_address(options.host, impl_->port) + ")";
  impl_->wake.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  COHORT_CHECK(impl_->wake.valid(), Error,
               impl_->name + ": eventfd() failed: " + detail::system_error_text(errno));
  impl_->loop =
      std::make_unique<ServerLoop>(options, std::move(listener), impl_->wake.get(), impl_->name);
  impl_->thread = std::thread([loop = impl_->loop.get()] { loop->run(); });
  COHORT_LOG(debug) << impl_->name << " listening";
}

TcpStoreServer::~TcpStoreServer() { stop(); }

int TcpStoreServer::port() const noexcept { return impl_->port; }

void TcpStoreServer::stop() noexcept {
  std::lock_guard lock(impl_->stop_mutex);
  if (impl_->stopped) return;
  impl_->stopped = true;
  const std::uint64_t one = 1;
  if (::write(impl_->wake.get(), &one, sizeof(one)) != static_cast<ssize_t>(sizeof(one))) {
    COHORT_LOG(error) << impl_->name << ": cannot wake the server thread to stop it";
  }
  try {
    if (impl_->thread.joinable()) impl_->thread.join();
  } catch (const std::exception& error) {
    COHORT_LOG(error) << impl_->name << ": joining the server thread failed: " << error.what();
  }
  impl_->loop.reset();
}

}  // namespace cohort
