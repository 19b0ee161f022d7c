#include "memory_registry.hpp"

#include <cohort/core/error.hpp>

#include <array>
#include <atomic>
#include <iomanip>
#include <sstream>

namespace cohort {
namespace {

constexpr std::size_t kCategoryCount = std::size(kAllMemoryCategories);
constexpr std::size_t kTotalSlot = kCategoryCount;  // all categories of a device together
constexpr std::size_t kDeviceSlots = 1 + kMaxReportedCudaDevices;  // host, then cuda:0...

struct Counter {
  std::atomic<std::size_t> current{0};
  std::atomic<std::size_t> peak{0};

  void add(std::size_t bytes) noexcept {
    const std::size_t now = current.fetch_add(bytes, std::memory_order_relaxed) + bytes;
    std::size_t seen = peak.load(std::memory_order_relaxed);
    while (seen < now && !peak.compare_exchange_weak(seen, now, std::memory_order_relaxed)) {
    }
  }
  void subtract(std::size_t bytes) noexcept { current.fetch_sub(bytes, std::memory_order_relaxed); }
};

// Constant-initialized: usable from static destructors and before main.
constinit std::array<std::array<Counter, kCategoryCount + 1>, kDeviceSlots> registry{};

std::size_t device_slot(Device device) noexcept {
  return device.is_host() ? 0 : 1 + static_cast<std::size_t>(device.index());
}

Device slot_device(std::size_t slot) noexcept {
  return slot == 0 ? Device::host() : Device::cuda(static_cast<int>(slot - 1));
}

bool reportable(Device device) noexcept {
  return device.is_host() || (device.index() >= 0 && device.index() < kMaxReportedCudaDevices);
}

MemoryUsage read(std::size_t slot, std::size_t category_slot, MemoryCategory category) {
  const Counter& counter = registry[slot][category_slot];
  return MemoryUsage{category, slot_device(slot), counter.current.load(std::memory_order_relaxed),
                     counter.peak.load(std::memory_order_relaxed)};
}

}  // namespace

std::string_view to_string(MemoryCategory category) noexcept {
  switch (category) {
    case MemoryCategory::parameters:
      return "parameters";
    case MemoryCategory::gradients:
      return "gradients";
    case MemoryCategory::optimizer_state:
      return "optimizer_state";
    case MemoryCategory::buckets:
      return "buckets";
    case MemoryCategory::gathered:
      return "gathered";
    case MemoryCategory::activations:
      return "activations";
    case MemoryCategory::other:
      return "other";
  }
  return "unknown";
}

namespace detail {

void check_reportable(Device device) {
  COHORT_EXPECTS(reportable(device), "the memory report accounts CUDA devices 0 to " +
                                         std::to_string(kMaxReportedCudaDevices - 1) + ", not " +
                                         device.to_string());
}

void record_allocation(MemoryCategory category, Device device, std::size_t bytes) noexcept {
  if (!reportable(device)) {
    return;
  }
  auto& slots = registry[device_slot(device)];
  slots[static_cast<std::size_t>(category)].add(bytes);
  slots[kTotalSlot].add(bytes);
}

void record_deallocation(MemoryCategory category, Device device, std::size_t bytes) noexcept {
  if (!reportable(device)) {
    return;
  }
  auto& slots = registry[device_slot(device)];
  slots[static_cast<std::size_t>(category)].subtract(bytes);
  slots[kTotalSlot].subtract(bytes);
}

}  // namespace detail

std::vector<MemoryUsage> memory_usage() {
  std::vector<MemoryUsage> rows;
  for (std::size_t slot = 0; slot < kDeviceSlots; ++slot) {
    for (const MemoryCategory category : kAllMemoryCategories) {
      const MemoryUsage usage = read(slot, static_cast<std::size_t>(category), category);
      if (usage.peak_bytes > 0) {
        rows.push_back(usage);
      }
    }
  }
  return rows;
}

MemoryUsage memory_total(Device device) {
  detail::check_reportable(device);
  return read(device_slot(device), kTotalSlot, MemoryCategory::other);
}

void reset_memory_peaks() noexcept {
  for (auto& slots : registry) {
    for (Counter& counter : slots) {
      counter.peak.store(counter.current.load(std::memory_order_relaxed),
                         std::memory_order_relaxed);
    }
  }
}

std::string memory_report() {
  std::ostringstream out;
  const auto row = [&out](std::string_view category, const std::string& device,
                          const std::string& current, const std::string& peak) {
    out << std::left << std::setw(17) << category << std::setw(8) << device << std::right
        << std::setw(15) << current << std::setw(15) << peak << '\n';
  };
  row("category", "device", "current", "peak");
  bool any = false;
  for (std::size_t slot = 0; slot < kDeviceSlots; ++slot) {
    const MemoryUsage total = read(slot, kTotalSlot, MemoryCategory::other);
    if (total.peak_bytes == 0) {
      continue;
    }
    any = true;
    const std::string device = total.device.to_string();
    for (const MemoryCategory category : kAllMemoryCategories) {
      const MemoryUsage usage = read(slot, static_cast<std::size_t>(category), category);
      if (usage.peak_bytes > 0) {
        row(to_string(category), device, format_bytes(usage.current_bytes),
            format_bytes(usage.peak_bytes));
      }
    }
    row("total", device, format_bytes(total.current_bytes), format_bytes(total.peak_bytes));
  }
  if (!any) {
    out << "(no buffers allocated)\n";
  }
  return out.str();
}

}  // namespace cohort
