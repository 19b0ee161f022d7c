#include <cohort/core/error.hpp>
#include <cohort/memory/host_resource.hpp>
#include <cohort/memory/memory_report.hpp>

#include <cstdlib>
#include <limits>

namespace cohort {

HostResource::HostResource() : MemoryResource(Device::host(), true, false, "host") {}

void* HostResource::do_allocate(std::size_t bytes, const Stream* /*stream*/) {
  constexpr std::size_t kLargest = std::numeric_limits<std::size_t>::max() - kAllocationAlignment;
  void* pointer = nullptr;
  if (bytes <= kLargest) {  // aligned_alloc wants a whole number of alignments
    const std::size_t alignments = (bytes + kAllocationAlignment - 1) / kAllocationAlignment;
    pointer = std::aligned_alloc(kAllocationAlignment, alignments * kAllocationAlignment);
  }
  if (pointer == nullptr) {
    COHORT_FAIL(OutOfMemory, "cannot allocate " + std::to_string(bytes) + " bytes (" +
                                 format_bytes(bytes) +
                                 ") of host memory: std::aligned_alloc failed");
  }
  return pointer;
}

void HostResource::do_deallocate(void* pointer, std::size_t /*bytes*/,
                                 const Stream* stream) noexcept {
  wait_for_stream(stream);
  std::free(pointer);
}

}  // namespace cohort
