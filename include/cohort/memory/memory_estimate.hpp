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

/// What `device` can still give, and where that number comes from.
struct MemoryAvailability {
  std::size_t bytes = 0;  ///< 0 when nothing could be read
  /// For messages: "MemAvailable (/proc/meminfo)", "the memory cgroup limit of
  /// /sys/fs/cgroup/memory/job (3.50 GiB, 120.00 MiB of it in use)", "cudaMemGetInfo's free
  /// memory on cuda:0".
  std::string source;
};

/// Bytes `device` can still give. The host: the kernel's MemAvailable (/proc/meminfo), or less
/// when a memory cgroup of this process (v1 or v2, itself or an ancestor: a container's limit, a
/// Slurm job's) leaves less room under its limit (Note [Memory cgroups] in
/// src/memory/cgroup_memory.hpp). A GPU: `cudaMemGetInfo`'s free bytes (a CUDA pool may hold
/// more, already reserved).
MemoryAvailability memory_availability(Device device);

/// `memory_availability(device).bytes`.
std::size_t available_memory(Device device);

/// Throws OutOfMemory before allocating `bytes` on `device` when they are more than
/// `available_memory(device)`. The message names `what` (what the bytes are for, say "DataParallel
/// parameter and gradient arenas of 1.2 M parameters"), both amounts in bytes and in words, where
/// the available amount comes from, and what to do. Nothing is refused when the available amount
/// cannot be read.
void check_memory_fits(Device device, std::size_t bytes, std::string_view what);

/// As `check_memory_fits`, for `ranks` ranks that each need `bytes_per_rank` from the same memory
/// (the ranks of one host under one container limit), against `available` measured before any of
/// them allocated. `advice` replaces the default advice at the end of the message when not empty.
void check_memory_fits(const MemoryAvailability& available, Device device,
                       std::size_t bytes_per_rank, int ranks, std::string_view what,
                       std::string_view advice = {});

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
