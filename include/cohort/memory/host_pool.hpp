#pragma once

/// @file
/// `HostPoolResource`: a thread-safe caching pool of host blocks in size classes.

#include <cohort/memory/memory_resource.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

namespace cohort {

struct HostPoolOptions {
  /// Where blocks come from: plain (`HostResource`, the default when null) or pinned host memory.
  /// Must be host-accessible.
  std::shared_ptr<MemoryResource> upstream = nullptr;
  /// Requests above this many bytes go straight to the upstream, uncached and unrounded.
  std::size_t max_block_bytes = std::size_t{64} << 20;
  /// At most this many free bytes stay cached; a block freed beyond it goes back upstream.
  std::size_t max_cached_bytes = std::size_t{1} << 30;
};

/// Counters of a `HostPoolResource`.
struct HostPoolStatistics {
  std::size_t cached_bytes = 0;   ///< free bytes held in the pool
  std::size_t cached_blocks = 0;  ///< free blocks held in the pool
  std::uint64_t hits = 0;         ///< allocations served from the cache
  std::uint64_t misses = 0;       ///< allocations that went to the upstream
};

/// Caches freed host blocks and hands them out again, so that allocate + free of a recently freed
/// size costs a lock and a vector push/pop instead of a call to the system allocator.
///
/// Note [Host pool size classes]
/// A request is rounded up to a size class: 256 bytes, then four classes per power of two
/// (320, 384, 448, 512, 640, 768, ...), so rounding wastes at most 25%. Each class has its own
/// mutex and free list; a block is reused only for a request of the same class. `deallocate`
/// finds the class from `bytes`, which is why it must get the size `allocate` was given. When the
/// upstream runs out of memory the pool releases its cache and retries once.
///
/// Not stream-ordered inside: `deallocate(p, n, stream)` waits for `stream` before caching the
/// block (Note [Stream-ordered allocation]).
class HostPoolResource final : public MemoryResource {
 public:
  /// @throws InvalidArgument for a device-only upstream or a `max_block_bytes` below 256 or above
  ///         2^48.
  explicit HostPoolResource(HostPoolOptions options = {});
  ~HostPoolResource() override;

  HostPoolStatistics statistics() const;

  /// The bytes a request of `bytes` takes from the upstream: its size class, or `bytes` itself
  /// above `max_block_bytes` (Note [Host pool size classes]).
  std::size_t block_bytes(std::size_t bytes) const noexcept;

  const std::shared_ptr<MemoryResource>& upstream() const noexcept { return upstream_; }

 private:
  struct alignas(64) SizeClass {
    std::mutex mutex;
    std::vector<void*> free_blocks;
  };

  HostPoolResource(std::shared_ptr<MemoryResource> upstream, const HostPoolOptions& options);

  void* do_allocate(std::size_t bytes, const Stream* stream) override;
  void do_deallocate(void* pointer, std::size_t bytes, const Stream* stream) noexcept override;
  std::size_t do_release_unused() override;

  std::shared_ptr<MemoryResource> upstream_;
  std::size_t max_block_bytes_;
  std::size_t max_cached_bytes_;
  std::size_t class_count_ = 0;
  std::unique_ptr<SizeClass[]> classes_;
  std::atomic<std::size_t> cached_bytes_{0};
  std::atomic<std::uint64_t> hits_{0};
  std::atomic<std::uint64_t> misses_{0};
};

}  // namespace cohort
