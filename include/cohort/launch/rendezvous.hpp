#pragma once

/// @file
/// Connects a rank to the store its run meets through, as the launch environment says.

#include <cohort/launch/launch_info.hpp>
#include <cohort/launch/store.hpp>

#include <cstdint>
#include <memory>
#include <string>

namespace cohort {

/// The store `connect_store` opens, decided without opening it (cohort-doctor reports it).
struct StorePlan {
  enum class Kind : std::uint8_t { memory, tcp, torch, file };
  Kind kind = Kind::memory;
  std::string host;        ///< tcp and torch: the master address
  int port = 0;            ///< tcp and torch: the master port
  std::string folder;      ///< file: `<folder>/<run_id>`
  bool serves = false;     ///< tcp: this rank starts the server
  bool has_token = false;  ///< tcp: `COHORT_STORE_TOKEN` is set (its value is never shown)

  /// "tcp store at node0:29500 (rank 0 serves it), with a token".
  std::string describe() const;
};

/// Which store `connect_store(info, env)` would open, by the rules below.
/// @throws InvalidArgument as `connect_store` does for a `COHORT_STORE` it refuses.
StorePlan plan_store(const LaunchInfo& info, const EnvLookup& env);

/// Opens the store for this rank, chosen by `COHORT_STORE`:
///
/// - unset or empty: a `MemoryStore` for a single process started without a launcher (no port
///   needed); under torchrun's agent store (`info.torch_agent_store`) as `torch`; otherwise as
///   `tcp`.
/// - `torch`: a `TorchStore` client of the PyTorch TCPStore at `info.master_addr:master_port`,
///   keys under `cohort/attempt<info.restart_count>/`.
/// - `tcp`: a `TcpStore` client of `info.master_addr:info.master_port`. Rank 0 starts the server
///   in its own process unless `info.store_is_external` (cohortrun already hosts it). The token is
///   `COHORT_STORE_TOKEN` when set.
/// - `file:<folder>`: a `FileStore` in `<folder>/<info.run_id>/`; the folder must be on a file
///   system every rank sees.
/// - `memory`: a `MemoryStore`; only for a world of one.
///
/// `timeout` is the store's deadline for blocking calls and for the first connection.
/// @throws InvalidArgument for any other `COHORT_STORE` (the message lists the accepted forms);
///         TimeoutError or Error from the store when it cannot be reached or created.
std::shared_ptr<Store> connect_store(const LaunchInfo& info,
                                     Milliseconds timeout = Store::kDefaultTimeout);

/// The same, reading `COHORT_STORE` and `COHORT_STORE_TOKEN` through `env` (tests).
std::shared_ptr<Store> connect_store(const LaunchInfo& info, const EnvLookup& env,
                                     Milliseconds timeout = Store::kDefaultTimeout);

}  // namespace cohort
