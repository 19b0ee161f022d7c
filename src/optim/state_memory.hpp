#pragma once

// Private to the optimizers: where their small scalar blocks and state live, and the few memory
// operations they need on either backend (CUDA calls only in state_memory.cpp).

#include <cohort/core/device.hpp>
#include <cohort/core/stream.hpp>
#include <cohort/memory/memory_resource.hpp>

#include <cstddef>
#include <memory>

namespace cohort::detail {

/// The resource for optimizer state and scalars when the user names none: one device pool per
/// GPU, shared by every optimizer and loss scaler of the process, or plain host memory.
std::shared_ptr<MemoryResource> default_state_resource(Device device);

/// Whether memory from `resource` is CUDA managed memory (prefetched before each step).
bool is_managed(const MemoryResource& resource) noexcept;

class CudaDeviceScope;

/// Makes `device` current for the lifetime of the guard (nothing for the host): a
/// `CudaDeviceScope` for CUDA devices, usable from code compiled without CUDA's headers.
class CurrentDevice {
 public:
  explicit CurrentDevice(Device device);
  ~CurrentDevice();
  CurrentDevice(const CurrentDevice&) = delete;
  CurrentDevice& operator=(const CurrentDevice&) = delete;

 private:
  std::unique_ptr<CudaDeviceScope> scope_;
};

/// Copies `bytes` host bytes to `destination` (on `stream`'s device) in stream order, and waits.
void write_now(void* destination, const void* source, std::size_t bytes, const Stream& stream);

/// Waits for `stream`, then copies `bytes` from `source` (on `stream`'s device) to the host.
void read_after(void* destination, const void* source, std::size_t bytes, const Stream& stream);

/// Enqueues on `stream` a copy of `bytes` from `source` (on `stream`'s device) to host memory
/// (pinned, for a CUDA device, so that the copy is asynchronous); returns at once.
void copy_to_host_async(void* destination, const void* source, std::size_t bytes,
                        const Stream& stream);

/// Sets `bytes` at `destination` to zero in stream order.
void zero_async(void* destination, std::size_t bytes, const Stream& stream);

}  // namespace cohort::detail
