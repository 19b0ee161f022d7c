#include "comm/context.hpp"
#include "comm/factory.hpp"
#include "comm/failure_aware_store.hpp"
#include "comm/host/select.hpp"
#include "comm/topology.hpp"
#include "comm/watchdog.hpp"
#if COHORT_WITH_CUDA
#include "comm/nccl/communicator.hpp"  // prepare_watchdog_thread
#endif

#include <cohort/comm/detail/nccl_counts.hpp>
#include <cohort/comm/transport.hpp>
#include <cohort/comm/world.hpp>
#include <cohort/core/env.hpp>
#include <cohort/core/error.hpp>
#include <cohort/core/logging.hpp>
#include <cohort/launch/memory_store.hpp>
#include <cohort/launch/rendezvous.hpp>
#include <cohort/launch/tcp_store.hpp>

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace cohort {

#if !COHORT_WITH_CUDA
std::uint64_t detail::nccl_communicators_created() noexcept {
  return 0;
}
#endif

struct World::Impl {
  int rank = 0;
  int size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  int node_rank = 0;
  int num_nodes = 1;
  Device device = Device::host();
  Backend backend = Backend::gloo;  // decided once, before any communicator exists
  HostTransport host_transport = HostTransport::automatic;
  std::vector<int> nodes;  // node of each rank
  std::string store_host;  // the TCP store's host; empty for a store given in WorldOptions
  std::chrono::milliseconds timeout{};
  std::shared_ptr<Store> store;
  /// The TCP store this rank serves to the others, if it does (rank 0 under mpirun or srun).
  std::shared_ptr<TcpStore> served_store;
  std::unique_ptr<StoreGroup> group;  // every rank of the world, meeting under `store`
  std::shared_ptr<detail::Watchdog> watchdog;
  std::unique_ptr<Communicator> global;
  std::unique_ptr<Communicator> local;
  std::unique_ptr<Communicator> cross;

  ~Impl() {
    // The same order on every rank: NCCL's destroy is collective within a node.
    cross.reset();
    local.reset();
    global.reset();
    if (watchdog) {
      watchdog->stop();  // no thread of this World outlives it
    }
  }
};

namespace {

/// A peer that dies closes its sockets, and a write to one raises SIGPIPE, whose default action
/// kills the process inside Gloo's socket writes, before cohort can report which rank failed. So
/// SIGPIPE is ignored when (and only when) the program left it at its default; writes then fail
/// with EPIPE, which the backends report as errors.
void ignore_default_sigpipe() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction current {};
    if (sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) {
      struct sigaction ignore {};
      ignore.sa_handler = SIG_IGN;
      sigemptyset(&ignore.sa_mask);
      sigaction(SIGPIPE, &ignore, nullptr);
    }
  });
}

std::string host_name() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) {
    return "localhost";
  }
  return name;
}

std::chrono::milliseconds timeout_from(const WorldOptions& options) {
  if (options.timeout) {
    COHORT_EXPECTS(options.timeout->count() > 0, "the world's timeout must be positive");
    return *options.timeout;
  }
  return env::timeout();
}

bool debug_from(const WorldOptions& options) {
  if (options.debug_collectives) {
    return *options.debug_collectives;
  }
  return env::boolean(env::kDebugCollectives);
}

HostTransport host_transport_from(const WorldOptions& options) {
  return cohort::host_transport_from(options.host_transport, process_environment());
}

// Note [The backend, decided once]
// Which backend the world's communicators run on is decided in one place, before any of them
// exists: `BackendChoice` says NCCL or the host (automatic: NCCL where this process sees a GPU),
// `HostTransport` and the nodes the ranks run on say which host backend (Note [Host transport
// selection]); the functions that decide are public (cohort/comm/transport.hpp), so that
// cohort-doctor reports the same decision. The decision goes into the global communicator's
// context; the factory makes that backend and its constructor checks it (expect_backend), none
// assigns it. A split's group inherits NCCL, or gets the host backend its members' nodes call
// for, decided by the same rule before its communicator exists. run_local decides NCCL or the host
// once for all its ranks.

/// NCCL or the host, for `choice` (cohort/comm/transport.hpp, which cohort-doctor calls too).
BackendChoice resolve(BackendChoice choice) {
  return resolve_backend(choice);
}

/// This rank's place among the nodes: the launcher's word where it gave it, host names (or
/// simulated nodes of `ranks_per_node`) for the rest (Note [Topology from the launcher]).
void find_place(World::Impl& world, const LaunchInfo& launch, int ranks_per_node) {
  const std::string host =
      ranks_per_node > 0 ? "node" + std::to_string(world.rank / ranks_per_node) : host_name();
  std::vector<detail::RankPlace> places;
  for (const std::string& text :
       world.group->all_gather("place", detail::encode(detail::launcher_place(launch, host)))) {
    places.push_back(detail::decode(text));
  }
  const detail::Topology topology = detail::resolve_topology(places, world.rank, launch);
  world.local_rank = topology.local_rank;
  world.local_world_size = topology.local_world_size;
  world.node_rank = topology.node_rank;
  world.num_nodes = topology.num_nodes;
  world.nodes = topology.nodes;
}

Device choose_device(const World::Impl& world, const std::optional<Device>& asked) {
  if (world.backend != Backend::nccl) {
    COHORT_EXPECTS(!asked || asked->is_host(),
                   "WorldOptions::device asks for " + (asked ? asked->to_string() : "") +
                       ", but this world runs on the host backend (" +
                       std::string(to_string(world.backend)) +
                       "); a GPU is chosen only for the NCCL backend: ask for "
                       "BackendChoice::nccl, or leave the device unset");
    return Device::host();
  }
  const int gpus = cuda_device_count();
  if (asked) {
    COHORT_EXPECTS(asked->is_cuda() && asked->index() >= 0 && asked->index() < gpus,
                   "WorldOptions::device asks for " + asked->to_string() +
                       ", but the NCCL backend works on one of the " + std::to_string(gpus) +
                       " visible GPUs (cuda:0 to cuda:" + std::to_string(gpus - 1) +
                       "); check CUDA_VISIBLE_DEVICES");
    return *asked;
  }
  if (world.local_rank >= gpus) {
    COHORT_EXPECTS(env::boolean(env::kAllowSharedGpu),
                   "rank " + std::to_string(world.rank) + " is local rank " +
                       std::to_string(world.local_rank) + " of " +
                       std::to_string(world.local_world_size) + " on its node, but only " +
                       std::to_string(gpus) +
                       " GPUs are visible: start at most one rank per GPU (cohortrun "
                       "--nproc-per-node " +
                       std::to_string(gpus) +
                       "), check CUDA_VISIBLE_DEVICES, or use the Gloo backend. "
                       "(COHORT_ALLOW_SHARED_GPU=1 places several ranks on one GPU, which NCCL "
                       "supports only with NCCL_MULTI_RANK_GPU_ENABLE=1 on NCCL 2.30+.)");
    return Device::cuda(world.local_rank % gpus);
  }
  return Device::cuda(world.local_rank);
}

std::unique_ptr<Communicator> make_global(World::Impl& world, bool debug,
                                          const std::shared_ptr<Store>& monitor_store) {
  auto context = std::make_shared<detail::CommContext>(
      StoreGroup(std::make_shared<PrefixStore>("global", world.store), world.rank, world.size,
                 world.timeout, {}, "communicator 'global'"));
  context->device = world.device;
  context->backend = world.backend;
  context->name = "global";
  context->id = "global";
  context->monitor_store = std::make_shared<PrefixStore>("global", monitor_store);
  context->debug_collectives = debug;
  context->watchdog = world.watchdog;
  detail::HostContext host;
  if (world.backend != Backend::nccl) {
    detail::Placement& placement = context->placement;
    placement.member_nodes = world.nodes;
    placement.store_node = world.nodes.empty() ? -1 : world.nodes.front();
    for (std::size_t rank = 0; rank < world.nodes.size(); ++rank) {
      if (world.nodes[rank] == placement.store_node) {
        placement.store_node_ranks +=
            (placement.store_node_ranks.empty() ? "" : ", ") + std::to_string(rank);
      }
    }
    host.transport = world.host_transport;
    host.single_node_world = world.num_nodes == 1;
    host.store_host = world.store_host;
  }
  return detail::make_communicator(std::move(context), std::move(host));
}

}  // namespace

World::World(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
World::World(World&&) noexcept = default;
World& World::operator=(World&&) noexcept = default;
World::~World() {
  // Note [The store outlives its host's last call] (tcp_store.cpp).
  if (impl_ && impl_->served_store) impl_->served_store->wait_for_clients(impl_->timeout);
}

int World::rank() const noexcept {
  return impl_->rank;
}
int World::size() const noexcept {
  return impl_->size;
}
int World::local_rank() const noexcept {
  return impl_->local_rank;
}
int World::local_world_size() const noexcept {
  return impl_->local_world_size;
}
int World::node_rank() const noexcept {
  return impl_->node_rank;
}
int World::num_nodes() const noexcept {
  return impl_->num_nodes;
}
Device World::device() const noexcept {
  return impl_->device;
}
Backend World::backend() const noexcept {
  return impl_->backend;
}
Communicator& World::comm() noexcept {
  return *impl_->global;
}
Communicator& World::local() noexcept {
  return *impl_->local;
}
Communicator& World::cross() noexcept {
  return *impl_->cross;
}
Store& World::store() noexcept {
  return *impl_->store;
}
StoreGroup& World::group() noexcept {
  return *impl_->group;
}
std::chrono::milliseconds World::timeout() const noexcept {
  return impl_->timeout;
}

std::string World::describe() const {
  return "rank " + std::to_string(rank()) + " of " + std::to_string(size()) + " (local " +
         std::to_string(local_rank()) + " of " + std::to_string(local_world_size()) + ", node " +
         std::to_string(node_rank()) + " of " + std::to_string(num_nodes()) + ") on " +
         device().to_string() + ", " + std::string(to_string(backend()));
}

World init(WorldOptions options) {
  ignore_default_sigpipe();
  // Logging cannot throw and falls back to warn with a warning; a world refuses the bad value.
  if (const auto level = env::text(env::kLogLevel); level && !parse_log_level(*level)) {
    COHORT_FAIL(InvalidArgument, std::string(env::kLogLevel) + "='" + *level +
                                     "' is not a log level: set error, warn, info or debug");
  }
  const LaunchInfo launch = options.launch ? *options.launch : LaunchInfo::from_environment();
  auto impl = std::make_unique<World::Impl>();
  impl->rank = launch.rank;
  impl->size = launch.world_size;
  impl->timeout = timeout_from(options);
  if (!options.launch) {
    set_process_log_rank(launch.rank);  // ranks as threads set their own (run_local)
  }

  std::shared_ptr<Store> base =
      options.store ? options.store : connect_store(launch, impl->timeout);
  if (!options.store) {
    impl->store_host = launch.master_addr;
    impl->served_store = std::dynamic_pointer_cast<TcpStore>(base);
  }
  // A generation per init, so that a store reused for a second world never mixes their keys.
  const std::int64_t generation = base->add("cohort/generation/" + std::to_string(launch.rank), 1);
  const std::string scope = "cohort/world" + std::to_string(generation);
  // Waits in the world's store end once another rank publishes a failure
  // (Note [Waits that see another rank's failure]).
  impl->store = std::make_shared<detail::FailureAwareStore>(
      std::make_shared<PrefixStore>(scope, base), launch.rank);
  std::shared_ptr<Store> monitor_store =
      std::make_shared<PrefixStore>(scope, std::shared_ptr<Store>(base->clone()));

  // Note [A rank that fails to join]
  // A rank whose init throws from here on (a bad setting, a connection that fails) has no World
  // to report through, while the others wait for it in init's exchanges or in their first
  // collective, until their deadline. So it publishes its error as the world's failure, which
  // ends their store waits (Note [Waits that see another rank's failure]) and their collectives
  // (the watchdog) at once. A rank that fails because another did publishes nothing new: the
  // first failure wins.
  try {
    impl->group = std::make_unique<StoreGroup>(impl->store, impl->rank, impl->size, impl->timeout);
    find_place(*impl, launch, options.ranks_per_node);
    // Note [The backend, decided once]
    const BackendChoice family = resolve(options.backend);
    impl->host_transport = host_transport_from(options);
    impl->backend = family == BackendChoice::nccl
                        ? Backend::nccl
                        : detail::select_host_backend(impl->host_transport, impl->nodes);
    impl->device = choose_device(*impl, options.device);
    std::function<void()> bind_watchdog;
#if COHORT_WITH_CUDA
    if (impl->device.is_cuda()) {
      bind_watchdog = [device = impl->device] { detail::prepare_watchdog_thread(device); };
    }
#endif
    impl->watchdog = detail::Watchdog::start(monitor_store->clone(), impl->rank,
                                             std::move(bind_watchdog), launch.run_id);

    const bool debug = debug_from(options);
    impl->global = make_global(*impl, debug, monitor_store);
    impl->local = impl->global->split(impl->node_rank, impl->local_rank, "local");
    impl->cross = impl->global->split(impl->local_rank, impl->node_rank, "cross");
  } catch (const std::exception& error) {
    detail::publish_world_failure(
        *impl->store,
        "rank " + std::to_string(launch.rank) + " failed while joining the world: " + error.what());
    throw;
  }
  World world(std::move(impl));
  COHORT_LOG(info) << "joined: " << world.describe();
  return world;
}

void run_local(int ranks, const std::function<void(World&)>& fn, WorldOptions options) {
  COHORT_EXPECTS(ranks >= 1, "run_local needs at least one rank, got " + std::to_string(ranks));
  const auto timeout = timeout_from(options);
  std::shared_ptr<Store> store =
      options.store ? options.store : std::make_shared<MemoryStore>(timeout);
  options.backend = resolve(options.backend);  // once for every rank
  if (options.backend == BackendChoice::nccl) {
    COHORT_EXPECTS(ranks <= cuda_device_count() || env::boolean(env::kAllowSharedGpu),
                   "run_local with " + std::to_string(ranks) + " ranks on the NCCL backend needs " +
                       std::to_string(ranks) + " GPUs; " + std::to_string(cuda_device_count()) +
                       " are visible (or " + std::string(env::kAllowSharedGpu) +
                       "=1 to share GPUs round-robin)");
  }

  std::mutex mutex;
  std::exception_ptr first_error;
  std::vector<std::thread> threads;
  threads.reserve(static_cast<std::size_t>(ranks));
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      set_thread_log_rank(r);
      std::optional<World> world;
      try {
        WorldOptions mine = options;
        LaunchInfo launch;
        launch.rank = r;
        launch.world_size = ranks;
        launch.local_rank = r;
        launch.local_world_size = ranks;
        launch.run_id = "run_local";
        mine.launch = launch;
        mine.store = store;
        mine.timeout = timeout;
        world.emplace(init(std::move(mine)));
        fn(*world);
      } catch (...) {
        const std::exception_ptr error = std::current_exception();
        std::string what = "unknown exception";
        try {
          std::rethrow_exception(error);
        } catch (const std::exception& e) {
          what = e.what();
        } catch (...) {
        }
        {
          const std::lock_guard<std::mutex> lock(mutex);
          if (!first_error) {
            first_error = error;
          }
        }
        if (world) {
          // Tell the other ranks, so that they fail now rather than at their deadline.
          world->impl_->watchdog->report_failure("rank " + std::to_string(r) + " raised: " + what);
        }
      }
    });
  }
  for (auto& thread : threads) {
    thread.join();
  }
  if (first_error) {
    std::rethrow_exception(first_error);
  }
}

}  // namespace cohort
