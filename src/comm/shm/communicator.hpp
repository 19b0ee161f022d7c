#pragma once

// The host backend for ranks that share one host: collectives through a shared-memory segment
// (see Note [Shared-memory segment] and Note [Shared-memory collectives]), run on the
// communicator's own worker thread.

#include "comm/context.hpp"
#include "comm/host/context.hpp"
#include "comm/host/worker.hpp"

#include <cohort/comm/communicator.hpp>

#include <memory>
#include <string>

namespace cohort::detail {

class ShmEngine;

class ShmCommunicator final : public Communicator {
 public:
  /// Collective over the members of `context`, which must all run on this host.
  ShmCommunicator(std::shared_ptr<CommContext> context, std::shared_ptr<const HostContext> host);
  ~ShmCommunicator() override;

  /// The communicator's segment engine (no library handle exists to call directly).
  void* native_handle() const noexcept override;

 protected:
  void run(const Call& call, const Stream& stream, const std::shared_ptr<WorkState>& work) override;
  std::unique_ptr<Communicator> do_split(int color, int key, std::string name) override;

 private:
  std::shared_ptr<const HostContext> host_;
  std::shared_ptr<ShmEngine> engine_;
  std::shared_ptr<HostWorker> worker_;
};

}  // namespace cohort::detail
