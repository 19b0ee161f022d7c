#include <cohort/core/error.hpp>
#include <cohort/core/logging.hpp>
#include <cohort/memory/memory_report.hpp>
#include <cohort/memory/memory_resource.hpp>

#include <cstdint>
#include <exception>
#include <utility>

namespace cohort {

MemoryResource::MemoryResource(Device device, bool host_accessible, bool device_accessible,
                               std::string name)
    : device_(device),
      host_accessible_(host_accessible),
      device_accessible_(device_accessible),
      name_(std::move(name)) {}

MemoryResource::MemoryResource(const MemoryResource& upstream, std::string_view adaptor)
    : MemoryResource(upstream.device_, upstream.host_accessible_, upstream.device_accessible_,
                     std::string(adaptor) + "(" + upstream.name_ + ")") {}

MemoryResource::~MemoryResource() {
  const std::size_t allocations = allocations_in_use();
  if (allocations != 0) {
    COHORT_LOG(warn) << "memory resource " << name_ << " destroyed with " << allocations
                     << " allocations (" << format_bytes(bytes_in_use())
                     << ") not freed; they are leaked";
  }
}

void* MemoryResource::allocate(std::size_t bytes, const Stream& stream) {
  return checked_allocate(bytes, &stream);
}

void* MemoryResource::allocate(std::size_t bytes) {
  return checked_allocate(bytes, nullptr);
}

void MemoryResource::deallocate(void* pointer, std::size_t bytes, const Stream& stream) noexcept {
  accounted_deallocate(pointer, bytes, &stream);
}

void MemoryResource::deallocate(void* pointer, std::size_t bytes) noexcept {
  accounted_deallocate(pointer, bytes, nullptr);
}

std::size_t MemoryResource::release_unused() {
  return do_release_unused();
}

void* MemoryResource::checked_allocate(std::size_t bytes, const Stream* stream) {
  if (bytes == 0) {
    return nullptr;  // Note [Empty allocations]
  }
  if (stream != nullptr && !host_accessible_) {
    COHORT_EXPECTS(stream->device().is_cuda(), "cannot order an allocation of device memory from " +
                                                   name_ + " on a host stream; pass a CUDA stream");
  }
  void* pointer = do_allocate(bytes, stream);
  if (pointer == nullptr || reinterpret_cast<std::uintptr_t>(pointer) % kAllocationAlignment != 0)
      [[unlikely]] {
    if (pointer != nullptr) {
      do_deallocate(pointer, bytes, stream);
    }
    COHORT_FAIL(Error, name_ + " returned a null or misaligned pointer for " +
                           std::to_string(bytes) + " bytes (a bug in the resource)");
  }
  bytes_in_use_.fetch_add(bytes, std::memory_order_relaxed);
  allocations_in_use_.fetch_add(1, std::memory_order_relaxed);
  return pointer;
}

void MemoryResource::accounted_deallocate(void* pointer, std::size_t bytes,
                                          const Stream* stream) noexcept {
  if (pointer == nullptr) {
    return;  // Note [Empty allocations]
  }
  do_deallocate(pointer, bytes, stream);
  bytes_in_use_.fetch_sub(bytes, std::memory_order_relaxed);
  allocations_in_use_.fetch_sub(1, std::memory_order_relaxed);
}

void* MemoryResource::allocate_from(MemoryResource& upstream, std::size_t bytes,
                                    const Stream* stream) {
  return stream != nullptr ? upstream.allocate(bytes, *stream) : upstream.allocate(bytes);
}

void MemoryResource::deallocate_to(MemoryResource& upstream, void* pointer, std::size_t bytes,
                                   const Stream* stream) noexcept {
  if (stream != nullptr) {
    upstream.deallocate(pointer, bytes, *stream);
  } else {
    upstream.deallocate(pointer, bytes);
  }
}

void MemoryResource::wait_for_stream(const Stream* stream) noexcept {
  if (stream == nullptr) {
    return;
  }
  try {
    stream->synchronize();
  } catch (const std::exception& error) {
    // A failed host stream has still finished (or skipped) all its work, so the block is free.
    // While an error unwinds, it is the stream's failure, reported where it arose: said once
    // (Note [One report per failure] in src/comm/watchdog.cpp), not at every block freed.
    if (std::uncaught_exceptions() > 0) {
      COHORT_LOG(debug) << "freeing memory after its stream failed: " << error.what();
    } else {
      COHORT_LOG(warn) << "freeing memory after its stream failed: " << error.what();
    }
  } catch (...) {
    COHORT_LOG(warn) << "freeing memory after its stream failed";
  }
}

}  // namespace cohort
