#pragma once

/// @file
/// How much memory a device can still give, and a refusal before an allocation that cannot fit:
/// a clear error naming what was needed and what was available, instead of a process killed by
/// the kernel's out-of-memory killer half a minute later (or a CUDA error deep in a step).

#include <cohort/core/device.hpp>

#include <cstddef>
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

}  // namespace cohort
