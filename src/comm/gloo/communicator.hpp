#pragma once

// The host backend: collectives over Gloo, run on the communicator's own worker thread.

#include "comm/context.hpp"
#include "comm/gloo/mesh.hpp"  // the Gloo declarations
#include "comm/host/context.hpp"
#include "comm/host/worker.hpp"

#include <cohort/comm/communicator.hpp>

#include <memory>
#include <string>

namespace cohort::detail {

/// What the worker and the abort share about the collective running (Note [Gloo on the caller's
/// buffers]).
struct GlooRun;

class GlooCommunicator final : public Communicator {
 public:
  /// Collective over the members of `context`: connects every pair of ranks through the store,
  /// over this process's Gloo device for the world `host` describes.
  GlooCommunicator(std::shared_ptr<CommContext> context, std::shared_ptr<const HostContext> host);
  ~GlooCommunicator() override;

  void* native_handle() const noexcept override;

 protected:
  void run(const Call& call, const Stream& stream, const std::shared_ptr<WorkState>& work) override;
  std::unique_ptr<Communicator> do_split(int color, int key, std::string name) override;

 private:
  std::shared_ptr<const HostContext> host_;
  std::shared_ptr<gloo::transport::Device> device_;
  std::shared_ptr<gloo::Context> gloo_;
  std::shared_ptr<HostWorker> worker_;
  std::shared_ptr<GlooRun> run_;
};

}  // namespace cohort::detail
