#include <cohort/launch/store.hpp>

#include <cohort/core/error.hpp>

#include "store_detail.hpp"

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <limits>
#include <system_error>
#include <thread>
#include <utility>

namespace cohort {
namespace detail {

void check_key(std::string_view key) {
  COHORT_EXPECTS(!key.empty(), "store keys must not be empty");
}

std::optional<std::int64_t> parse_integer(std::string_view text) noexcept {
  std::int64_t value = 0;
  const char* const end = text.data() + text.size();
  // from_chars accepts a leading '-' but no '+' and no spaces, which is the format add writes.
  const auto [stop, error] = std::from_chars(text.data(), end, value);
  if (text.empty() || error != std::errc() || stop != end) return std::nullopt;
  return value;
}

std::optional<std::int64_t> apply_add(std::string_view key, const std::string* current,
                                      std::int64_t delta, std::string& error) {
  std::int64_t value = 0;
  if (current != nullptr) {
    const auto parsed = parse_integer(*current);
    if (!parsed) {
      error = "cannot add to key " + quote_bytes(key) + ": its value " + quote_bytes(*current, 64) +
              " is not a decimal integer";
      return std::nullopt;
    }
    value = *parsed;
  }
  std::int64_t sum = 0;
  if (__builtin_add_overflow(value, delta, &sum)) {
    error = "adding " + std::to_string(delta) + " to key " + quote_bytes(key) + " (holding " +
            std::to_string(value) + ") overflows a 64-bit integer";
    return std::nullopt;
  }
  return sum;
}

std::string system_error_text(int errnum) { return std::system_category().message(errnum); }

void UniqueFd::reset(int fd) noexcept {
  // close() may fail with EINTR, but the descriptor is released anyway on Linux: never retry.
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

}  // namespace detail

PrefixStore::PrefixStore(std::string prefix, std::shared_ptr<Store> base)
    : prefix_(std::move(prefix)), base_(std::move(base)) {
  COHORT_EXPECTS(base_ != nullptr, "PrefixStore needs a base store");
  COHORT_EXPECTS(!prefix_.empty(), "PrefixStore needs a non-empty prefix");
  set_timeout(base_->timeout());
}

std::string PrefixStore::prefixed(std::string_view key) const {
  // Checked here: "prefix/" would otherwise turn an empty key into a valid one.
  detail::check_key(key);
  std::string full = prefix_;
  full.push_back('/');
  full.append(key);
  return full;
}

std::vector<std::string> PrefixStore::prefixed(const std::vector<std::string>& keys) const {
  std::vector<std::string> full;
  full.reserve(keys.size());
  for (const auto& key : keys) full.push_back(prefixed(key));
  return full;
}

void PrefixStore::set(std::string_view key, std::string_view value) {
  base_->set(prefixed(key), value);
}

std::string PrefixStore::get(std::string_view key, Milliseconds timeout) {
  return base_->get(prefixed(key), timeout);
}

void PrefixStore::wait(const std::vector<std::string>& keys, Milliseconds timeout) {
  base_->wait(prefixed(keys), timeout);
}

bool PrefixStore::check(const std::vector<std::string>& keys) {
  return base_->check(prefixed(keys));
}

std::int64_t PrefixStore::add(std::string_view key, std::int64_t delta) {
  return base_->add(prefixed(key), delta);
}

std::string PrefixStore::compare_set(std::string_view key, std::string_view expected,
                                     std::string_view desired) {
  return base_->compare_set(prefixed(key), expected, desired);
}

bool PrefixStore::remove(std::string_view key) { return base_->remove(prefixed(key)); }

std::unique_ptr<Store> PrefixStore::clone() const {
  auto copy = std::make_unique<PrefixStore>(prefix_, std::shared_ptr<Store>(base_->clone()));
  copy->set_timeout(timeout());
  return copy;
}

std::string PrefixStore::describe() const {
  return base_->describe() + " under prefix " + detail::quote_bytes(prefix_);
}

// Note [Reusable store barrier]
// A barrier name may be used any number of times, as long as every participant passes the same
// world_size each time. Arrivals are counted by one ever-growing counter, `<name>/arrived`; the
// k-th arrival (k from 1) belongs to generation g = (k - 1) / world_size, and the arrival that
// completes a generation sets `<name>/done/<g>`, which everyone of that generation waits for. A
// participant cannot arrive for generation g + 1 before generation g is complete, so the counter
// never mixes generations. When generation g completes, every participant has left generation
// g - 1, so its last arriver deletes `<name>/done/<g-1>`: a barrier keeps at most two keys.
void store_barrier(Store& store, std::string_view name, int world_size, Milliseconds timeout) {
  COHORT_EXPECTS(!name.empty(), "a store barrier needs a name");
  COHORT_EXPECTS_GE(world_size, 1, "a store barrier needs at least one participant");
  const std::string base(name);
  const std::string arrived_key = base + "/arrived";
  const auto size = static_cast<std::int64_t>(world_size);

  const std::int64_t arrival = store.add(arrived_key, 1);
  const std::int64_t generation = (arrival - 1) / size;
  const std::string done_key = base + "/done/" + std::to_string(generation);
  if (arrival % size == 0) {
    store.set(done_key, "1");
    if (generation > 0) store.remove(base + "/done/" + std::to_string(generation - 1));
    return;
  }
  try {
    store.wait({done_key}, timeout);
  } catch (const TimeoutError&) {
    std::string arrived_text = "an unknown number";
    try {
      const std::int64_t count = store.add(arrived_key, 0) - generation * size;
      arrived_text = std::to_string(std::clamp<std::int64_t>(count, 1, size));
    } catch (const Error&) {
      // The count only improves the message; the timeout is the error to report.
    }
    COHORT_FAIL(TimeoutError, "timed out after " + std::to_string(timeout.count()) +
                                  " ms in store barrier " + detail::quote_bytes(name) + ": " +
                                  arrived_text + " of " + std::to_string(world_size) +
                                  " participants arrived, in " + store.describe() +
                                  "; check that every rank reached this barrier");
  }
}

}  // namespace cohort
