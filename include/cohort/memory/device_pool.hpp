#pragma once

/// @file
/// The stream-ordered device memory pool: `cudaMallocFromPoolAsync` on a pool of its own.

#include <cohort/memory/memory_resource.hpp>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>

namespace cohort {

struct DevicePoolOptions {
  /// The CUDA ordinal the memory lives on.
  int device = 0;
  /// Free memory the pool keeps across stream synchronizations instead of returning it to the
  /// driver (`cudaMemPoolAttrReleaseThreshold`). The default keeps everything, as training wants:
  /// the same sizes come back every step. `release_unused()` trims the pool explicitly.
  std::uint64_t release_threshold_bytes = std::numeric_limits<std::uint64_t>::max();
  /// Bytes to allocate and free once at creation, so the first steps do not pay for growth.
  std::size_t initial_pool_bytes = 0;
};

/// A device-only, stream-ordered resource on a `cudaMemPool_t` created for it (not the device's
/// default pool, so its threshold and trimming affect no one else). `allocate(bytes, stream)` is
/// `cudaMallocFromPoolAsync` on `stream` and `deallocate(p, bytes, stream)` is `cudaFreeAsync`:
/// neither blocks (Note [Stream-ordered allocation]). The stream must be a CUDA stream on the
/// pool's device. The synchronous overloads allocate on a private stream and wait for it, and free
/// on that stream. Out-of-memory errors give the bytes asked for, the pool's used and reserved
/// bytes and the device's free and total memory. Thread-safe.
///
/// @throws InvalidArgument when cohort was built without CUDA or `device` is not a valid ordinal;
///         CudaError when the pool cannot be created.
std::shared_ptr<MemoryResource> make_device_pool_resource(const DevicePoolOptions& options = {});

}  // namespace cohort
