#pragma once

// What every communicator shares with the watchdog, whatever its backend: identity, store,
// deadline, flight recorder, the abort switch and the collectives in flight. Its code, and the
// store exchanges of splitting, are in context.cpp. What only host communicators know (their
// transport, the Gloo device's address) is a HostContext (host/context.hpp). The context calls
// nothing of the watchdog, which reads contexts (Note [Context and watchdog]).

#include "comm/flight_recorder.hpp"
#include "comm/work_state.hpp"

#include <cohort/comm/communicator.hpp>
#include <cohort/launch/store.hpp>
#include <cohort/launch/store_group.hpp>

#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace cohort::detail {

class Watchdog;

/// Where the members of a communicator run, for naming a node whose every member is silent and
/// for choosing a host transport. Filled for host communicators; empty for NCCL's.
struct Placement {
  std::vector<int> member_nodes;  // the node of each member, by member rank
  int store_node = -1;            // the node of global rank 0, beside which the store runs, or -1
  std::string store_node_ranks;   // that node's global ranks, "0, 1", for messages
};

// Note [Context and watchdog]
// The watchdog reads contexts (their deadlines, their works in flight, their stores) and aborts
// them; a context never calls the watchdog. The one thing a context learns that the watchdog must
// act on, a completion probe that throws, it hands to whoever polls (`in_flight`'s
// `on_probe_error`): the watchdog passes a handler that fails the collective, other callers treat
// the work as unfinished and leave it to the watchdog's next tick. `watchdog` below is only held
// for the backends and the watchdog's own code, which register with it and report through it.

class CommContext {
 public:
  /// The members, their store scope (keys under this communicator's id) and the deadline are
  /// `group`'s; every store exchange between the members goes through it, and ends when the
  /// communicator is aborted.
  explicit CommContext(StoreGroup members);

  StoreGroup group;
  int rank() const noexcept { return group.rank(); }
  int size() const noexcept { return group.size(); }
  std::chrono::milliseconds timeout() const noexcept { return group.timeout(); }
  /// Scoped to this communicator; the issuing thread's.
  const std::shared_ptr<Store>& store() const noexcept { return group.shared_store(); }

  Device device = Device::host();
  Backend backend = Backend::gloo;
  std::string name;  // "global", "local", ...
  std::string id;    // unique within the world, the same on every member: store scope
  std::shared_ptr<Store> monitor_store;  // the same scope on the watchdog's own connection
  bool debug_collectives = false;
  std::shared_ptr<FlightRecorder> recorder = std::make_shared<FlightRecorder>();
  std::weak_ptr<Watchdog> watchdog;  // the World owns it; a detached worker may outlive it
  std::string backend_version;       // "Gloo 0.5.0", "NCCL 2.28.9"
  Placement placement;

  std::atomic<std::uint64_t> issued{0};
  std::uint64_t splits = 0;

  /// The global rank of member `member`, for messages.
  int global_rank(int member) const noexcept { return group.global_rank(member); }

  /// "communicator 'local' (rank 1 of 4, global rank 5)"; the versions are `versions_line`.
  std::string describe() const;

  // ---- abort ----
  /// Called once by the first abort; the backend installs it and clears it when destroyed.
  void set_backend_abort(std::function<void()> fn);
  /// Marks the communicator aborted with `reason` and runs the backend's abort once. The abort
  /// and its reason are logged as a warning, or only at debug level when `reported`: a failure
  /// this rank reported already (Note [One report per failure] in watchdog.cpp). Returns
  /// whether this call was the one that aborted.
  bool abort(const std::string& reason, bool reported = false) noexcept;
  /// `abort` in two halves (Note [Aborted before the waiter wakes]): `mark_aborted` only sets
  /// `aborted()` and the reason, at once, and returns whether this call was the first;
  /// `finish_abort` then runs the backend's abort (ncclCommAbort can take seconds), once.
  bool mark_aborted(const std::string& reason, bool reported = false) noexcept;
  void finish_abort() noexcept;
  bool aborted() const noexcept { return aborted_.load(); }
  std::string abort_reason() const;

  // ---- in-flight work ----
  void track(const std::shared_ptr<WorkState>& work);
  /// Fails every unfinished work with `error`.
  void fail_in_flight(const std::exception_ptr& error);
  /// Called with a work whose completion probe threw, and the probe's error.
  using ProbeErrorHandler = std::function<void(WorkState& work, const std::exception& error)>;
  /// Unfinished works, oldest first (drops finished ones), polling each one's probe. A probe that
  /// throws leaves its work in the list and goes to `on_probe_error` when given (Note [Context
  /// and watchdog]).
  std::vector<std::shared_ptr<WorkState>> in_flight(const ProbeErrorHandler& on_probe_error = {});
  /// How many works `track` has looked at so far: O(1) amortized per call (Note [Tracking
  /// in-flight work]), however many are in flight.
  std::uint64_t tracking_steps() const;

 private:
  std::atomic<bool> aborted_{false};
  mutable std::mutex mutex_;
  std::string abort_reason_;
  std::function<void()> backend_abort_;
  bool backend_abort_due_ = false;                // marked aborted, backend abort not yet run
  bool abort_reported_ = false;                   // the abort's reason was reported where it arose
  std::deque<std::shared_ptr<WorkState>> works_;  // Note [Tracking in-flight work]
  std::size_t sweep_at_ = 64;                     // works_ size that triggers a full sweep
  std::uint64_t tracking_steps_ = 0;
};

/// Which members of `context` pass the same color to a split, and what follows from it; the
/// same on every member. Collective: exchanges (color, key) through the store.
struct SplitPlan {
  bool member = false;            // false for a negative color
  int rank = 0;                   // in the new group
  std::vector<int> parent_ranks;  // members of the new group, as ranks of the parent, new order
  std::vector<int> global_ranks;  // the same members as global ranks
  std::string id;                 // store scope of the new communicator
  std::size_t largest_group = 0;  // members of the largest group any color makes (0: none)
};
SplitPlan plan_split(CommContext& context, int color, int key);

/// The context of the communicator `plan` describes: identity from the plan, the rest (device,
/// backend, deadline, watchdog, the placement of its members) from `parent`, store handles scoped
/// to the plan's id.
std::shared_ptr<CommContext> make_child_context(const CommContext& parent, const SplitPlan& plan,
                                                std::string name);

/// Checks, in a backend's constructor, that `context` was decided for `backend` (Note [The
/// backend, decided once] in world.cpp). @throws InvalidArgument naming both when it was not.
void expect_backend(const CommContext& context, Backend backend);

/// "cohort 0.1.0" plus the backend's version.
std::string versions_line(const CommContext& context);

}  // namespace cohort::detail
