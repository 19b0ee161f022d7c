#pragma once

// Small helpers several test files share: elapsed time, substring assertions, the message of an
// expected exception, threads whose exceptions fail the test, and exact conversions between
// double and every element type (16-bit floats included).

#include <cohort/comm/types.hpp>
#include <cohort/core/env.hpp>
#include <cohort/core/float16.hpp>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <exception>
#include <optional>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>

namespace cohort_test {

using Clock = std::chrono::steady_clock;

/// The backend a host world of these tests gets on one host: ctest runs the host tests once per
/// transport (COHORT_HOST_TRANSPORT=shm, =gloo); unset means shared memory.
inline cohort::Backend expected_host_backend() {
  return cohort::env::text(cohort::env::kHostTransport) == "gloo" ? cohort::Backend::gloo
                                                                  : cohort::Backend::shm;
}

/// The top build folder ctest names in `COHORT_TEST_BINARY_DIR`; empty when it is not set.
inline std::string test_binary_dir() {
  return cohort::env::text(cohort::env::kTestBinaryDir).value_or("");
}

inline std::chrono::milliseconds elapsed_since(Clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
}

inline ::testing::AssertionResult contains(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "\"" << text << "\" does not contain \"" << part << "\"";
}

/// Waits for `event` to become true (checked every millisecond), for `deadline` at most: tests
/// wait for the event they need (a client blocked in the store, a bucket reduced) instead of
/// sleeping and hoping it happened. A failure names `what` when the deadline passes first.
template <typename Event>
::testing::AssertionResult wait_until(
    Event&& event, const std::string& what,
    std::chrono::milliseconds deadline = std::chrono::seconds(30)) {
  const auto start = Clock::now();
  while (!event()) {
    if (Clock::now() - start > deadline) {
      return ::testing::AssertionFailure()
             << what << " did not happen within " << deadline.count() << " ms";
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return ::testing::AssertionSuccess();
}

/// The message of the `E` that `action` throws; a test failure when it throws nothing or another
/// type.
template <typename E, typename Action>
std::string message_of(Action&& action) {
  try {
    action();
  } catch (const E& error) {
    return error.what();
  } catch (const std::exception& error) {
    ADD_FAILURE() << "threw another exception: " << error.what();
    return {};
  }
  ADD_FAILURE() << "threw nothing";
  return {};
}

/// Starts `body` on a new thread; an exception there fails the test instead of ending the process.
template <typename Body>
std::thread spawn(Body body) {
  return std::thread([body = std::move(body)]() mutable {
    try {
      body();
    } catch (const std::exception& error) {
      ADD_FAILURE() << "a test thread threw: " << error.what();
    }
  });
}

// Elements of any dtype from and to double (cohort/core/dtype.hpp).
using cohort::from_double;
using cohort::to_double;

/// Sets an environment variable for a scope and restores it after; only while no other thread
/// reads the environment (before the ranks of a test start).
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) {
      old_ = old;
    }
    ::setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (old_) {
      ::setenv(name_, old_->c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

}  // namespace cohort_test
