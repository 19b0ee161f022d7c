#include "comm/failure_aware_store.hpp"

#include <cohort/core/detail/deadline.hpp>
#include <cohort/core/error.hpp>
#include <cohort/launch/detail/store_messages.hpp>

#include <algorithm>
#include <chrono>
#include <utility>

namespace cohort::detail {
namespace {

// How often a blocked call looks at the world's failure key (Note [Watchdog]).
constexpr Milliseconds kSlice{200};

}  // namespace

bool publish_world_failure(Store& world_store, const std::string& message) noexcept {
  try {
    world_store.compare_set(kWorldFailureKey, "", message);
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

FailureAwareStore::FailureAwareStore(std::shared_ptr<Store> base, int rank)
    : ForwardingStore(std::move(base), "FailureAwareStore"), rank_(rank) {}

void FailureAwareStore::throw_if_failed(const std::vector<std::string>& keys) {
  if (!base()->check({kWorldFailureKey})) return;
  std::string waited_for;
  for (const auto& key : keys) waited_for += (waited_for.empty() ? "" : ", ") + quote_bytes(key);
  COHORT_FAIL(Error, "rank " + std::to_string(rank_) + " stopped waiting for " + waited_for +
                         " in " + base()->describe() +
                         ": another rank failed: " + base()->get(kWorldFailureKey, kSlice));
}

std::string FailureAwareStore::get(std::string_view key, Milliseconds timeout) {
  const std::vector<std::string> keys{std::string(key)};
  return in_slices(
      timeout, kSlice, [&](Milliseconds slice) { return base()->get(key, slice); },
      [&] { throw_if_failed(keys); },
      [&] { COHORT_FAIL(TimeoutError, timeout_message(base()->describe(), keys, timeout)); });
}

void FailureAwareStore::wait(const std::vector<std::string>& keys, Milliseconds timeout) {
  in_slices(
      timeout, kSlice, [&](Milliseconds slice) { base()->wait(keys, slice); },
      [&] { throw_if_failed(keys); },
      [&] {
        std::vector<std::string> missing;
        for (const auto& key : keys) {
          if (!base()->check({key})) missing.push_back(key);
        }
        COHORT_FAIL(TimeoutError, timeout_message(base()->describe(), missing, timeout));
      });
}

std::unique_ptr<Store> FailureAwareStore::clone() const {
  auto copy = std::make_unique<FailureAwareStore>(std::shared_ptr<Store>(base()->clone()), rank_);
  copy->set_timeout(timeout());
  return copy;
}

}  // namespace cohort::detail
