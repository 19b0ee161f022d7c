#pragma once

/// @file
/// How much memory a device can still give, and a refusal before an allocation that cannot fit:
/// a clear error naming what was needed and what was available, instead of a process killed by
/// the kernel's out-of-memory killer half a minute later (or a CUDA error deep in a step).

#include <cohort/core/device.hpp>

#include <cstddef>
#include <string>
#include <string_view>

namespace cohort {

/// Bytes `device` can still give. The host: the kernel's MemAvailable (/proc/meminfo), less when
/// the process's cgroup has a memory limit closer to its usage. A GPU: `cudaMemGetInfo`'s free
/// bytes (a CUDA pool may hold more, already reserved). 0 when nothing can be read.
std::size_t available_memory(Device device);

/// Throws OutOfMemory before allocating `bytes` on `device` when they are more than
/// `available_memory(device)`. The message names `what` (what the bytes are for, say "DataParallel
/// parameter and gradient arenas of 1.2 M parameters"), both amounts in bytes and in words, and
/// what to do. Nothing is refused when the available amount cannot be read.
void check_memory_fits(Device device, std::size_t bytes, std::string_view what);

class MemoryResource;

/// As above, for `bytes` allocated from `resource`: bounded by its device's available memory, or,
/// for a resource that may oversubscribe its GPU (`MemoryResource::oversubscribable`: managed
/// memory made with `allow_oversubscription`), by the GPU's free memory and the host's available
/// memory together, since its pages spill to the host.
void check_memory_fits(const MemoryResource& resource, std::size_t bytes, std::string_view what);

namespace detail {

/// The decision of `check_memory_fits`, from the amounts it read (0: could not be read).
struct MemoryFit {
  bool fits = true;
  std::size_t available = 0;  ///< what bounds the request; 0 when nothing could be read
  std::string where;          ///< what `available` is, in words, for the message
};

/// Whether `bytes` fit in what a resource on a GPU (`device_is_cuda`) or the host can give:
/// `device_available` bytes, plus `host_available` when the resource oversubscribes a GPU. An
/// amount that cannot be read (0) refuses nothing: for an oversubscribing resource, either
/// amount unread leaves the bound unknown.
MemoryFit memory_fit(std::size_t bytes, bool device_is_cuda, bool oversubscribable,
                     std::size_t device_available, std::size_t host_available);

}  // namespace detail
}  // namespace cohort
