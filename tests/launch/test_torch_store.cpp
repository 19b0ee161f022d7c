// The store suite (store_suite.hpp) over TorchStore, against PyTorch's own TCPStore server:
// one process for the whole suite, as PyTorch takes seconds to import
// (tests/launch/CMakeLists.txt).

#include <cohort/launch/torch_store.hpp>

#include "launch/store_suite.hpp"
#include "support/torch_store_server.hpp"

namespace cohort {
namespace {

using namespace store_suite;

/// TorchStore, a client of a fresh PyTorch TCPStore server: libuv's, PyTorch's default and what
/// torchrun's agent runs. make() gives nullptr, and `unavailable` says why, where PyTorch is not
/// installed.
struct TorchBackend {
  static constexpr const char* kName = "TorchStoreLibuv";
  std::string unavailable;
  std::shared_ptr<Store> make() {
    auto* servers = cohort_test::TorchStoreServers::instance(unavailable);
    if (servers == nullptr) return nullptr;
    return std::make_shared<TorchStore>("127.0.0.1", servers->new_server(), kStoreTimeout);
  }
  /// PyTorch's server cannot say when it holds a request: a head start makes it likely that the
  /// client already waits, which the blocking tests mean to exercise (never needed for them to
  /// pass).
  void wait_until_blocked(std::size_t) { std::this_thread::sleep_for(milliseconds(50)); }
};

INSTANTIATE_TYPED_TEST_SUITE_P(Torch, StoreTest, ::testing::Types<TorchBackend>, BackendName);

}  // namespace
}  // namespace cohort
