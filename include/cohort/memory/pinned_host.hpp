#pragma once

/// @file
/// Page-locked (pinned) host memory: `cudaHostAlloc`.

#include <cohort/memory/memory_resource.hpp>

#include <memory>

namespace cohort {

struct PinnedHostOptions {
  /// Pinned for every CUDA context in the process (`cudaHostAllocPortable`), not only the
  /// current device's: what a multi-GPU process wants.
  bool portable = true;
  /// Write-combined (`cudaHostAllocWriteCombined`): faster host-to-device copies, but host reads
  /// are very slow. Only for buffers the host writes and never reads.
  bool write_combined = false;
};

/// Pinned host memory, reachable by the host and (through unified addressing) by kernels on any
/// device; asynchronous copies from and to it overlap with compute. Its device is the host.
/// Pinning is slow (milliseconds for large blocks), so put a `HostPoolResource` in front of it for
/// buffers that come and go. Not stream-ordered inside: `deallocate(p, n, stream)` waits for
/// `stream`, then calls `cudaFreeHost` (Note [Stream-ordered allocation]). Thread-safe.
///
/// @throws InvalidArgument when cohort was built without CUDA or no CUDA device is usable (pinning
///         needs a CUDA context).
std::shared_ptr<MemoryResource> make_pinned_host_resource(const PinnedHostOptions& options = {});

}  // namespace cohort
