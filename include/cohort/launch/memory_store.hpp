#pragma once

/// @file
/// A store held in this process's memory, for ranks that are threads.

#include <cohort/launch/store.hpp>

#include <memory>

namespace cohort {

/// Every clone shares the same map; the store lives while any clone does.
class MemoryStore final : public Store {
 public:
  explicit MemoryStore(Milliseconds timeout = kDefaultTimeout);
  ~MemoryStore() override;

  void set(std::string_view key, std::string_view value) override;
  std::string get(std::string_view key, Milliseconds timeout) override;
  void wait(const std::vector<std::string>& keys, Milliseconds timeout) override;
  bool check(const std::vector<std::string>& keys) override;
  std::int64_t add(std::string_view key, std::int64_t delta) override;
  std::string compare_set(std::string_view key, std::string_view expected,
                          std::string_view desired) override;
  bool remove(std::string_view key) override;
  std::unique_ptr<Store> clone() const override;
  std::string describe() const override;
  using Store::get;
  using Store::wait;

 private:
  struct State;
  MemoryStore(std::shared_ptr<State> state, Milliseconds timeout);
  std::shared_ptr<State> state_;
};

}  // namespace cohort
