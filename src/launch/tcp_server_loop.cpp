#include "tcp_server_loop.hpp"

#include <cohort/core/error.hpp>
#include <cohort/core/logging.hpp>

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>

// Note [TCP store admission]
// What a client that never authenticates can cost the server is bounded, and it cannot lock the
// clients that do authenticate out:
// - Before HELLO the server reads at most one frame of kMaxHelloPayloadBytes (4 KiB): a longer
//   length prefix closes the connection at once, and no more bytes are read than that frame can
//   hold. Each unauthenticated connection therefore holds at most about 4 KiB of input (plus the
//   kernel's socket buffers); max_message_bytes applies only after HELLO.
// - A connection must finish HELLO within hello_timeout of being accepted (slow writers included:
//   the deadline counts from the accept, not from the last byte).
// - An authenticated connection that stops in the middle of a request (part of a frame, then
//   nothing for stall_timeout) is closed. One idle between requests is kept: ranks hold their
//   store connection for the whole run and may not touch it for hours.
// - At most max_unauthenticated connections wait for HELLO at once and at most max_connections
//   are open in all. A new connection past either limit evicts the oldest unauthenticated one;
//   when every open connection is authenticated, the new one is refused. When the process runs
//   out of file descriptors, accept() failing evicts the oldest unauthenticated connection too.
//   A real client sends HELLO as soon as it connects, so under a flood of idle connections it is
//   the idle ones that go; a client dropped before its HELLO is read retries
//   (Note [Connecting to the store]).
// - Warnings about bad clients are rate-limited (one a second, with a count of those held back).
// Without a token, HELLO is all it takes to be trusted: every such client may then send frames of
// max_message_bytes. Servers reachable from untrusted networks should set a token.

namespace cohort::detail::tcp {
namespace {

constexpr std::size_t kReadChunkBytes = 64 * 1024;
// Bytes read from one connection per poll round, so that one busy client cannot starve others.
constexpr std::size_t kReadBudgetBytes = 4 << 20;
// Replies a client has not read yet; past this, the server reads no more of its requests.
constexpr std::size_t kMaxUnsentBytes = 1 << 20;
// How long the server stops accepting when it runs out of file descriptors and has nothing to
// evict.
constexpr auto kAcceptPause = std::chrono::milliseconds(100);
// How often the server looks for stalled requests (at most; never less often than stall_timeout).
constexpr auto kStallCheckEvery = std::chrono::seconds(1);

std::size_t saturating_frame_bytes(std::size_t payload) noexcept {
  return payload > SIZE_MAX - kLengthBytes ? SIZE_MAX : payload + kLengthBytes;
}

}  // namespace

void WarningLimiter::warn(std::string_view name, std::string_view message) {
  const auto now = Clock::now();
  if (now - last_ < std::chrono::seconds(1)) {
    ++held_back_;
    return;
  }
  last_ = now;
  if (held_back_ > 0) {
    COHORT_LOG(warn) << name << ": " << message << " (and " << held_back_
                     << " similar warnings in the last seconds)";
  } else {
    COHORT_LOG(warn) << name << ": " << message;
  }
  held_back_ = 0;
}

ServerLoop::ServerLoop(const TcpStoreServerOptions& options, UniqueFd listener, int wake,
                       std::string name)
    : options_(options),
      listener_(std::move(listener)),
      wake_(wake),
      name_(std::move(name)),
      read_buffer_(kReadChunkBytes) {}

void ServerLoop::run() noexcept {
  try {
    serve();
  } catch (const std::exception& error) {
    COHORT_LOG(error) << name_ << " stopped serving: " << error.what();
  }
  connections_.clear();
  listener_.reset();
}

std::size_t ServerLoop::input_limit(const Connection& connection) const noexcept {
  return connection.greeted ? saturating_frame_bytes(options_.max_message_bytes)
                            : kLengthBytes + kMaxHelloPayloadBytes;
}

Clock::time_point ServerLoop::next_wake() const {
  auto wake_at = deadlines_.empty() ? Clock::time_point::max() : deadlines_.begin()->first;
  if (!unauthenticated_.empty()) {
    wake_at = std::min(wake_at, unauthenticated_.begin()->first + options_.hello_timeout);
  }
  if (open_connections_ > 0) wake_at = std::min(wake_at, next_stall_check_);
  if (Clock::now() < accept_paused_until_) wake_at = std::min(wake_at, accept_paused_until_);
  return wake_at;
}

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
      short events = 0;
      // Below its limit a connection is read (and its half-close noticed); at the limit it holds
      // a whole frame that waits for the server, so reading more could only grow the buffer.
      if (connection.input.size() < input_limit(connection)) events |= POLLIN | POLLRDHUP;
      if (connection.unsent() > 0) events |= POLLOUT;
      fds.push_back({connection.fd.get(), events, 0});
      ids.push_back(id);
    }
    if (::poll(fds.data(), static_cast<nfds_t>(fds.size()), poll_timeout_ms(next_wake())) < 0) {
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
      if (connection.closed) continue;  // evicted by accept_all() in this round
      if ((fds[i].revents & POLLOUT) != 0) flush(connection);
      if ((fds[i].revents & (POLLIN | POLLRDHUP | POLLHUP | POLLERR)) != 0) {
        read_from(id, connection);
      }
      process_input(id, connection);
    }
    const auto now = Clock::now();
    expire(now);
    enforce_deadlines(now);
    while (!resumable_.empty()) {
      const std::uint64_t id = resumable_.back();
      resumable_.pop_back();
      if (const auto it = connections_.find(id); it != connections_.end()) {
        process_input(id, it->second);
      }
    }
    for (auto& [id, connection] : connections_) {
      if (connection.closed) close(id, connection, "sending failed", /*expected=*/true);
    }
    std::erase_if(connections_, [](const auto& entry) { return entry.second.closed; });
    held_requests_.store(deadlines_.size());
  }
}

bool ServerLoop::evict_oldest_unauthenticated(std::string_view why) {
  if (unauthenticated_.empty()) return false;
  const std::uint64_t id = unauthenticated_.begin()->second;
  auto& connection = connections_.at(id);
  warnings_.warn(name_, "dropping " + connection.peer + ", the oldest connection still without " +
                            "HELLO, to make room (" + std::string(why) + ")");
  close(id, connection, "evicted", /*expected=*/true);
  return true;
}

void ServerLoop::accept_all() {
  for (;;) {
    UniqueFd fd(::accept4(listener_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
    if (!fd.valid()) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      const std::string reason = detail::system_error_text(errno);
      if ((errno == EMFILE || errno == ENFILE) &&
          evict_oldest_unauthenticated("accept() failed: " + reason)) {
        continue;
      }
      // Out of descriptors or memory: pause rather than spin on a listener that stays readable.
      warnings_.warn(name_, "accept() failed (" + reason + "); pausing new connections for " +
                                std::to_string(kAcceptPause.count()) + " ms");
      accept_paused_until_ = Clock::now() + kAcceptPause;
      return;
    }
    std::string peer = socket_address(fd.get(), /*peer=*/true);
    if (unauthenticated_.size() >= options_.max_unauthenticated) {
      evict_oldest_unauthenticated(std::to_string(unauthenticated_.size()) +
                                   " connections wait for HELLO, the most allowed");
    }
    if (open_connections_ >= options_.max_connections &&
        !evict_oldest_unauthenticated(std::to_string(open_connections_.load()) +
                                      " connections are open, the most allowed")) {
      warnings_.warn(name_, "refusing a connection from " + peer + ": already serving " +
                                std::to_string(open_connections_.load()) +
                                " authenticated clients");
      continue;
    }
    const int on = 1;
    ::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &on, sizeof(on));
    const std::uint64_t id = next_id_++;
    Connection connection;
    connection.fd = std::move(fd);
    connection.peer = std::move(peer);
    connection.accepted_at = Clock::now();
    connection.last_input_at = connection.accepted_at;
    unauthenticated_.emplace(connection.accepted_at, id);
    ++open_connections_;
    connections_.emplace(id, std::move(connection));
  }
}

void ServerLoop::read_from(std::uint64_t id, Connection& connection) {
  std::size_t received = 0;
  while (!connection.closed && received < kReadBudgetBytes) {
    const std::size_t limit = input_limit(connection);
    if (connection.input.size() >= limit) return;  // a whole frame waits; see serve()
    const std::size_t room = std::min(read_buffer_.size(), limit - connection.input.size());
    const ssize_t got = ::recv(connection.fd.get(), read_buffer_.data(), room, 0);
    if (got > 0) {
      connection.input.append(read_buffer_.data(), static_cast<std::size_t>(got));
      connection.last_input_at = Clock::now();
      received += static_cast<std::size_t>(got);
      // Before HELLO the limit is one small frame: decode it now, so that a client that sends
      // HELLO and its first request together is read on at the larger limit.
      if (!connection.greeted) process_input(id, connection);
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
      connection.closed = true;  // the peer is gone; close() cleans up later in the round
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
         connection.unsent() < kMaxUnsentBytes) {
    const std::string_view available = std::string_view(connection.input).substr(offset);
    const std::size_t max_payload =
        connection.greeted ? options_.max_message_bytes : kMaxHelloPayloadBytes;
    const FrameScan scan = scan_frame(available, max_payload);
    if (scan.state == FrameScan::State::incomplete) break;
    if (scan.state == FrameScan::State::too_long) {
      warnings_.warn(name_,
                     "closing the connection from " + connection.peer + ": a message of " +
                         std::to_string(scan.length) + " bytes exceeds " +
                         (connection.greeted ? "max_message_bytes (" : "the limit before HELLO (") +
                         std::to_string(max_payload) + ")");
      close(id, connection, "message too long", /*expected=*/true);
      return;
    }
    offset += kLengthBytes + scan.length;
    Request request;
    try {
      request = decode_request(available.substr(kLengthBytes, scan.length));
    } catch (const DecodeError& error) {
      warnings_.warn(name_, "closing the connection from " + connection.peer +
                                ": malformed request: " + error.what());
      close(id, connection, "malformed request", /*expected=*/true);
      return;
    }
    handle(id, connection, std::move(request));
  }
  if (!connection.closed) connection.input.erase(0, offset);
  // A connection that sent REFUSED (closing) or failed to send (closed) needs cleaning up.
  if (connection.closed) close(id, connection, "sending failed or the client was refused", true);
}

void ServerLoop::enforce_deadlines(Clock::time_point now) {
  while (!unauthenticated_.empty() &&
         unauthenticated_.begin()->first + options_.hello_timeout <= now) {
    const std::uint64_t id = unauthenticated_.begin()->second;
    auto& connection = connections_.at(id);
    warnings_.warn(name_, "closing the connection from " + connection.peer + ": no HELLO within " +
                              std::to_string(options_.hello_timeout.count()) + " ms");
    close(id, connection, "no HELLO in time", /*expected=*/true);
  }
  if (now < next_stall_check_) return;
  next_stall_check_ =
      now + std::min<Clock::duration>(kStallCheckEvery,
                                      std::max<Clock::duration>(options_.stall_timeout / 4,
                                                                std::chrono::milliseconds(10)));
  for (auto& [id, connection] : connections_) {
    // A pending request waits for the server, not for the client: not a stall.
    if (connection.closed || !connection.greeted || connection.pending ||
        connection.input.empty() || now - connection.last_input_at < options_.stall_timeout) {
      continue;
    }
    warnings_.warn(name_, "closing the connection from " + connection.peer + ": " +
                              std::to_string(connection.input.size()) +
                              " bytes of an unfinished request and nothing more for " +
                              std::to_string(options_.stall_timeout.count()) + " ms");
    close(id, connection, "stalled request", /*expected=*/true);
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
      warnings_.warn(name_,
                     "closing the connection from " + connection.peer + ": " + std::string(reason));
    }
    if (!connection.greeted) unauthenticated_.erase({connection.accepted_at, id});
    --open_connections_;
  }
  if (connection.pending) finish_pending(id, connection);
  connection.closed = true;
  connection.fd.reset();
  // Give the memory back now: a closed connection may wait until the end of the round.
  std::string().swap(connection.input);
  std::string().swap(connection.output);
  connection.output_sent = 0;
}

}  // namespace cohort::detail::tcp
