#include <cohort/launch/store_group.hpp>

#include <cohort/core/env.hpp>
#include <cohort/core/error.hpp>

#include "store_detail.hpp"

#include <algorithm>
#include <utility>

namespace cohort {

StoreGroup::StoreGroup(std::shared_ptr<Store> store, int rank, int size,
                       std::chrono::milliseconds timeout, std::vector<int> global_ranks,
                       std::string what)
    : store_(std::move(store)),
      rank_(rank),
      size_(size),
      timeout_(timeout),
      global_ranks_(std::move(global_ranks)),
      what_(std::move(what)) {
  COHORT_EXPECTS(store_ != nullptr, "a StoreGroup needs a store");
  COHORT_EXPECTS(size_ >= 1 && rank_ >= 0 && rank_ < size_,
                 "a StoreGroup's rank " + std::to_string(rank_) + " must be below its size " +
                     std::to_string(size_));
  COHORT_EXPECTS(global_ranks_.empty() || global_ranks_.size() == static_cast<std::size_t>(size_),
                 "a StoreGroup of " + std::to_string(size_) + " members got " +
                     std::to_string(global_ranks_.size()) + " global ranks");
  COHORT_EXPECTS(timeout_.count() > 0, "a StoreGroup's timeout must be positive");
}

int StoreGroup::global_rank(int member) const noexcept {
  if (member >= 0 && static_cast<std::size_t>(member) < global_ranks_.size()) {
    return global_ranks_[static_cast<std::size_t>(member)];
  }
  return member;
}

std::vector<std::string> StoreGroup::all_gather(std::string_view key, std::string_view value) {
  // Note [Store group rounds].
  auto [entry, inserted] = rounds_.try_emplace(std::string(key), 0);
  const std::uint64_t round = entry->second++;
  const std::string prefix = std::string(key) + "/";
  auto key_of = [&](std::uint64_t r, int member) {
    return prefix + std::to_string(r) + "/" + std::to_string(member);
  };
  if (round >= 2) store_->remove(key_of(round - 2, rank_));
  store_->set(key_of(round, rank_), value);

  std::vector<std::string> keys;
  keys.reserve(static_cast<std::size_t>(size_));
  for (int member = 0; member < size_; ++member) keys.push_back(key_of(round, member));
  wait_for_members(key, keys);
  std::vector<std::string> values;
  values.reserve(keys.size());
  for (const std::string& k : keys) values.push_back(store_->get(k, timeout_));
  return values;
}

void StoreGroup::set_interrupt(std::function<void(std::string_view key)> check,
                               std::chrono::milliseconds every) {
  COHORT_EXPECTS(every.count() > 0, "a StoreGroup's interrupt interval must be positive");
  interrupt_ = std::move(check);
  interrupt_every_ = every;
}

void StoreGroup::wait_for_members(std::string_view key, const std::vector<std::string>& keys) {
  if (interrupt_) interrupt_(key);
  detail::in_slices(
      timeout_, interrupt_ ? interrupt_every_ : timeout_,
      [&](std::chrono::milliseconds slice) { store_->wait(keys, slice); },
      [&] {
        if (interrupt_) interrupt_(key);
      },
      [&] { fail_never_arrived(key, keys); });
}

void StoreGroup::fail_never_arrived(std::string_view key, const std::vector<std::string>& keys) {
  std::string missing;
  int count = 0;
  for (int member = 0; member < size_; ++member) {
    bool arrived = false;
    try {
      arrived = store_->check({keys[static_cast<std::size_t>(member)]});
    } catch (const Error&) {
    }
    if (!arrived) {
      missing += (missing.empty() ? "" : ", ") + std::to_string(global_rank(member));
      ++count;
    }
  }
  COHORT_FAIL(TimeoutError,
              "rank " + std::to_string(global_rank(rank_)) + ", " + what_ + " at '" +
                  std::string(key) + "': " + (count == 1 ? "rank " : "ranks ") + missing +
                  " never arrived after " + env::describe_duration(timeout_) + " (through " +
                  store_->describe() +
                  "). Check that they started, reached the same point, and use the same store "
                  "(MASTER_ADDR, MASTER_PORT, " +
                  std::string(env::kStore) + ").");
}

void StoreGroup::barrier(std::string_view name) {
  all_gather(name, "1");
}

void StoreGroup::check_same(std::string_view what, std::string_view value) {
  const std::vector<std::string> values = all_gather(what, value);
  for (int member = 0; member < size_; ++member) {
    const std::string& theirs = values[static_cast<std::size_t>(member)];
    if (theirs != value) {
      COHORT_FAIL(InvalidArgument, std::string(what) + " differs between ranks of the " + what_ +
                                       ": rank " + std::to_string(global_rank(member)) + " has " +
                                       theirs + " but rank " + std::to_string(global_rank(rank_)) +
                                       " has " + std::string(value));
    }
  }
}

}  // namespace cohort
