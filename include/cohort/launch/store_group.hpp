#pragma once

/// @file
/// `StoreGroup`: the members of a group agreeing through a store: publish mine, wait for all,
/// name who is missing. Every rendezvous step above the launcher (grouping ranks into nodes,
/// splitting communicators, waiting for a backend's members, checking that every rank issues the
/// same collective or registered the same parameters) is one of its three calls.
///
/// Note [Store group rounds]
/// -------------------------
/// Each call is collective: every member makes the same calls with the same keys in the same
/// order. A key used again is a new round (`<key>/<round>/<member>`), so `barrier("step")` can be
/// called every step. When a member enters round n of a key it deletes its own value of round
/// n - 2: every member has read round n - 2 by then, since none could have finished round n - 1
/// before all had published in it, which they do only after reading round n - 2. So a key called
/// every step keeps at most two rounds in the store.

#include <cohort/launch/store.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace cohort {

class StoreGroup {
 public:
  /// A group of `size` members, this one `rank`, meeting under `store` (already scoped to the
  /// group: keys are used as they are). `global_ranks[m]` is member m's rank in the world, for
  /// messages (empty: the same as m). `what` names the group in messages ("world", "communicator
  /// 'local'"). Every wait ends at `timeout`.
  StoreGroup(std::shared_ptr<Store> store, int rank, int size, std::chrono::milliseconds timeout,
             std::vector<int> global_ranks = {}, std::string what = "world");

  int rank() const noexcept { return rank_; }
  int size() const noexcept { return size_; }
  std::chrono::milliseconds timeout() const noexcept { return timeout_; }
  /// The group's scoped store.
  Store& store() const noexcept { return *store_; }
  const std::shared_ptr<Store>& shared_store() const noexcept { return store_; }
  /// Member `member`'s rank in the world.
  int global_rank(int member) const noexcept;
  const std::string& what() const noexcept { return what_; }

  /// While a call waits for members, `check(key)` runs every `every`; whatever it throws ends
  /// the wait (a communicator aborted by its watchdog: Note [Connecting a Gloo mesh]). Without
  /// one a call waits for the members in one store wait.
  void set_interrupt(std::function<void(std::string_view key)> check,
                     std::chrono::milliseconds every = std::chrono::milliseconds(200));

  /// Publishes `value` and returns every member's, in member order.
  /// @throws TimeoutError "ranks X, Y never arrived after T" naming the world ranks that had not
  ///         published when the deadline passed.
  std::vector<std::string> all_gather(std::string_view key, std::string_view value);

  /// Waits until every member has arrived at `name`. @throws as `all_gather`.
  void barrier(std::string_view name);

  /// Checks that every member passes the same `value` for `what`.
  /// @throws InvalidArgument naming `what`, the first member that differs from this one and
  ///         both values; TimeoutError as `all_gather`.
  void check_same(std::string_view what, std::string_view value);

 private:
  std::shared_ptr<Store> store_;
  int rank_;
  int size_;
  std::chrono::milliseconds timeout_;
  std::vector<int> global_ranks_;
  std::string what_;
  std::function<void(std::string_view)> interrupt_;
  std::chrono::milliseconds interrupt_every_{0};
  std::map<std::string, std::uint64_t, std::less<>> rounds_;

  /// Waits for `keys` (member m's is keys[m]) until the deadline, checking the interrupt.
  /// @throws TimeoutError naming the members whose keys are missing.
  void wait_for_members(std::string_view key, const std::vector<std::string>& keys);
  /// Throws the TimeoutError naming the members whose keys are missing.
  [[noreturn]] void fail_never_arrived(std::string_view key, const std::vector<std::string>& keys);
};

}  // namespace cohort
