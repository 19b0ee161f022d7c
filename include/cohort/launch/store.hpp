#pragma once

/// @file
/// The key-value store that ranks meet through: one interface, three implementations.
///
/// - `TcpStore`: a server on rank 0's host (or in `cohortrun`, or the standalone `cohort-store`),
///   clients everywhere. For processes on one or many nodes.
/// - `FileStore`: files in a folder of a shared file system. For clusters without a free port.
/// - `MemoryStore`: a map in this process. For ranks that are threads (`run_local`, tests).
///
/// Values are byte strings (`std::string` used as a byte container; they may hold any bytes).
/// Every call that blocks has a deadline and throws `cohort::TimeoutError` naming the keys, the
/// store and the time waited. A store object is safe to use from several threads, but calls on
/// one object may be serialised; a thread that blocks on the store for long (a watchdog) should
/// use its own `clone()`.

#include <cohort/core/env.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace cohort {

using Milliseconds = std::chrono::milliseconds;

class Store {
 public:
  /// The deadline a blocking call uses when none is given: cohort's one default deadline.
  static constexpr Milliseconds kDefaultTimeout = ::cohort::kDefaultTimeout;

  virtual ~Store() = default;
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  /// Sets `key` to `value`, replacing any value it had, and wakes those waiting for it.
  virtual void set(std::string_view key, std::string_view value) = 0;

  /// The value of `key`, waiting until it is set or `timeout()` passes.
  /// @throws TimeoutError when the key is still absent at the deadline.
  std::string get(std::string_view key) { return get(key, timeout()); }
  virtual std::string get(std::string_view key, Milliseconds timeout) = 0;

  /// Waits until every key in `keys` is set. @throws TimeoutError naming the keys still absent.
  void wait(const std::vector<std::string>& keys) { wait(keys, timeout()); }
  virtual void wait(const std::vector<std::string>& keys, Milliseconds timeout) = 0;

  /// Whether every key in `keys` is set now; never blocks.
  virtual bool check(const std::vector<std::string>& keys) = 0;

  /// Adds `delta` to the integer stored at `key` (absent counts as 0) and returns the new value,
  /// atomically with respect to every other client. The value is stored as decimal text.
  /// @throws InvalidArgument when the key holds something that is not a decimal integer.
  virtual std::int64_t add(std::string_view key, std::int64_t delta) = 0;

  /// Atomically: if `key` holds `expected` (or is absent and `expected` is empty), sets it to
  /// `desired`. Returns the value the key holds afterwards: `desired` on success, the current
  /// value otherwise (empty if the key is absent).
  virtual std::string compare_set(std::string_view key, std::string_view expected,
                                  std::string_view desired) = 0;

  /// Deletes `key`; returns whether it existed.
  virtual bool remove(std::string_view key) = 0;

  /// A new handle to the same store, for use by another thread (its own connection or state).
  virtual std::unique_ptr<Store> clone() const = 0;

  /// A short description for error messages, e.g. "TcpStore(10.0.0.1:29500)".
  virtual std::string describe() const = 0;

  Milliseconds timeout() const noexcept { return timeout_; }
  void set_timeout(Milliseconds timeout) noexcept { timeout_ = timeout; }

 protected:
  Store() = default;
  explicit Store(Milliseconds timeout) : timeout_(timeout) {}

 private:
  Milliseconds timeout_ = kDefaultTimeout;
};

/// A store that passes every call to another, `base()`: the base of the stores that wrap one and
/// change its keys (`PrefixStore`, through `key_in_base`) or some of its calls (the world's
/// store, which looks for another rank's failure while it waits). A wrapper overrides what it
/// changes and `clone()`, which must wrap a clone of the base in the same way. The timeout starts
/// as the base's.
class ForwardingStore : public Store {
 public:
  /// `wrapper` names the deriving store in the error for a null `base`.
  /// @throws InvalidArgument when `base` is null.
  explicit ForwardingStore(std::shared_ptr<Store> base,
                           std::string_view wrapper = "ForwardingStore");

  void set(std::string_view key, std::string_view value) override;
  std::string get(std::string_view key, Milliseconds timeout) override;
  void wait(const std::vector<std::string>& keys, Milliseconds timeout) override;
  bool check(const std::vector<std::string>& keys) override;
  std::int64_t add(std::string_view key, std::int64_t delta) override;
  std::string compare_set(std::string_view key, std::string_view expected,
                          std::string_view desired) override;
  bool remove(std::string_view key) override;
  std::string describe() const override;
  using Store::get;
  using Store::wait;

  const std::shared_ptr<Store>& base() const noexcept { return base_; }

 protected:
  /// The key in the base store that `key` stands for: `key` itself unless a wrapper maps it.
  virtual std::string key_in_base(std::string_view key) const { return std::string(key); }

 private:
  std::vector<std::string> keys_in_base(const std::vector<std::string>& keys) const;

  std::shared_ptr<Store> base_;
};

/// A view of another store whose keys all start with `prefix` + "/". Collectives, communicators
/// and tests use one each so that their keys never collide.
class PrefixStore final : public ForwardingStore {
 public:
  PrefixStore(std::string prefix, std::shared_ptr<Store> base);

  std::unique_ptr<Store> clone() const override;
  std::string describe() const override;

 private:
  /// `prefix/key`. @throws InvalidArgument when `key` is empty.
  std::string key_in_base(std::string_view key) const override;

  std::string prefix_;
};

/// A barrier over `world_size` participants named `name`, built on `add` and `wait`.
/// @throws TimeoutError naming how many arrived when not all arrive before `timeout`.
void store_barrier(Store& store, std::string_view name, int world_size, Milliseconds timeout);

}  // namespace cohort
