#pragma once

// Note [Hierarchical all-reduce]
// A host communicator that spans hosts, with the same number L > 1 of members on each, all-
// reduces in three steps: reduce-scatter within the host over shared memory (member i of the
// host ends with the host's sum of shard i, 1/L of the data), all-reduce of that shard across
// hosts over Gloo among the members with the same index on every host, all-gather within the
// host. Only 1/L of the data crosses the network from each rank, and the L transfers run in
// parallel. Sums are taken in both steps and avg divides once at the end (so integers truncate
// once, as on the flat path). Every other collective runs flat over Gloo.

#include "comm/context.hpp"
#include "comm/host/context.hpp"
#include "comm/host/worker.hpp"

#include <cohort/comm/communicator.hpp>

#include <memory>
#include <string>

namespace cohort::detail {

class HierarchicalCommunicator final : public Communicator {
 public:
  /// Collective over the members of `context` (its placement known, L members per node). Its
  /// parts are made through `host->make` (Note [Host factory]).
  HierarchicalCommunicator(std::shared_ptr<CommContext> context,
                           std::shared_ptr<const HostContext> host);
  ~HierarchicalCommunicator() override;

  /// The flat Gloo communicator's `gloo::Context*`.
  void* native_handle() const noexcept override;

  struct Parts;

 protected:
  void run(const Call& call, const Stream& stream, const std::shared_ptr<WorkState>& work) override;
  std::unique_ptr<Communicator> do_split(int color, int key, std::string name) override;

 private:
  std::shared_ptr<const HostContext> host_;
  std::shared_ptr<Parts> parts_;
  std::shared_ptr<HostWorker> worker_;
};

}  // namespace cohort::detail
