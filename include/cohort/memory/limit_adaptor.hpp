#pragma once

/// @file
/// `LimitAdaptor`: caps the bytes allocated through it from an upstream.

#include <cohort/memory/memory_resource.hpp>

#include <atomic>
#include <cstddef>
#include <memory>

namespace cohort {

/// Forwards to `upstream` while the bytes in use through it stay within `limit_bytes`; beyond, it
/// throws `OutOfMemory` naming the bytes asked for, in use and allowed. The request is reserved
/// atomically before the upstream is called and given back if the upstream throws, so concurrent
/// callers never exceed the limit together. Counts requested bytes, not the upstream's rounding.
///
///     auto capped = std::make_shared<cohort::LimitAdaptor>(device_pool, 40ull << 30);
class LimitAdaptor final : public MemoryResource {
 public:
  /// @throws InvalidArgument when `upstream` is null.
  LimitAdaptor(std::shared_ptr<MemoryResource> upstream, std::size_t limit_bytes);

  std::size_t limit_bytes() const noexcept { return limit_bytes_; }
  /// Bytes reserved now (allocated, or being allocated by a call in progress).
  std::size_t used_bytes() const noexcept { return used_bytes_.load(std::memory_order_relaxed); }

  const std::shared_ptr<MemoryResource>& upstream() const noexcept { return upstream_; }

 private:
  void* do_allocate(std::size_t bytes, const Stream* stream) override;
  void do_deallocate(void* pointer, std::size_t bytes, const Stream* stream) noexcept override;
  std::size_t do_release_unused() override { return upstream_->release_unused(); }

  std::shared_ptr<MemoryResource> upstream_;
  std::size_t limit_bytes_;
  std::atomic<std::size_t> used_bytes_{0};
};

}  // namespace cohort
