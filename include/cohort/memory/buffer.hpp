#pragma once

/// @file
/// `Buffer`: bytes owned from a `MemoryResource`, freed when the buffer goes away.

#include <cohort/core/device.hpp>
#include <cohort/core/device_span.hpp>
#include <cohort/core/stream.hpp>
#include <cohort/memory/memory_report.hpp>
#include <cohort/memory/memory_resource.hpp>

#include <cstddef>
#include <memory>
#include <optional>
#include <span>
#include <type_traits>

namespace cohort {

/// Move-only owner of `size_bytes()` bytes from a resource, which it keeps alive. It frees them
/// on destruction (or `reset()`): in stream order on its stream when it has one, else
/// synchronously (Note [Stream-ordered allocation]). Typed views check that the size is a whole
/// number of elements and that the kind of memory fits the view. Each buffer is accounted in the
/// memory report under its category and its resource's device.
///
///     cohort::Buffer weights(device_pool, n * sizeof(float), stream,
///                            cohort::MemoryCategory::parameters);
///     cohort::DeviceSpan<float> w = weights.device_view<float>();
///
/// A Buffer is not thread-safe; distinct buffers may be used from distinct threads.
class Buffer {
 public:
  /// An empty buffer: no memory, no resource, host device.
  Buffer() noexcept = default;

  /// `bytes` bytes from `resource`, synchronously (usable on every stream at once).
  /// @throws InvalidArgument when `resource` is null; OutOfMemory from the resource.
  Buffer(std::shared_ptr<MemoryResource> resource, std::size_t bytes,
         MemoryCategory category = MemoryCategory::other);

  /// `bytes` bytes from `resource` in stream order on `stream`, which the buffer keeps and frees
  /// on.
  /// @throws InvalidArgument when `resource` is null; OutOfMemory from the resource.
  Buffer(std::shared_ptr<MemoryResource> resource, std::size_t bytes, const Stream& stream,
         MemoryCategory category = MemoryCategory::other);

  ~Buffer() { reset(); }
  Buffer(Buffer&& other) noexcept;
  Buffer& operator=(Buffer&& other) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void* data() noexcept { return data_; }
  const void* data() const noexcept { return data_; }
  std::size_t size_bytes() const noexcept { return bytes_; }
  bool empty() const noexcept { return bytes_ == 0; }

  /// The resource's device; the host for a buffer without a resource.
  Device device() const noexcept;
  bool host_accessible() const noexcept;
  bool device_accessible() const noexcept;
  MemoryCategory category() const noexcept { return category_; }
  const std::shared_ptr<MemoryResource>& resource() const noexcept { return resource_; }
  /// The stream the buffer frees on; none for a synchronous buffer.
  const std::optional<Stream>& stream() const noexcept { return stream_; }

  /// From now on, free in stream order on `stream`. The caller orders `stream` after the work of
  /// the old stream that uses the buffer (an event), as for any use on a new stream.
  void set_stream(const Stream& stream) { stream_ = stream; }

  /// Frees the memory now (on the buffer's stream, if any) and leaves the buffer empty.
  void reset() noexcept;

  /// The bytes as elements of `T`, for host-accessible memory.
  /// @throws InvalidArgument when the memory is device-only, or the size or address does not fit
  ///         whole, aligned `T`s.
  template <typename T>
  std::span<T> view() {
    static_assert(kViewable<T>, "views need trivially copyable element types");
    check_view(sizeof(T), alignof(T), /*on_host=*/true);
    return std::span<T>(static_cast<T*>(data_), bytes_ / sizeof(T));
  }
  template <typename T>
  std::span<const T> view() const {
    static_assert(kViewable<T>, "views need trivially copyable element types");
    check_view(sizeof(T), alignof(T), /*on_host=*/true);
    return std::span<const T>(static_cast<const T*>(data_), bytes_ / sizeof(T));
  }

  /// The bytes as elements of `T` for CUDA kernels, for device-accessible memory.
  /// @throws InvalidArgument as `view`, or when the memory is host-only.
  template <typename T>
  DeviceSpan<T> device_view() {
    static_assert(kViewable<T>, "views need trivially copyable element types");
    check_view(sizeof(T), alignof(T), /*on_host=*/false);
    return DeviceSpan<T>(static_cast<T*>(data_), bytes_ / sizeof(T));
  }
  template <typename T>
  DeviceSpan<const T> device_view() const {
    static_assert(kViewable<T>, "views need trivially copyable element types");
    check_view(sizeof(T), alignof(T), /*on_host=*/false);
    return DeviceSpan<const T>(static_cast<const T*>(data_), bytes_ / sizeof(T));
  }

 private:
  template <typename T>
  static constexpr bool kViewable = std::is_trivially_copyable_v<T> && !std::is_reference_v<T>;

  void check_view(std::size_t element_size, std::size_t element_alignment, bool on_host) const;

  std::shared_ptr<MemoryResource> resource_;
  std::optional<Stream> stream_;
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
  MemoryCategory category_ = MemoryCategory::other;
};

}  // namespace cohort
