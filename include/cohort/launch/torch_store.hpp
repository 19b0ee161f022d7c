#pragma once

/// @file
/// `TorchStore`: a client of PyTorch's TCPStore, the store torchrun's agent hosts on
/// `MASTER_ADDR:MASTER_PORT` for its workers (`TORCHELASTIC_USE_AGENT_STORE=True`). Under
/// torchrun the ranks meet through it instead of starting a server of their own on a port that
/// torchrun already holds. See Note [PyTorch TCPStore protocol] in src/launch/torch_store.cpp.

#include <cohort/launch/store.hpp>

#include <memory>
#include <string>

namespace cohort {

class TorchStore final : public Store {
 public:
  /// Connects to the TCPStore server at `host:port`, retrying a refused connection until
  /// `timeout` (also the deadline of every blocking call).
  /// @throws TimeoutError when no server answers in time; Error when the host does not resolve.
  TorchStore(std::string host, int port, Milliseconds timeout = kDefaultTimeout);
  ~TorchStore() override;

  void set(std::string_view key, std::string_view value) override;
  std::string get(std::string_view key, Milliseconds timeout) override;
  void wait(const std::vector<std::string>& keys, Milliseconds timeout) override;
  bool check(const std::vector<std::string>& keys) override;
  std::int64_t add(std::string_view key, std::int64_t delta) override;
  std::string compare_set(std::string_view key, std::string_view expected,
                          std::string_view desired) override;
  bool remove(std::string_view key) override;
  std::unique_ptr<Store> clone() const override;
  /// "TorchStore(127.0.0.1:29500)".
  std::string describe() const override;

  using Store::get;
  using Store::wait;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace cohort
