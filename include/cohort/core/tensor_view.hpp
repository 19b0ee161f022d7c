#pragma once

/// @file
/// `TensorView`: a typed, non-owning view of elements on a device, the currency of collectives,
/// kernels, optimizers and the sampler alike.

#include <cohort/core/device.hpp>
#include <cohort/core/device_span.hpp>
#include <cohort/core/dtype.hpp>
#include <cohort/core/error.hpp>

#include <cstddef>
#include <span>
#include <string>
#include <type_traits>

namespace cohort {

/// `count` elements of `dtype` at `data` on `device`. Non-owning: the memory must outlive every
/// collective that uses the view. Counts are in elements, never bytes.
///
///     std::span<float> w = dp.param(w1).span<float>();          // host memory, on the host
///     cohort::DeviceSpan<float> g = dp.grad(w1).as<float>();    // any memory, for a kernel
class TensorView {
 public:
  TensorView(void* data, std::size_t count, DType dtype, Device device)
      : data_(data), count_(count), dtype_(dtype), device_(device) {}

  /// A view of host memory.
  template <typename T>
  requires(!std::is_const_v<T>)
      TensorView(std::span<T> host)  // NOLINT(google-explicit-constructor): a span is a view too
      : TensorView(host.data(), host.size(), dtype_of<T>(), Device::host()) {}

  /// A view of `count` elements of type T at `data` on `device` (CUDA memory included).
  template <typename T>
  static TensorView of(T* data, std::size_t count, Device device) {
    return TensorView(data, count, dtype_of<T>(), device);
  }

  void* data() const noexcept { return data_; }
  std::size_t count() const noexcept { return count_; }
  DType dtype() const noexcept { return dtype_; }
  Device device() const noexcept { return device_; }
  std::size_t bytes() const noexcept { return count_ * size_of(dtype_); }

  /// The elements as `T` (const allowed), for a kernel or, on the host, for host code: a typed
  /// pointer and count on any device.
  /// @throws InvalidArgument when `T` is not the view's dtype.
  template <typename T>
  DeviceSpan<T> as() const {
    check_element(dtype_of<std::remove_cv_t<T>>(), "as");
    return DeviceSpan<T>(static_cast<T*>(data_), count_);
  }

  /// The elements as a `std::span<T>` for host code: the view must be host memory.
  /// @throws InvalidArgument when `T` is not the view's dtype, or the memory is a CUDA device's
  ///         (use `as<T>()` in a kernel, or copy it to the host).
  template <typename T>
  std::span<T> span() const {
    check_element(dtype_of<std::remove_cv_t<T>>(), "span");
    COHORT_EXPECTS(device_.is_host(),
                   "TensorView::span<" + std::string(to_string(dtype_)) + ">: the view is " +
                       device_.to_string() +
                       " memory, which host code cannot read; use as<T>() in a kernel on that "
                       "device, or copy the elements to the host");
    return std::span<T>(static_cast<T*>(data_), count_);
  }

  /// Elements [offset, offset + count) of this view.
  TensorView slice(std::size_t offset, std::size_t count) const {
    COHORT_EXPECTS(offset <= count_ && count <= count_ - offset,
                   "slice [" + std::to_string(offset) + ", " + std::to_string(offset + count) +
                       ") is outside a view of " + std::to_string(count_) + " elements");
    return TensorView(static_cast<std::byte*>(data_) + offset * size_of(dtype_), count, dtype_,
                      device_);
  }

 private:
  void check_element(DType requested, const char* accessor) const {
    COHORT_EXPECTS(requested == dtype_, std::string("TensorView::") + accessor + "<" +
                                            std::string(to_string(requested)) +
                                            ">: the view holds " + std::string(to_string(dtype_)) +
                                            " elements; ask for the C++ type of " +
                                            std::string(to_string(dtype_)) + " (for example " +
                                            accessor + "<float>() for f32)");
  }

  void* data_;
  std::size_t count_;
  DType dtype_;
  Device device_;
};

}  // namespace cohort
