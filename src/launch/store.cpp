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

std::string system_error_text(int errnum) {
  return std::system_category().message(errnum);
}

void UniqueFd::reset(int fd) noexcept {
  // close() may fail with EINTR, but the descriptor is released anyway on Linux: never retry.
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

}  // namespace detail

ForwardingStore::ForwardingStore(std::shared_ptr<Store> base, std::string_view wrapper)
    : base_(std::move(base)) {
  COHORT_EXPECTS(base_ != nullptr, std::string(wrapper) + " needs a base store");
  set_timeout(base_->timeout());
}

std::vector<std::string> ForwardingStore::keys_in_base(const std::vector<std::string>& keys) const {
  std::vector<std::string> mapped;
  mapped.reserve(keys.size());
  for (const auto& key : keys) mapped.push_back(key_in_base(key));
  return mapped;
}

void ForwardingStore::set(std::string_view key, std::string_view value) {
  base_->set(key_in_base(key), value);
}

std::string ForwardingStore::get(std::string_view key, Milliseconds timeout) {
  return base_->get(key_in_base(key), timeout);
}

void ForwardingStore::wait(const std::vector<std::string>& keys, Milliseconds timeout) {
  base_->wait(keys_in_base(keys), timeout);
}

bool ForwardingStore::check(const std::vector<std::string>& keys) {
  return base_->check(keys_in_base(keys));
}

std::int64_t ForwardingStore::add(std::string_view key, std::int64_t delta) {
  return base_->add(key_in_base(key), delta);
}

std::string ForwardingStore::compare_set(std::string_view key, std::string_view expected,
                                         std::string_view desired) {
  return base_->compare_set(key_in_base(key), expected, desired);
}

bool ForwardingStore::remove(std::string_view key) {
  return base_->remove(key_in_base(key));
}

std::string ForwardingStore::describe() const {
  return base_->describe();
}

PrefixStore::PrefixStore(std::string prefix, std::shared_ptr<Store> base)
    : ForwardingStore(std::move(base), "PrefixStore"), prefix_(std::move(prefix)) {
  COHORT_EXPECTS(!prefix_.empty(), "PrefixStore needs a non-empty prefix");
}

std::string PrefixStore::key_in_base(std::string_view key) const {
  // Checked here: "prefix/" would otherwise turn an empty key into a valid one.
  detail::check_key(key);
  std::string full = prefix_;
  full.push_back('/');
  full.append(key);
  return full;
}

std::unique_ptr<Store> PrefixStore::clone() const {
  auto copy = std::make_unique<PrefixStore>(prefix_, std::shared_ptr<Store>(base()->clone()));
  copy->set_timeout(timeout());
  return copy;
}

std::string PrefixStore::describe() const {
  return base()->describe() + " under prefix " + detail::quote_bytes(prefix_);
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
