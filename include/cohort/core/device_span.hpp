#pragma once

/// @file
/// `DeviceSpan<T>`: a typed view of memory a CUDA kernel can reach, usable on host and device.

#include <cohort/core/host_device.hpp>

#include <cstddef>
#include <type_traits>

namespace cohort {

/// A pointer and an element count, like `std::span`, for device (or managed) memory. It can be
/// passed by value to a kernel. Elements may be dereferenced only where the memory is accessible:
/// in kernels for device memory, also on the host for managed memory.
template <typename T>
class DeviceSpan {
 public:
  using element_type = T;
  using value_type = std::remove_cv_t<T>;

  constexpr DeviceSpan() noexcept = default;
  COHORT_HOST_DEVICE constexpr DeviceSpan(T* data, std::size_t size) noexcept
      : data_(data), size_(size) {}

  /// A `DeviceSpan<T>` converts to a `DeviceSpan<const T>`.
  template <typename U>
  requires(std::is_same_v<const U, T> && !std::is_same_v<U, T>) COHORT_HOST_DEVICE
      constexpr DeviceSpan(DeviceSpan<U> other) noexcept  // NOLINT: implicit
      : data_(other.data()), size_(other.size()) {}

  COHORT_HOST_DEVICE constexpr T* data() const noexcept { return data_; }
  /// Elements, not bytes.
  COHORT_HOST_DEVICE constexpr std::size_t size() const noexcept { return size_; }
  COHORT_HOST_DEVICE constexpr std::size_t size_bytes() const noexcept { return size_ * sizeof(T); }
  COHORT_HOST_DEVICE constexpr bool empty() const noexcept { return size_ == 0; }
  COHORT_HOST_DEVICE constexpr T& operator[](std::size_t index) const noexcept {
    return data_[index];
  }
  /// Elements [offset, offset + count); the caller keeps it within the span.
  COHORT_HOST_DEVICE constexpr DeviceSpan subspan(std::size_t offset,
                                                  std::size_t count) const noexcept {
    return DeviceSpan(data_ + offset, count);
  }

 private:
  T* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace cohort
