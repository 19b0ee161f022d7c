#pragma once

// The host backend: collectives over Gloo, run on the communicator's own worker thread.

#include "comm/context.hpp"
#include "comm/gloo/mesh.hpp"  // the Gloo declarations
#include "comm/host/worker.hpp"

#include <cohort/comm/communicator.hpp>

#include <memory>
#include <optional>
#include <string>

namespace cohort::detail {

/// The Gloo TCP device for this process: bound to `GLOO_SOCKET_IFNAME` when set, else to
/// 127.0.0.1 when the world has one node (`local_only`), else to the local address of the route
/// to `store_host` (Note [Choosing the address]), else to this host's name.
std::shared_ptr<gloo::transport::Device> make_gloo_device(bool local_only,
                                                          const std::string& store_host);

/// The local address this host would send from to reach `host` (a name or an address), found
/// by connecting a UDP socket, which sends nothing; nullopt when `host` does not resolve or no
/// route reaches it.
std::optional<std::string> local_address_toward(const std::string& host);

/// Memory the worker's Gloo collectives run on (Note [Gloo on its own buffers]).
struct GlooScratch;

class GlooCommunicator final : public Communicator {
 public:
  /// Collective over the members of `context`: connects every pair of ranks through the store.
  GlooCommunicator(std::shared_ptr<CommContext> context,
                   std::shared_ptr<gloo::transport::Device> device);
  ~GlooCommunicator() override;

  void* native_handle() const noexcept override;

 protected:
  void run(const Call& call, const Stream& stream,
           const std::shared_ptr<WorkState>& work) override;
  std::unique_ptr<Communicator> do_split(int color, int key, std::string name) override;

 private:
  std::shared_ptr<gloo::transport::Device> device_;
  std::shared_ptr<gloo::Context> gloo_;
  std::shared_ptr<HostWorker> worker_;
  std::shared_ptr<GlooScratch> scratch_;
};

}  // namespace cohort::detail
