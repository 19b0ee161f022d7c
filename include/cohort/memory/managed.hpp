#pragma once

/// @file
/// CUDA managed (unified) memory: the resource, and the one wrapper for prefetch and advice.
///
/// Every prefetch and advice call in cohort goes through `cohort::managed`, the only code that
/// knows the CUDA 12 and CUDA 13 signatures (CUDA 13 takes a `cudaMemLocation`) and whether a
/// device has `concurrentManagedAccess`. Where a device lacks it (Windows/WSL, some Jetsons) the
/// hints do nothing, with one warning per device, because they are only hints. On such devices
/// the host must also not touch managed memory while a kernel runs.
///
///     auto managed = cohort::make_managed_resource({.device = 0});
///     cohort::Buffer moments(managed, bytes, cohort::MemoryCategory::optimizer_state);
///     cohort::managed::set_preferred_location(moments, cohort::Device::cuda(0));
///     cohort::managed::prefetch(moments, cohort::Device::cuda(0), stream);  // before the step

#include <cohort/core/device.hpp>
#include <cohort/core/device_span.hpp>
#include <cohort/core/stream.hpp>
#include <cohort/memory/buffer.hpp>
#include <cohort/memory/memory_resource.hpp>

#include <cstddef>
#include <memory>
#include <optional>
#include <span>

namespace cohort {

struct ManagedOptions {
  /// The CUDA ordinal the memory is for: whose free memory bounds an allocation, and the
  /// resource's device in reports.
  int device = 0;
  /// Allow asking for more than `cudaMemGetInfo` says is free on `device`: pages then spill to
  /// the host and migrate on demand, often 2-100x slower. Off by default, when such a request
  /// throws OutOfMemory.
  bool allow_oversubscription = false;
  /// When set, every allocation is advised to prefer this location (see
  /// `managed::set_preferred_location`).
  std::optional<Device> preferred_location = std::nullopt;
};

/// Managed memory from `cudaMallocManaged(..., cudaMemAttachGlobal)`: reachable by the host and by
/// kernels on every device, migrated by page faults or by `managed::prefetch`. Not stream-ordered
/// inside: `deallocate(p, n, stream)` waits for `stream`, then calls `cudaFree`.
///
/// @throws (make) InvalidArgument when cohort was built without CUDA or `device` is not a valid
///         ordinal. (allocate) OutOfMemory with the bytes asked for and the device's free and total
///         memory when the request exceeds the free memory and oversubscription is off.
std::shared_ptr<MemoryResource> make_managed_resource(const ManagedOptions& options = {});

namespace detail {

enum class ManagedAdvice {
  set_preferred_location,
  unset_preferred_location,
  set_accessed_by,
  unset_accessed_by,
  set_read_mostly,
  unset_read_mostly,
};

void managed_prefetch(const void* data, std::size_t bytes, Device destination,
                      const Stream& stream);
void managed_advise(const void* data, std::size_t bytes, ManagedAdvice advice, Device location);

}  // namespace detail

namespace managed {

/// Whether `device` supports concurrent managed access (`cudaDevAttrConcurrentManagedAccess`):
/// probed once per device and cached. False when cohort was built without CUDA.
bool concurrent_access(int device);

/// Migrates the pages of a managed range to `destination` (the host or a device) in stream order
/// on `stream`, a CUDA stream: kernels enqueued after it find the pages resident. A no-op for an
/// empty range, or (with a warning once per device) where concurrent managed access is missing.
/// @throws InvalidArgument when the memory is not managed, `stream` is a host stream or cohort
///         was built without CUDA; CudaError when CUDA fails.
inline void prefetch(const Buffer& buffer, Device destination, const Stream& stream) {
  detail::managed_prefetch(buffer.data(), buffer.size_bytes(), destination, stream);
}
template <typename T>
void prefetch(std::span<T> elements, Device destination, const Stream& stream) {
  detail::managed_prefetch(elements.data(), elements.size_bytes(), destination, stream);
}
template <typename T>
void prefetch(DeviceSpan<T> elements, Device destination, const Stream& stream) {
  detail::managed_prefetch(elements.data(), elements.size_bytes(), destination, stream);
}

/// Advises that the pages should live at `location` (the host or a device) and be mapped
/// remotely, not migrated, when another processor touches them; `std::nullopt` removes the
/// advice. Good for optimizer state under oversubscription (prefer the host) and for memory one
/// device owns (prefer it). Same no-op cases and throws as `prefetch`.
inline void set_preferred_location(const Buffer& buffer, std::optional<Device> location) {
  detail::managed_advise(buffer.data(), buffer.size_bytes(),
                         location ? detail::ManagedAdvice::set_preferred_location
                                  : detail::ManagedAdvice::unset_preferred_location,
                         location.value_or(Device::host()));
}
template <typename T>
void set_preferred_location(std::span<T> elements, std::optional<Device> location) {
  detail::managed_advise(elements.data(), elements.size_bytes(),
                         location ? detail::ManagedAdvice::set_preferred_location
                                  : detail::ManagedAdvice::unset_preferred_location,
                         location.value_or(Device::host()));
}

/// Advises that `accessor` (the host or a device) will touch the pages, so it keeps a mapping to
/// them wherever they live instead of faulting; `enable = false` removes the advice. For a peer GPU
/// that reads a buffer, or the host reading metrics.
inline void set_accessed_by(const Buffer& buffer, Device accessor, bool enable = true) {
  detail::managed_advise(
      buffer.data(), buffer.size_bytes(),
      enable ? detail::ManagedAdvice::set_accessed_by : detail::ManagedAdvice::unset_accessed_by,
      accessor);
}
template <typename T>
void set_accessed_by(std::span<T> elements, Device accessor, bool enable = true) {
  detail::managed_advise(
      elements.data(), elements.size_bytes(),
      enable ? detail::ManagedAdvice::set_accessed_by : detail::ManagedAdvice::unset_accessed_by,
      accessor);
}

/// Advises that the pages are mostly read: each reader gets a read-only copy, and a write
/// anywhere invalidates all copies. For data several devices read (datasets, frozen tables);
/// very bad for weights that change every step. `enable = false` removes the advice.
inline void set_read_mostly(const Buffer& buffer, bool enable = true) {
  detail::managed_advise(
      buffer.data(), buffer.size_bytes(),
      enable ? detail::ManagedAdvice::set_read_mostly : detail::ManagedAdvice::unset_read_mostly,
      buffer.device());
}
template <typename T>
void set_read_mostly(std::span<T> elements, bool enable = true) {
  detail::managed_advise(
      elements.data(), elements.size_bytes(),
      enable ? detail::ManagedAdvice::set_read_mostly : detail::ManagedAdvice::unset_read_mostly,
      Device::host());
}

}  // namespace managed
}  // namespace cohort
