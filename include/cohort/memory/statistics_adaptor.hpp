#pragma once

/// @file
/// `StatisticsAdaptor`: counts the bytes and allocations that pass through it to an upstream.

#include <cohort/memory/memory_resource.hpp>

#include <atomic>
#include <cstddef>
#include <memory>

namespace cohort {

/// Current, peak and total of one quantity.
struct MemoryCounter {
  std::size_t current = 0;  ///< live now
  std::size_t peak = 0;     ///< the most live at once since creation or `reset_peaks()`
  std::size_t total = 0;    ///< ever allocated
};

struct MemoryStatistics {
  MemoryCounter bytes;        ///< requested bytes (before any rounding by the upstream)
  MemoryCounter allocations;  ///< non-empty allocations (Note [Empty allocations])
};

/// Forwards to `upstream` and keeps `MemoryStatistics`. Lock-free and thread-safe; each counter is
/// exact, and a `statistics()` taken while other threads allocate may mix moments.
///
///     auto counted = std::make_shared<cohort::StatisticsAdaptor>(pool);
///     const auto peak = counted->statistics().bytes.peak;  // after the phase to measure
class StatisticsAdaptor final : public MemoryResource {
 public:
  /// @throws InvalidArgument when `upstream` is null.
  explicit StatisticsAdaptor(std::shared_ptr<MemoryResource> upstream);

  MemoryStatistics statistics() const noexcept;

  /// Sets both peaks to the current values, to measure one phase.
  void reset_peaks() noexcept;

  const std::shared_ptr<MemoryResource>& upstream() const noexcept { return upstream_; }

 private:
  struct Counter {
    std::atomic<std::size_t> current{0};
    std::atomic<std::size_t> peak{0};
    std::atomic<std::size_t> total{0};
    void add(std::size_t amount) noexcept;
    MemoryCounter read() const noexcept;
  };

  void* do_allocate(std::size_t bytes, const Stream* stream) override;
  void do_deallocate(void* pointer, std::size_t bytes, const Stream* stream) noexcept override;
  std::size_t do_release_unused() override { return upstream_->release_unused(); }

  std::shared_ptr<MemoryResource> upstream_;
  Counter bytes_;
  Counter allocations_;
};

}  // namespace cohort
