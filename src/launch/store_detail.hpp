#pragma once

// Helpers shared by the store implementations (private to src/launch). The deadline helpers are
// core's and the words of store errors launch's detail headers, because others use them too.

#include <cohort/core/detail/deadline.hpp>
#include <cohort/launch/detail/store_messages.hpp>
#include <cohort/launch/store.hpp>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace cohort::detail {

using Clock = std::chrono::steady_clock;

/// @throws InvalidArgument when `key` is empty.
void check_key(std::string_view key);

/// Parses a decimal integer ("-12", "7"); nullopt for anything else (empty, spaces, overflow).
std::optional<std::int64_t> parse_integer(std::string_view text) noexcept;

/// What `add` does to a stored value, shared by every store so that they all fail alike.
/// Returns the new value, or sets `error` (a message without the "cohort: " prefix).
std::optional<std::int64_t> apply_add(std::string_view key, const std::string* current,
                                      std::int64_t delta, std::string& error);

/// The system's text for `errnum` (thread-safe, unlike strerror).
std::string system_error_text(int errnum);

/// An owned file descriptor, closed on destruction.
class UniqueFd {
 public:
  UniqueFd() noexcept = default;
  explicit UniqueFd(int fd) noexcept : fd_(fd) {}
  ~UniqueFd() { reset(); }
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    if (this != &other) reset(other.release());
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;

  int get() const noexcept { return fd_; }
  bool valid() const noexcept { return fd_ >= 0; }
  int release() noexcept {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void reset(int fd = -1) noexcept;

 private:
  int fd_ = -1;
};

}  // namespace cohort::detail
