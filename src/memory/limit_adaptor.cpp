#include "adaptor_detail.hpp"

#include <cohort/core/error.hpp>
#include <cohort/memory/limit_adaptor.hpp>
#include <cohort/memory/memory_report.hpp>

#include <utility>

namespace cohort {

LimitAdaptor::LimitAdaptor(std::shared_ptr<MemoryResource> upstream, std::size_t limit_bytes)
    : MemoryResource(detail::checked_upstream(upstream, "limit"), "limit"),
      upstream_(std::move(upstream)),
      limit_bytes_(limit_bytes) {}

void* LimitAdaptor::do_allocate(std::size_t bytes, const Stream* stream) {
  // Reserve with a compare-exchange so the counter never passes the limit, even for a moment.
  std::size_t in_use = used_bytes_.load(std::memory_order_relaxed);
  do {
    if (bytes > limit_bytes_ - in_use) {
      COHORT_FAIL(OutOfMemory, "cannot allocate " + std::to_string(bytes) + " bytes (" +
                                   format_bytes(bytes) + ") from " + name() + ": " +
                                   std::to_string(in_use) + " bytes (" + format_bytes(in_use) +
                                   ") in use of a limit of " + std::to_string(limit_bytes_) +
                                   " bytes (" + format_bytes(limit_bytes_) + ")");
    }
  } while (!used_bytes_.compare_exchange_weak(in_use, in_use + bytes, std::memory_order_relaxed));
  try {
    return allocate_from(*upstream_, bytes, stream);
  } catch (...) {
    used_bytes_.fetch_sub(bytes, std::memory_order_relaxed);
    throw;
  }
}

void LimitAdaptor::do_deallocate(void* pointer, std::size_t bytes, const Stream* stream) noexcept {
  deallocate_to(*upstream_, pointer, bytes, stream);
  used_bytes_.fetch_sub(bytes, std::memory_order_relaxed);
}

}  // namespace cohort
