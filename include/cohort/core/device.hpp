#pragma once

/// @file
/// Where memory lives and work runs: the host, or one CUDA device.

#include <compare>
#include <cstdint>
#include <string>

namespace cohort {

class Device {
 public:
  enum class Kind : std::uint8_t { host, cuda };

  /// The host (CPU) device.
  static constexpr Device host() noexcept { return Device(Kind::host, 0); }
  /// The CUDA device with ordinal `index` (as `cudaSetDevice` counts, after CUDA_VISIBLE_DEVICES).
  static constexpr Device cuda(int index) noexcept { return Device(Kind::cuda, index); }

  constexpr Kind kind() const noexcept { return kind_; }
  /// The CUDA ordinal; 0 for the host.
  constexpr int index() const noexcept { return index_; }
  constexpr bool is_host() const noexcept { return kind_ == Kind::host; }
  constexpr bool is_cuda() const noexcept { return kind_ == Kind::cuda; }

  /// "host" or "cuda:<index>".
  std::string to_string() const;

  friend constexpr bool operator==(Device, Device) noexcept = default;

 private:
  constexpr Device(Kind kind, int index) noexcept : kind_(kind), index_(index) {}
  Kind kind_;
  int index_;
};

/// Whether this build of cohort has the CUDA backend.
bool built_with_cuda() noexcept;

/// The number of CUDA devices this process can use; 0 when cohort was built without CUDA, when no
/// driver is installed, or when no device is visible. Never throws.
int cuda_device_count() noexcept;

/// Why `cuda_device_count()` is 0, in words a user can act on (empty when it is not).
std::string cuda_unavailable_reason();

}  // namespace cohort
