#include <cohort/launch/tcp_store.hpp>

#include <cohort/core/error.hpp>
#include <cohort/core/logging.hpp>

#include "tcp_server_loop.hpp"

#include <netinet/in.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <mutex>
#include <thread>
#include <utility>

// The server side of the TCP store: what each request does to the table, and the server object.
// The wire format is Note [TCP store protocol] (tcp_protocol.cpp); the transport, admission and
// deadlines are in tcp_server_loop.cpp; the client is in tcp_store.cpp.

namespace cohort::detail::tcp {
namespace {

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

std::string status_message(Status status, std::string_view message) {
  MessageWriter writer;
  writer.u8(static_cast<std::uint8_t>(status)).bytes(message);
  return std::move(writer).finish();
}

}  // namespace

void ServerLoop::handle(std::uint64_t id, Connection& connection, Request request) {
  if ((request.opcode == Opcode::hello) == connection.greeted) {
    close(id, connection, connection.greeted ? "a second HELLO" : "a request before HELLO",
          /*expected=*/false);
    return;
  }
  MessageWriter ok;
  ok.u8(static_cast<std::uint8_t>(Status::ok));
  if (request.opcode == Opcode::hello) {
    std::string refusal;
    if (request.version != kProtocolVersion) {
      refusal = "the client speaks TCP store protocol version " + std::to_string(request.version) +
                " and the server version " + std::to_string(kProtocolVersion);
    } else if (!options_.token.empty() && !same_token(request.token, options_.token)) {
      refusal = request.token.empty() ? "the server requires a token and the client gave none"
                                      : "the server refused the token";
    }
    if (!refusal.empty()) {
      warnings_.warn(name_, "refusing " + connection.peer + ": " + refusal);
      connection.closing = true;  // flush() closes it once the refusal is sent
      send(connection, status_message(Status::refused, refusal));
      return;
    }
    connection.greeted = true;
    unauthenticated_.erase({connection.accepted_at, id});
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
  MessageWriter reply;
  reply.u8(static_cast<std::uint8_t>(Status::ok));
  if (pending.opcode == Opcode::get) reply.bytes(values_.find(keys.front())->second);
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
    MessageWriter reply;
    reply.u8(static_cast<std::uint8_t>(Status::timeout)).key_list(missing);
    send(connection, std::move(reply).finish());
    resumable_.push_back(id);
  }
}

}  // namespace cohort::detail::tcp

namespace cohort {

using detail::UniqueFd;

struct TcpStoreServer::Impl {
  std::string name;
  int port = 0;
  UniqueFd wake;
  std::unique_ptr<detail::tcp::ServerLoop> loop;
  std::thread thread;
  std::mutex stop_mutex;
  bool stopped = false;
};

TcpStoreServer::TcpStoreServer(TcpStoreServerOptions options) : impl_(std::make_unique<Impl>()) {
  COHORT_EXPECTS(options.port >= 0 && options.port <= 65535,
                 "TcpStoreServer port " + std::to_string(options.port) + " is not in [0, 65535]");
  COHORT_EXPECTS(options.max_message_bytes > 0, "TcpStoreServer max_message_bytes must be > 0");
  COHORT_EXPECTS(options.token.size() <= detail::tcp::kMaxTokenBytes,
                 "TcpStoreServer token of " + std::to_string(options.token.size()) +
                     " bytes is longer than the most a HELLO carries (" +
                     std::to_string(detail::tcp::kMaxTokenBytes) + " bytes)");
  COHORT_EXPECTS(
      options.hello_timeout > Milliseconds::zero() && options.stall_timeout > Milliseconds::zero(),
      "TcpStoreServer hello_timeout and stall_timeout must be positive");
  COHORT_EXPECTS(options.max_connections > 0 && options.max_unauthenticated > 0,
                 "TcpStoreServer max_connections and max_unauthenticated must be at least 1");
  UniqueFd listener = detail::tcp::listen_on(options.host, options.port);
  sockaddr_storage address{};
  socklen_t length = sizeof(address);
  COHORT_CHECK(::getsockname(listener.get(), reinterpret_cast<sockaddr*>(&address), &length) == 0,
               Error, "getsockname() failed: " + detail::system_error_text(errno));
  impl_->port = ntohs(address.ss_family == AF_INET6
                          ? reinterpret_cast<const sockaddr_in6*>(&address)->sin6_port
                          : reinterpret_cast<const sockaddr_in*>(&address)->sin_port);
  impl_->name = "TcpStoreServer(" + detail::tcp::format_address(options.host, impl_->port) + ")";
  impl_->wake.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  COHORT_CHECK(impl_->wake.valid(), Error,
               impl_->name + ": eventfd() failed: " + detail::system_error_text(errno));
  impl_->loop = std::make_unique<detail::tcp::ServerLoop>(options, std::move(listener),
                                                          impl_->wake.get(), impl_->name);
  impl_->thread = std::thread([loop = impl_->loop.get()] { loop->run(); });
  COHORT_LOG(debug) << impl_->name << " listening";
}

TcpStoreServer::~TcpStoreServer() {
  stop();
}

int TcpStoreServer::port() const noexcept {
  return impl_->port;
}

std::size_t TcpStoreServer::held_requests() const {
  std::lock_guard lock(impl_->stop_mutex);
  return impl_->stopped ? 0 : impl_->loop->held_requests();
}

std::size_t TcpStoreServer::open_connections() const {
  std::lock_guard lock(impl_->stop_mutex);
  return impl_->stopped ? 0 : impl_->loop->open_connections();
}

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
