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
  COHORT_LOG(debug) << "using torchrun's store at " << info.master_addr << ":" << info.master_port;
  return std::make_shared<PrefixStore>(
      "cohort/attempt" + std::to_string(info.restart_count),
      std::make_shared<TorchStore>(info.master_addr, info.master_port, timeout));
}

}  // namespace

std::shared_ptr<Store> connect_store(const LaunchInfo& info, Milliseconds timeout) {
  return connect_store(info, process_environment(), timeout);
}

StorePlan plan_store(const LaunchInfo& info, const EnvLookup& lookup) {
  StorePlan plan;
  const std::string choice = env::text(lookup, env::kStore).value_or("");
  const auto tcp = [&] {
    plan.kind = StorePlan::Kind::tcp;
    plan.host = info.master_addr;
    plan.port = info.master_port;
    plan.serves = info.rank == 0 && !info.store_is_external;
    plan.has_token = env::text(lookup, env::kStoreToken).has_value();
  };
  const auto torch = [&] {
    plan.kind = StorePlan::Kind::torch;
    plan.host = info.master_addr;
    plan.port = info.master_port;
  };
  if (choice.empty()) {
    if (info.world_size == 1 && info.launcher == Launcher::none) {
      plan.kind = StorePlan::Kind::memory;
    } else if (info.torch_agent_store) {
      torch();
    } else {
      tcp();
    }
    return plan;
  }
  if (choice == "tcp") {
    tcp();
    return plan;
  }
  if (choice == "torch") {
    torch();
    return plan;
  }
  if (choice.starts_with(kFilePrefix)) {
    plan.kind = StorePlan::Kind::file;
    plan.folder = choice.substr(kFilePrefix.size());
    COHORT_EXPECTS(!plan.folder.empty(),
                   "COHORT_STORE='file:' names no folder; set COHORT_STORE=file:<folder> with a "
                   "folder every rank can see");
    return plan;
  }
  if (choice == "memory") {
    COHORT_EXPECTS(info.world_size == 1,
                   "COHORT_STORE=memory cannot connect " + std::to_string(info.world_size) +
                       " processes; set COHORT_STORE to tcp or file:<folder>");
    plan.kind = StorePlan::Kind::memory;
    return plan;
  }
  COHORT_FAIL(InvalidArgument, "COHORT_STORE='" + choice +
                                   "' is not a store; set COHORT_STORE to tcp (the default), "
                                   "torch (PyTorch's TCPStore at the master address), "
                                   "file:<folder> or memory (a single process)");
}

std::string StorePlan::describe() const {
  const std::string address = host + ":" + std::to_string(port);
  switch (kind) {
    case Kind::memory:
      return "in-process memory store (one process)";
    case Kind::tcp:
      return "cohort's TCP store at " + address +
             (serves ? " (this rank serves it)" : " (served by rank 0 or the launcher)") +
             (has_token ? ", with a token" : ", without a token");
    case Kind::torch:
      return "PyTorch's TCPStore at " + address;
    case Kind::file:
      return "file store in " + folder;
  }
  return "unknown store";
}

std::shared_ptr<Store> connect_store(const LaunchInfo& info, const EnvLookup& lookup,
                                     Milliseconds timeout) {
  const StorePlan plan = plan_store(info, lookup);
  switch (plan.kind) {
    case StorePlan::Kind::memory:
      return std::make_shared<MemoryStore>(timeout);
    case StorePlan::Kind::torch:
      return connect_torch(info, timeout);
    case StorePlan::Kind::file:
      return std::make_shared<FileStore>(plan.folder, info.run_id, timeout);
    case StorePlan::Kind::tcp:
      break;
  }
  return connect_tcp(info, lookup, timeout);
}

}  // namespace cohort
