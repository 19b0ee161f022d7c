#pragma once

// The process-wide registry behind memory_report(): Buffers record here (buffer.cpp).

#include <cohort/core/device.hpp>
#include <cohort/memory/memory_report.hpp>

#include <cstddef>

namespace cohort::detail {

/// Throws InvalidArgument when `device` has no slot in the registry (a CUDA ordinal at or past
/// kMaxReportedCudaDevices). Call before allocating so nothing leaks.
void check_reportable(Device device);

/// `bytes` more live memory of `category` on `device`; updates the peaks.
void record_allocation(MemoryCategory category, Device device, std::size_t bytes) noexcept;

/// `bytes` less live memory of `category` on `device`.
void record_deallocation(MemoryCategory category, Device device, std::size_t bytes) noexcept;

}  // namespace cohort::detail
