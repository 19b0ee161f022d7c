#include <cohort/launch/memory_store.hpp>

#include <cohort/core/error.hpp>

#include "store_detail.hpp"

#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <utility>

namespace cohort {

struct MemoryStore::State {
  std::mutex mutex;
  /// Notified on every change that can satisfy a waiter (set, add, compare_set).
  std::condition_variable changed;
  std::map<std::string, std::string, std::less<>> values;

  bool has(std::string_view key) const { return values.find(key) != values.end(); }
};

MemoryStore::MemoryStore(Milliseconds timeout) : MemoryStore(std::make_shared<State>(), timeout) {}

MemoryStore::MemoryStore(std::shared_ptr<State> state, Milliseconds timeout)
    : Store(timeout), state_(std::move(state)) {}

MemoryStore::~MemoryStore() = default;

void MemoryStore::set(std::string_view key, std::string_view value) {
  detail::check_key(key);
  {
    std::lock_guard lock(state_->mutex);
    state_->values.insert_or_assign(std::string(key), std::string(value));
  }
  state_->changed.notify_all();
}

std::string MemoryStore::get(std::string_view key, Milliseconds timeout) {
  detail::check_key(key);
  const auto deadline = detail::deadline_after(timeout);
  std::unique_lock lock(state_->mutex);
  const bool found = state_->changed.wait_until(lock, deadline, [&] { return state_->has(key); });
  if (!found) {
    COHORT_FAIL(TimeoutError, detail::timeout_message(describe(), {std::string(key)}, timeout));
  }
  return state_->values.find(key)->second;
}

void MemoryStore::wait(const std::vector<std::string>& keys, Milliseconds timeout) {
  for (const auto& key : keys) detail::check_key(key);
  const auto deadline = detail::deadline_after(timeout);
  std::unique_lock lock(state_->mutex);
  const auto all_present = [&] {
    for (const auto& key : keys) {
      if (!state_->has(key)) return false;
    }
    return true;
  };
  if (state_->changed.wait_until(lock, deadline, all_present)) return;
  std::vector<std::string> missing;
  for (const auto& key : keys) {
    if (!state_->has(key)) missing.push_back(key);
  }
  COHORT_FAIL(TimeoutError, detail::timeout_message(describe(), missing, timeout));
}

bool MemoryStore::check(const std::vector<std::string>& keys) {
  for (const auto& key : keys) detail::check_key(key);
  std::lock_guard lock(state_->mutex);
  for (const auto& key : keys) {
    if (!state_->has(key)) return false;
  }
  return true;
}

std::int64_t MemoryStore::add(std::string_view key, std::int64_t delta) {
  detail::check_key(key);
  std::int64_t result = 0;
  {
    std::lock_guard lock(state_->mutex);
    const auto it = state_->values.find(key);
    std::string error;
    const auto sum =
        detail::apply_add(key, it == state_->values.end() ? nullptr : &it->second, delta, error);
    if (!sum) COHORT_FAIL(InvalidArgument, error + " in " + describe());
    result = *sum;
    state_->values.insert_or_assign(std::string(key), std::to_string(result));
  }
  state_->changed.notify_all();
  return result;
}

std::string MemoryStore::compare_set(std::string_view key, std::string_view expected,
                                     std::string_view desired) {
  detail::check_key(key);
  {
    std::lock_guard lock(state_->mutex);
    const auto it = state_->values.find(key);
    if (it == state_->values.end() ? !expected.empty() : it->second != expected) {
      return it == state_->values.end() ? std::string() : it->second;
    }
    state_->values.insert_or_assign(std::string(key), std::string(desired));
  }
  state_->changed.notify_all();
  return std::string(desired);
}

bool MemoryStore::remove(std::string_view key) {
  detail::check_key(key);
  std::lock_guard lock(state_->mutex);
  const auto it = state_->values.find(key);
  if (it == state_->values.end()) return false;
  state_->values.erase(it);
  return true;
}

std::unique_ptr<Store> MemoryStore::clone() const {
  return std::unique_ptr<Store>(new MemoryStore(state_, timeout()));
}

std::string MemoryStore::describe() const {
  return "MemoryStore";
}

}  // namespace cohort
