#pragma once

/// @file
/// What a training process's memory is for: a process-wide registry of live bytes per category
/// (parameters, gradients, ...) and device, and a table a training program can print.
///
/// Every `Buffer` is accounted under the category it was created with (`other` by default) and its
/// resource's device, from construction until it frees its memory. Memory taken from a resource
/// directly (`MemoryResource::allocate`) is not in the report; wrap it in a `StatisticsAdaptor`
/// to count it. See docs/memory.md, "Memory placement".
///
///     std::cout << cohort::memory_report();

#include <cohort/core/device.hpp>
#include <cohort/core/format.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace cohort {

/// What memory is used for in training.
enum class MemoryCategory : std::uint8_t {
  parameters,       ///< model weights the forward pass reads
  gradients,        ///< gradients of the parameters
  optimizer_state,  ///< optimizer moments and fp32 master weights
  buckets,          ///< communication buckets that collectives read and write
  gathered,         ///< ZeRO-3's units while gathered: their parameters and gradients in flight
  activations,      ///< activations and workspaces of the forward and backward passes
  other,            ///< everything else (the default)
};

/// Every category, in declaration order.
inline constexpr MemoryCategory kAllMemoryCategories[] = {
    MemoryCategory::parameters, MemoryCategory::gradients, MemoryCategory::optimizer_state,
    MemoryCategory::buckets,    MemoryCategory::gathered,  MemoryCategory::activations,
    MemoryCategory::other};

/// "parameters", "gradients", "optimizer_state", "buckets", "gathered", "activations" or "other".
std::string_view to_string(MemoryCategory category) noexcept;

/// CUDA ordinals the registry can account (0 to kMaxReportedCudaDevices - 1).
inline constexpr int kMaxReportedCudaDevices = 64;

/// Live and peak bytes of one category on one device.
struct MemoryUsage {
  MemoryCategory category;
  Device device;
  std::size_t current_bytes;
  std::size_t peak_bytes;  ///< the most live at once since start or `reset_memory_peaks()`
};

/// Every (category, device) pair that has held memory (peak > 0), by device (host first), then
/// category. Values are read one by one while other threads may allocate; each is exact, the set
/// is not a snapshot of one instant.
std::vector<MemoryUsage> memory_usage();

/// The current and peak bytes of all categories together on `device`. The peak is the most live
/// at once, not the sum of the categories' peaks.
MemoryUsage memory_total(Device device);

/// Sets every peak (per category and the totals) to the current value, to measure one phase.
void reset_memory_peaks() noexcept;

/// A printable table of `memory_usage()`, one row per category and device plus a total per
/// device:
///
///     category         device        current           peak
///     parameters       cuda:0       1.00 GiB       1.00 GiB
///     total            cuda:0       1.00 GiB       1.50 GiB
std::string memory_report();

}  // namespace cohort
