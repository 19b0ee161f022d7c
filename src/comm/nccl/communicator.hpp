#pragma once

// The GPU backend: collectives over NCCL, enqueued on the caller's CUDA stream.

#include "comm/context.hpp"

#include <cohort/comm/communicator.hpp>

#include <memory>
#include <mutex>
#include <string>

namespace cohort::detail {

/// Makes `device` current for the calling thread (its CUDA device binding).
void bind_cuda_device(Device device);

/// Prepares the watchdog's thread of a rank on `device`, before its first CUDA call: binds the
/// device (Note [Watchdog device]) and puts the thread in relaxed graph-capture mode for good
/// (Note [Watchdog and graph capture] in watchdog.cpp).
void prepare_watchdog_thread(Device device);

/// "NCCL 2.28.9" (the library loaded at run time).
std::string nccl_version_string();

class NcclCommunicator final : public Communicator {
 public:
  /// Collective over the members of `context`: rank 0 creates the unique id, the store carries it,
  /// every rank initialises a non-blocking communicator and polls it against the deadline.
  explicit NcclCommunicator(std::shared_ptr<CommContext> context);
  ~NcclCommunicator() override;

  void* native_handle() const noexcept override;

  struct Handle;  // the ncclComm_t and its lock, shared with the watchdog's abort

 protected:
  void run(const Call& call, const Stream& stream, const std::shared_ptr<WorkState>& work) override;
  std::unique_ptr<Communicator> do_split(int color, int key, std::string name) override;

 private:
  NcclCommunicator(std::shared_ptr<CommContext> context, std::shared_ptr<Handle> handle);
  void install();

  std::shared_ptr<Handle> handle_;
};

}  // namespace cohort::detail
