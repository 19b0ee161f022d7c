#pragma once

/// @file
/// `MemoryResource`: the interface every allocator in cohort implements, held by `shared_ptr`.
///
/// Resources are shared handles with identity (not copyable, not movable): a `Buffer`, an adaptor
/// or a pool that allocates from a resource keeps a `std::shared_ptr` to it, so a resource lives
/// as long as any memory it handed out. Public `allocate`/`deallocate` are non-virtual: they
/// validate, handle empty requests and account once here; each resource implements the private
/// `do_allocate`/`do_deallocate`.
///
/// Note [Stream-ordered allocation]
/// `allocate(bytes, stream)` returns memory that is valid to use on `stream`, in stream order:
/// work enqueued on `stream` after the call may use it. Using it on another stream is undefined
/// behavior unless that stream first waits for `stream` (an `Event`). `deallocate(p, bytes,
/// stream)` frees in stream order: work already enqueued on `stream` may still use `p`, and the
/// memory may be handed out again for use on `stream` at once; work on other streams that uses
/// `p` must have finished or been ordered before the free (again with an event). A stream passed
/// to `deallocate` must outlive the free. This is rmm's contract.
///
/// Resources whose memory the host can reach (plain, pooled, pinned and managed host memory) are
/// not stream-ordered inside: `allocate` returns memory usable at once on every stream and on the
/// host, and `deallocate` first waits for the work enqueued on `stream` before releasing.
/// Device memory (the device pool) is truly stream-ordered: neither call blocks.
///
/// The overloads without a stream are synchronous: the memory is usable everywhere when
/// `allocate` returns, and `deallocate` requires every use of the memory to have finished.
///
/// Note [Empty allocations]
/// `allocate(0)` returns nullptr without calling the resource, and `deallocate(nullptr, 0)` does
/// nothing, on every resource. Empty allocations are not counted anywhere.

#include <cohort/core/device.hpp>
#include <cohort/core/stream.hpp>

#include <atomic>
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

namespace cohort {

/// Every non-empty allocation from a cohort resource starts at a multiple of this many bytes
/// (CUDA's allocation granularity; enough for any vector load).
inline constexpr std::size_t kAllocationAlignment = 256;

class MemoryResource {
 public:
  virtual ~MemoryResource();
  MemoryResource(const MemoryResource&) = delete;
  MemoryResource& operator=(const MemoryResource&) = delete;
  MemoryResource(MemoryResource&&) = delete;
  MemoryResource& operator=(MemoryResource&&) = delete;

  /// `bytes` bytes, aligned to `kAllocationAlignment`, valid on `stream` in stream order
  /// (Note [Stream-ordered allocation]); nullptr for 0 bytes.
  /// @throws OutOfMemory when the memory is not available (the message gives the bytes asked for
  ///         and the resource's state); InvalidArgument when device-only memory is asked for on a
  ///         host stream.
  [[nodiscard]] void* allocate(std::size_t bytes, const Stream& stream);

  /// Frees `pointer`, which `allocate` returned with the same `bytes`, in stream order on `stream`
  /// (Note [Stream-ordered allocation]). A null pointer is ignored. Never throws; CUDA failures
  /// are logged.
  void deallocate(void* pointer, std::size_t bytes, const Stream& stream) noexcept;

  /// Synchronous allocation: usable on every stream and on the host (when host-accessible) once
  /// this returns; nullptr for 0 bytes.
  /// @throws OutOfMemory as the stream-ordered overload.
  [[nodiscard]] void* allocate(std::size_t bytes);

  /// Synchronous free: every use of `pointer`, on every stream, must have finished.
  void deallocate(void* pointer, std::size_t bytes) noexcept;

  /// Returns memory the resource holds but no caller uses (cached blocks, pool reserves) to its
  /// upstream or the system, and says how many bytes that was (0 for resources that hold none).
  std::size_t release_unused();

  /// Where the memory lives: `Device::cuda(i)` for device and managed memory, the host for plain
  /// and pinned host memory.
  Device device() const noexcept { return device_; }
  /// Whether host code may read and write the memory.
  bool host_accessible() const noexcept { return host_accessible_; }
  /// Whether CUDA kernels may read and write the memory.
  bool device_accessible() const noexcept { return device_accessible_; }
  /// Whether allocations may be larger than the device's free memory: managed memory made with
  /// `ManagedOptions::allow_oversubscription`, whose pages then spill to the host. What such a
  /// resource can give is bounded by the device's free memory and the host's together
  /// (`check_memory_fits`). Adaptors report their upstream's.
  bool oversubscribable() const noexcept { return oversubscribable_; }
  /// A short description for messages and reports: "host_pool(host)", "device_pool(cuda:0)".
  const std::string& name() const noexcept { return name_; }

  /// Bytes in allocations made through this resource and not yet freed (as requested, not rounded).
  std::size_t bytes_in_use() const noexcept {
    return bytes_in_use_.load(std::memory_order_relaxed);
  }
  /// Allocations made through this resource and not yet freed.
  std::size_t allocations_in_use() const noexcept {
    return allocations_in_use_.load(std::memory_order_relaxed);
  }

 protected:
  MemoryResource(Device device, bool host_accessible, bool device_accessible, std::string name);
  /// For adaptors: the device, accessibility and oversubscription of `upstream`, named
  /// "<adaptor>(<upstream>)".
  MemoryResource(const MemoryResource& upstream, std::string_view adaptor);
  /// For resources whose allocations may exceed the device's free memory (`oversubscribable`).
  void set_oversubscribable(bool oversubscribable) noexcept {
    oversubscribable_ = oversubscribable;
  }

  /// Allocates from `upstream` on `stream`, or synchronously when `stream` is null.
  static void* allocate_from(MemoryResource& upstream, std::size_t bytes, const Stream* stream);
  /// Frees to `upstream` on `stream`, or synchronously when `stream` is null.
  static void deallocate_to(MemoryResource& upstream, void* pointer, std::size_t bytes,
                            const Stream* stream) noexcept;
  /// For resources that are not stream-ordered inside: waits for the work on `stream` (if any)
  /// so that a block can be released. An error a stream task raised is its owner's to report and
  /// is not rethrown here.
  static void wait_for_stream(const Stream* stream) noexcept;

 private:
  /// `bytes` > 0. `stream` is null for a synchronous request. Must return memory aligned to
  /// `kAllocationAlignment` or throw.
  virtual void* do_allocate(std::size_t bytes, const Stream* stream) = 0;
  /// `pointer` is non-null and came from `do_allocate(bytes, ...)`.
  virtual void do_deallocate(void* pointer, std::size_t bytes, const Stream* stream) noexcept = 0;
  virtual std::size_t do_release_unused() { return 0; }

  void* checked_allocate(std::size_t bytes, const Stream* stream);
  void accounted_deallocate(void* pointer, std::size_t bytes, const Stream* stream) noexcept;

  Device device_;
  bool host_accessible_;
  bool device_accessible_;
  bool oversubscribable_ = false;
  std::string name_;
  std::atomic<std::size_t> bytes_in_use_{0};
  std::atomic<std::size_t> allocations_in_use_{0};
};

}  // namespace cohort
