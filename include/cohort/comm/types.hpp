#pragma once

/// @file
/// The vocabulary of collectives: reduce operations, backends, and typed views of the memory
/// they work on.

#include <cohort/core/device.hpp>
#include <cohort/core/dtype.hpp>
#include <cohort/core/error.hpp>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>

namespace cohort {

enum class ReduceOp : std::uint8_t { sum, avg, min, max };

/// "sum", "avg", "min", "max".
std::string_view to_string(ReduceOp op) noexcept;

/// The collective engine behind a communicator.
enum class Backend : std::uint8_t {
  gloo,  ///< host memory, TCP between processes (Gloo)
  nccl,  ///< CUDA memory, NVLink/PCIe/network (NCCL)
  shm,   ///< host memory shared by the ranks of one host (/dev/shm)
  hierarchical,  ///< host memory across hosts: shared memory within each, Gloo between them
};

/// How host communicators move data. `automatic`: shared memory among ranks on one host,
/// Gloo between hosts, and the two combined (hierarchical all-reduce) for a communicator that
/// spans hosts with several ranks on one.
enum class HostTransport : std::uint8_t { automatic, shm, gloo };

std::string_view to_string(HostTransport transport) noexcept;

std::string_view to_string(Backend backend) noexcept;

enum class CollectiveOp : std::uint8_t {
  all_reduce,
  reduce_scatter,
  all_gather,
  broadcast,
  barrier
};

std::string_view to_string(CollectiveOp op) noexcept;

/// `count` elements of `dtype` at `data` on `device`. Non-owning: the memory must outlive every
/// collective that uses the view. Counts are in elements, never bytes.
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

  /// Elements [offset, offset + count) of this view.
  TensorView slice(std::size_t offset, std::size_t count) const {
    COHORT_EXPECTS(offset <= count_ && count <= count_ - offset,
                   "slice [" + std::to_string(offset) + ", " + std::to_string(offset + count) +
                       ") is outside a view of " + std::to_string(count_) + " elements");
    return TensorView(static_cast<std::byte*>(data_) + offset * size_of(dtype_), count, dtype_,
                      device_);
  }

 private:
  void* data_;
  std::size_t count_;
  DType dtype_;
  Device device_;
};

}  // namespace cohort
