#pragma once

// Note [Waits that see another rank's failure]
// A rank blocked in the world's store (a benchmark waiting for the others' results, a rendezvous
// step) cannot see the failure another rank published under the world's "failure" key
// (Note [Watchdog]): without help it waits for its whole deadline, minutes, after the run is
// already lost. `FailureAwareStore` is the world's store: its blocking calls wait in slices and,
// between slices, look at the failure key; once a failure is there they throw at once with that
// rank's message. A key that is already set is returned at once, as before.

#include <cohort/launch/store.hpp>

#include <memory>
#include <string>
#include <vector>

namespace cohort::detail {

/// The key under the world's store where the first failure of any rank is published.
inline constexpr const char* kWorldFailureKey = "failure";

/// Publishes `message` as the world's failure unless one is there already (the first wins).
/// Returns false, without throwing, when the store cannot be reached.
bool publish_world_failure(Store& world_store, const std::string& message) noexcept;

class FailureAwareStore final : public ForwardingStore {
 public:
  /// `base` is the world's scoped store; `rank` names this rank in messages.
  FailureAwareStore(std::shared_ptr<Store> base, int rank);

  std::string get(std::string_view key, Milliseconds timeout) override;
  void wait(const std::vector<std::string>& keys, Milliseconds timeout) override;
  std::unique_ptr<Store> clone() const override;
  using Store::get;
  using Store::wait;

 private:
  /// Throws Error with the published failure when there is one.
  void throw_if_failed(const std::vector<std::string>& keys);

  int rank_;
};

}  // namespace cohort::detail
