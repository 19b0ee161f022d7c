#include "adaptor_detail.hpp"

#include <cohort/memory/statistics_adaptor.hpp>

#include <utility>

namespace cohort {

StatisticsAdaptor::StatisticsAdaptor(std::shared_ptr<MemoryResource> upstream)
    : MemoryResource(detail::checked_upstream(upstream, "statistics"), "statistics"),
      upstream_(std::move(upstream)) {}

void StatisticsAdaptor::Counter::add(std::size_t amount) noexcept {
  const std::size_t now = current.fetch_add(amount, std::memory_order_relaxed) + amount;
  total.fetch_add(amount, std::memory_order_relaxed);
  std::size_t seen = peak.load(std::memory_order_relaxed);
  while (seen < now && !peak.compare_exchange_weak(seen, now, std::memory_order_relaxed)) {
  }
}

MemoryCounter StatisticsAdaptor::Counter::read() const noexcept {
  return MemoryCounter{current.load(std::memory_order_relaxed),
                       peak.load(std::memory_order_relaxed), total.load(std::memory_order_relaxed)};
}

MemoryStatistics StatisticsAdaptor::statistics() const noexcept {
  return MemoryStatistics{bytes_.read(), allocations_.read()};
}

void StatisticsAdaptor::reset_peaks() noexcept {
  for (Counter* counter : {&bytes_, &allocations_}) {
    counter->peak.store(counter->current.load(std::memory_order_relaxed),
                        std::memory_order_relaxed);
  }
}

void* StatisticsAdaptor::do_allocate(std::size_t bytes, const Stream* stream) {
  void* pointer = allocate_from(*upstream_, bytes, stream);
  bytes_.add(bytes);
  allocations_.add(1);
  return pointer;
}

void StatisticsAdaptor::do_deallocate(void* pointer, std::size_t bytes,
                                      const Stream* stream) noexcept {
  deallocate_to(*upstream_, pointer, bytes, stream);
  bytes_.current.fetch_sub(bytes, std::memory_order_relaxed);
  allocations_.current.fetch_sub(1, std::memory_order_relaxed);
}

}  // namespace cohort
