#pragma once

/// @file
/// cohort's exception hierarchy and the check macros that throw it.
///
/// Every error cohort raises is a `cohort::Error`. The subclasses say what kind of failure it was,
/// so a caller can catch what it can handle (a timeout, running out of memory) and let the rest
/// propagate. Messages name what failed, why, and where (file and line), and where possible what
/// to do about it.

#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>

namespace cohort {

/// The base of every exception cohort throws.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A caller passed something cohort cannot work with: a bad argument, a bad environment variable,
/// a malformed message. Nothing was changed by the failed call.
class InvalidArgument : public Error {
 public:
  using Error::Error;
};

/// A deadline passed: a store key that never appeared, a collective that never completed, a peer
/// that never connected.
class TimeoutError : public Error {
 public:
  using Error::Error;
};

/// An allocation failed or would exceed a configured limit. The message gives the bytes requested
/// and the state of the resource.
class OutOfMemory : public Error {
 public:
  using Error::Error;
};

/// A CUDA runtime call failed. The message names the call and the CUDA error.
class CudaError : public Error {
 public:
  using Error::Error;
};

/// An NCCL call failed. The message names the call, the NCCL error and NCCL's last error text.
class NcclError : public Error {
 public:
  using Error::Error;
};

namespace detail {

/// Builds "cohort: <what> (<file>:<line>)" and throws it as `E`.
template <typename E>
[[noreturn]] void throw_error(std::string_view what, const char* file, int line) {
  std::string message = "cohort: ";
  message.append(what);
  message.append(" (");
  message.append(file);
  message.push_back(':');
  message.append(std::to_string(line));
  message.push_back(')');
  throw E(message);
}

/// Formats a value for a comparison failure; strings are quoted so that empty ones show.
template <typename T>
std::string format_value(const T& value) {
  std::ostringstream out;
  if constexpr (std::is_convertible_v<const T&, std::string_view>) {
    out << '"' << std::string_view(value) << '"';
  } else if constexpr (std::is_same_v<T, char> || std::is_same_v<T, signed char> ||
                       std::is_same_v<T, unsigned char>) {
    out << static_cast<int>(value);
  } else {
    out << value;
  }
  return out.str();
}

template <typename A, typename B>
[[noreturn]] void throw_comparison(const char* expression, const A& a, const B& b,
                                   std::string_view message, const char* file, int line) {
  std::string what = "expected ";
  what.append(expression);
  what.append(", but got ");
  what.append(format_value(a));
  what.append(" and ");
  what.append(format_value(b));
  if (!message.empty()) {
    what.append(": ");
    what.append(message);
  }
  throw_error<InvalidArgument>(what, file, line);
}

}  // namespace detail
}  // namespace cohort

/// Throws `cohort::InvalidArgument` with `message` (anything convertible to std::string, evaluated
/// only on failure) when `condition` is false.
#define COHORT_EXPECTS(condition, message)                                                     \
  do {                                                                                         \
    if (!(condition)) [[unlikely]] {                                                           \
      ::cohort::detail::throw_error<::cohort::InvalidArgument>(std::string(message), __FILE__, \
                                                               __LINE__);                      \
    }                                                                                          \
  } while (0)

/// Throws `ErrorType` (a cohort::Error) with `message` when `condition` is false.
#define COHORT_CHECK(condition, ErrorType, message)                                       \
  do {                                                                                    \
    if (!(condition)) [[unlikely]] {                                                      \
      ::cohort::detail::throw_error<ErrorType>(std::string(message), __FILE__, __LINE__); \
    }                                                                                     \
  } while (0)

/// Throws `ErrorType` (a cohort::Error) with `message` unconditionally.
#define COHORT_FAIL(ErrorType, message) \
  ::cohort::detail::throw_error<ErrorType>(std::string(message), __FILE__, __LINE__)

#define COHORT_DETAIL_EXPECTS_CMP(a, op, b, message)                                \
  do {                                                                              \
    const auto& cohort_a_ = (a);                                                    \
    const auto& cohort_b_ = (b);                                                    \
    if (!(cohort_a_ op cohort_b_)) [[unlikely]] {                                   \
      ::cohort::detail::throw_comparison(#a " " #op " " #b, cohort_a_, cohort_b_,   \
                                         std::string(message), __FILE__, __LINE__); \
    }                                                                               \
  } while (0)

/// Comparison preconditions: on failure the message shows both values, then `message`.
#define COHORT_EXPECTS_EQ(a, b, message) COHORT_DETAIL_EXPECTS_CMP(a, ==, b, message)
#define COHORT_EXPECTS_NE(a, b, message) COHORT_DETAIL_EXPECTS_CMP(a, !=, b, message)
#define COHORT_EXPECTS_LT(a, b, message) COHORT_DETAIL_EXPECTS_CMP(a, <, b, message)
#define COHORT_EXPECTS_LE(a, b, message) COHORT_DETAIL_EXPECTS_CMP(a, <=, b, message)
#define COHORT_EXPECTS_GT(a, b, message) COHORT_DETAIL_EXPECTS_CMP(a, >, b, message)
#define COHORT_EXPECTS_GE(a, b, message) COHORT_DETAIL_EXPECTS_CMP(a, >=, b, message)
