#pragma once

/// @file
/// A store served over TCP: a server in one process, clients in every rank.
///
/// The protocol is length-prefixed and bounded (see `docs/design.md`, "TCP store protocol"): a
/// malformed, truncated or oversized message closes that one connection and the server goes on
/// serving the others. Blocking requests (get, wait) carry their deadline to the server, which
/// answers "timed out" when it passes, so a client never waits on a dead request. When a token is
/// configured (`COHORT_STORE_TOKEN`), a client must present the same token before anything else.

#include <cohort/launch/store.hpp>

#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>

namespace cohort {

struct TcpStoreServerOptions {
  /// Address to listen on; "0.0.0.0" for every interface, "127.0.0.1" for this host alone.
  std::string host = "0.0.0.0";
  /// Port to listen on; 0 picks a free one (see `TcpStoreServer::port`).
  int port = 0;
  /// Clients must present this token; empty means none is asked for.
  std::string token = {};
  /// Largest request accepted after HELLO; a longer length prefix closes the connection. Before
  /// HELLO the limit is 4 KiB, whatever this says.
  std::size_t max_message_bytes = std::size_t{64} << 20;
  /// A connection must complete HELLO within this long of being accepted, or it is closed.
  Milliseconds hello_timeout = std::chrono::seconds(10);
  /// A connection that sent part of a request and nothing more for this long is closed. (A
  /// connection idle between requests is kept: ranks hold theirs for the whole run.)
  Milliseconds stall_timeout = std::chrono::seconds(30);
  /// Most connections open at once.
  std::size_t max_connections = 4096;
  /// Most connections waiting for HELLO at once. A new connection past this limit, or past
  /// `max_connections`, closes the oldest connection still without HELLO; when every open
  /// connection has completed HELLO, the new one is refused. See `docs/reliability.md`.
  std::size_t max_unauthenticated = 256;
};

/// A store server running on its own thread until destroyed or stopped.
class TcpStoreServer {
 public:
  /// Binds and listens, then serves on a background thread.
  /// @throws Error naming the address and the system's reason when it cannot bind or listen.
  explicit TcpStoreServer(TcpStoreServerOptions options = {});
  ~TcpStoreServer();
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;

  /// The port it listens on (the chosen one when the options asked for 0).
  int port() const noexcept;

  /// GET and WAIT requests the server holds until their keys are set or their deadline passes
  /// (0 once stopped). For tests and diagnostics: a test waits for a client to be blocked here
  /// instead of sleeping and hoping it is.
  std::size_t held_requests() const;

  /// Connections open now (authenticated or not); 0 once stopped.
  std::size_t open_connections() const;

  /// Stops serving and closes every connection. Idempotent; the destructor calls it.
  void stop() noexcept;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

struct TcpStoreOptions {
  std::string host = "127.0.0.1";
  int port = 29500;
  /// The token to present; empty means none. `connect_store` takes it from
  /// `COHORT_STORE_TOKEN`; this class reads no environment.
  std::string token = {};
  /// Deadline for blocking calls (get, wait, add...).
  Milliseconds timeout = Store::kDefaultTimeout;
  /// How long to keep retrying the first connection (the server may not be up yet).
  Milliseconds connect_timeout = std::chrono::seconds(60);
  /// Start a `TcpStoreServer` in this process on `port` (on `server_host`) before connecting to
  /// it over loopback; with port 0 the server picks a free port (see `TcpStore::port`). Clones
  /// share the server, which stops when the last of them is destroyed.
  bool start_server = false;
  /// The address the server started by `start_server` listens on: all interfaces by default,
  /// "127.0.0.1" for this host alone.
  std::string server_host = "0.0.0.0";
  /// Largest reply accepted from the server.
  std::size_t max_message_bytes = std::size_t{64} << 20;
};

/// A client of a `TcpStoreServer` (optionally owning the server, see `start_server`). Calls on one
/// object are serialised over its one connection; `clone()` opens another connection.
class TcpStore final : public Store {
 public:
  /// Connects, retrying until `connect_timeout`, then presents the token.
  /// @throws TimeoutError naming host and port when no server answers in time; Error when the
  ///         server refuses the token.
  explicit TcpStore(TcpStoreOptions options);
  ~TcpStore() override;

  void set(std::string_view key, std::string_view value) override;
  std::string get(std::string_view key, Milliseconds timeout) override;
  void wait(const std::vector<std::string>& keys, Milliseconds timeout) override;
  bool check(const std::vector<std::string>& keys) override;
  std::int64_t add(std::string_view key, std::int64_t delta) override;
  std::string compare_set(std::string_view key, std::string_view expected,
                          std::string_view desired) override;
  bool remove(std::string_view key) override;
  std::unique_ptr<Store> clone() const override;

  /// For the store that started its server (`start_server`): waits, up to `limit`, until every
  /// client of another process has disconnected, so that a run's last exchange can finish before
  /// the process hosting the store ends (Note [The store outlives its host's last call]). Returns
  /// true when they have (at once for a store that serves nobody), false at the limit.
  bool wait_for_clients(Milliseconds limit) const noexcept;
  std::string describe() const override;
  using Store::get;
  using Store::wait;

  /// The port of the server this client talks to.
  int port() const noexcept;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace cohort
