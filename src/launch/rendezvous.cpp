#include <cohort/launch/rendezvous.hpp>

#include <cohort/core/env.hpp>
#include <cohort/core/error.hpp>
#include <cohort/core/logging.hpp>
#include <cohort/launch/file_store.hpp>
#include <cohort/launch/memory_store.hpp>
#include <cohort/launch/tcp_store.hpp>
#include <cohort/launch/torch_store.hpp>

#include <string>
#include <string_view>

namespace cohort {
namespace {

constexpr std::string_view kFilePrefix = "file:";

std::shared_ptr<Store> connect_tcp(const LaunchInfo& info, const EnvLookup& lookup,
                                   Milliseconds timeout) {
  TcpStoreOptions options;
  options.host = info.master_addr;
  options.port = info.master_port;
  options.token = env::store_token(lookup);  // `lookup` decides it in tests as well
  options.timeout = timeout;
  options.connect_timeout = timeout;
  options.start_server = info.rank == 0 && !info.store_is_external;
  COHORT_LOG(debug) << "connecting to the TCP store at " << info.master_addr << ":"
                    << info.master_port << (options.start_server ? " (serving it)" : "");
  return std::make_shared<TcpStore>(std::move(options));
}

/// torchrun's agent store, scoped to this attempt: it lives as long as torchrun, across restarts,
/// so an earlier attempt's keys are still there (Note [torchrun's agent store] in design.md).
std::shared_ptr<Store> connect_torch(const LaunchInfo& info, Milliseconds timeout) {
  COHORT_LOG(debug) << "using torchrun's store at " << info.master_addr << ":"
                    << info.master_port;
  return std::make_shared<PrefixStore>(
      "cohort/attempt" + std::to_string(info.restart_count),
      std::make_shared<TorchStore>(info.master_addr, info.master_port, timeout));
}

}  // namespace

std::shared_ptr<Store> connect_store(const LaunchInfo& info, Milliseconds timeout) {
  return connect_store(info, process_environment(), timeout);
}

std::shared_ptr<Store> connect_store(const LaunchInfo& info, const EnvLookup& lookup,
                                     Milliseconds timeout) {
  const std::string choice = env::text(lookup, env::kStore).value_or("");
  if (choice.empty()) {
    if (info.world_size == 1 && info.launcher == Launcher::none) {
      return std::make_shared<MemoryStore>(timeout);
    }
    if (info.torch_agent_store) return connect_torch(info, timeout);
    return connect_tcp(info, lookup, timeout);
  }
  if (choice == "tcp") return connect_tcp(info, lookup, timeout);
  if (choice == "torch") return connect_torch(info, timeout);
  if (choice.starts_with(kFilePrefix)) {
    const std::string folder = choice.substr(kFilePrefix.size());
    COHORT_EXPECTS(!folder.empty(),
                   "COHORT_STORE='file:' names no folder; set COHORT_STORE=file:<folder> with a "
                   "folder every rank can see");
    return std::make_shared<FileStore>(folder, info.run_id, timeout);
  }
  if (choice == "memory") {
    COHORT_EXPECTS(info.world_size == 1,
                   "COHORT_STORE=memory cannot connect " + std::to_string(info.world_size) +
                       " processes; set COHORT_STORE to tcp or file:<folder>");
    return std::make_shared<MemoryStore>(timeout);
  }
  COHORT_FAIL(InvalidArgument, "COHORT_STORE='" + choice +
                                   "' is not a store; set COHORT_STORE to tcp (the default), "
                                   "torch (PyTorch's TCPStore at the master address), "
                                   "file:<folder> or memory (a single process)");
}

}  // namespace cohort
