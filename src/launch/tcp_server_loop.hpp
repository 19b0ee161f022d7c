#pragma once

// The TCP store server's state and its poll() loop. The transport (accepting, reading, writing,
// admission and deadlines; Note [TCP store admission]) is in tcp_server_loop.cpp; what the
// requests do to the table is in tcp_store_server.cpp.

#include <cohort/launch/tcp_store.hpp>

#include "tcp_protocol.hpp"

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace cohort::detail::tcp {

/// A GET or WAIT held until its keys are all set or its deadline passes.
struct Pending {
  Opcode opcode = Opcode::get;
  std::vector<std::string> keys;
  Clock::time_point deadline;
  /// Keys before this index were seen set; while `watching`, the server waits for this one.
  std::size_t scan_from = 0;
  bool watching = false;
};

struct Connection {
  UniqueFd fd;
  std::string peer;
  Clock::time_point accepted_at;
  Clock::time_point last_input_at;  ///< when a byte last arrived
  std::string input;                ///< received bytes not yet decoded
  std::string output;               ///< replies not yet sent, from `output_sent` on
  std::size_t output_sent = 0;
  bool greeted = false;
  bool closing = false;  ///< close once the output is sent (after REFUSED)
  bool closed = false;   ///< erased at the end of the poll round
  std::optional<Pending> pending;

  std::size_t unsent() const noexcept { return output.size() - output_sent; }
};

/// Logs a warning at most once a second and counts the ones it held back, so that a flood of bad
/// connections cannot flood the log.
class WarningLimiter {
 public:
  void warn(std::string_view name, std::string_view message);

 private:
  Clock::time_point last_{};
  std::uint64_t held_back_ = 0;
};

/// Lives on the server thread only, so it needs no lock.
class ServerLoop {
 public:
  ServerLoop(const TcpStoreServerOptions& options, UniqueFd listener, int wake, std::string name);

  /// Serves until `wake` becomes readable, then closes every connection and the listener.
  void run() noexcept;
  /// GET and WAIT requests held at the end of the last poll round; read from any thread.
  std::size_t held_requests() const noexcept { return held_requests_.load(); }
  /// Connections whose socket is still open; read from any thread.
  std::size_t open_connections() const noexcept { return open_connections_.load(); }

 private:
  // Transport (tcp_server_loop.cpp).
  void serve();
  void accept_all();
  bool evict_oldest_unauthenticated(std::string_view why);
  void read_from(std::uint64_t id, Connection& connection);
  void flush(Connection& connection);
  void process_input(std::uint64_t id, Connection& connection);
  void enforce_deadlines(Clock::time_point now);
  Clock::time_point next_wake() const;
  void send(Connection& connection, std::string message);
  void close(std::uint64_t id, Connection& connection, std::string_view reason, bool expected);
  std::size_t input_limit(const Connection& connection) const noexcept;

  // Requests (tcp_store_server.cpp).
  void handle(std::uint64_t id, Connection& connection, Request request);
  bool try_answer(std::uint64_t id, Connection& connection);
  void finish_pending(std::uint64_t id, Connection& connection);
  void key_set(const std::string& key);
  void expire(Clock::time_point now);

  bool has(std::string_view key) const { return values_.find(key) != values_.end(); }

  TcpStoreServerOptions options_;
  UniqueFd listener_;
  int wake_;
  std::string name_;
  std::vector<char> read_buffer_;
  WarningLimiter warnings_;
  Clock::time_point accept_paused_until_{};
  Clock::time_point next_stall_check_{};
  std::uint64_t next_id_ = 1;
  std::atomic<std::size_t> open_connections_{0};  ///< connections whose socket is still open
  std::unordered_map<std::uint64_t, Connection> connections_;
  /// Open connections that have not completed HELLO, oldest first.
  std::set<std::pair<Clock::time_point, std::uint64_t>> unauthenticated_;
  std::map<std::string, std::string, std::less<>> values_;
  /// key -> connections whose pending request waits for it.
  std::map<std::string, std::set<std::uint64_t>, std::less<>> watchers_;
  std::set<std::pair<Clock::time_point, std::uint64_t>> deadlines_;
  /// Connections whose pending request was answered: they may have more requests buffered.
  std::vector<std::uint64_t> resumable_;
  /// Read by other threads too, like `open_connections_` (`TcpStoreServer::held_requests`).
  std::atomic<std::size_t> held_requests_{0};
};

}  // namespace cohort::detail::tcp
