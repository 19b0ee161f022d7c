#pragma once

// A store that passes every call to another: the base of the tests' misbehaving stores, which
// override only the calls they change (a store that loses some keys, one slow to publish).

#include <cohort/launch/store.hpp>

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace cohort_test {

class ForwardingStore : public cohort::Store {
 public:
  explicit ForwardingStore(std::shared_ptr<cohort::Store> base) : base_(std::move(base)) {}

  void set(std::string_view key, std::string_view value) override { base_->set(key, value); }
  std::string get(std::string_view key, cohort::Milliseconds timeout) override {
    return base_->get(key, timeout);
  }
  void wait(const std::vector<std::string>& keys, cohort::Milliseconds timeout) override {
    base_->wait(keys, timeout);
  }
  bool check(const std::vector<std::string>& keys) override { return base_->check(keys); }
  std::int64_t add(std::string_view key, std::int64_t delta) override {
    return base_->add(key, delta);
  }
  std::string compare_set(std::string_view key, std::string_view expected,
                          std::string_view desired) override {
    return base_->compare_set(key, expected, desired);
  }
  bool remove(std::string_view key) override { return base_->remove(key); }
  std::string describe() const override { return base_->describe(); }

 protected:
  const std::shared_ptr<cohort::Store>& base() const noexcept { return base_; }

 private:
  std::shared_ptr<cohort::Store> base_;
};

}  // namespace cohort_test
