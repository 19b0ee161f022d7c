#include "memory_registry.hpp"

#include <cohort/core/error.hpp>
#include <cohort/memory/buffer.hpp>

#include <cstdint>
#include <utility>

namespace cohort {
namespace {

std::shared_ptr<MemoryResource> checked(std::shared_ptr<MemoryResource> resource) {
  COHORT_EXPECTS(resource != nullptr, "a Buffer needs a memory resource, got a null one");
  detail::check_reportable(resource->device());
  return resource;
}

}  // namespace

Buffer::Buffer(std::shared_ptr<MemoryResource> resource, std::size_t bytes, MemoryCategory category)
    : resource_(checked(std::move(resource))), bytes_(bytes), category_(category) {
  data_ = resource_->allocate(bytes_);
  detail::record_allocation(category_, resource_->device(), bytes_);
}

Buffer::Buffer(std::shared_ptr<MemoryResource> resource, std::size_t bytes, const Stream& stream,
               MemoryCategory category)
    : resource_(checked(std::move(resource))), stream_(stream), bytes_(bytes), category_(category) {
  data_ = resource_->allocate(bytes_, *stream_);
  detail::record_allocation(category_, resource_->device(), bytes_);
}

Buffer::Buffer(Buffer&& other) noexcept
    : resource_(std::move(other.resource_)),
      stream_(std::move(other.stream_)),
      data_(std::exchange(other.data_, nullptr)),
      bytes_(std::exchange(other.bytes_, 0)),
      category_(other.category_) {
  other.stream_.reset();
}

Buffer& Buffer::operator=(Buffer&& other) noexcept {
  if (this != &other) {
    reset();
    resource_ = std::move(other.resource_);
    stream_ = std::move(other.stream_);
    other.stream_.reset();
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
    category_ = other.category_;
  }
  return *this;
}

void Buffer::reset() noexcept {
  if (resource_ == nullptr) {
    return;
  }
  if (stream_) {
    resource_->deallocate(data_, bytes_, *stream_);
  } else {
    resource_->deallocate(data_, bytes_);
  }
  detail::record_deallocation(category_, resource_->device(), bytes_);
  resource_.reset();
  stream_.reset();
  data_ = nullptr;
  bytes_ = 0;
}

Device Buffer::device() const noexcept {
  return resource_ ? resource_->device() : Device::host();
}

bool Buffer::host_accessible() const noexcept {
  return resource_ == nullptr || resource_->host_accessible();
}

bool Buffer::device_accessible() const noexcept {
  return resource_ != nullptr && resource_->device_accessible();
}

void Buffer::check_view(std::size_t element_size, std::size_t element_alignment,
                        bool on_host) const {
  if (on_host) {
    COHORT_EXPECTS(host_accessible(), "cannot view memory from " + resource_->name() +
                                          " on the host: it is device-only; use device_view");
  } else {
    COHORT_EXPECTS(device_accessible(), "cannot make a device view of " +
                                            (resource_ ? "memory from " + resource_->name()
                                                       : std::string("an empty Buffer")) +
                                            ": it is not device-accessible; use view");
  }
  COHORT_EXPECTS(bytes_ % element_size == 0, "a Buffer of " + std::to_string(bytes_) +
                                                 " bytes is not a whole number of elements of " +
                                                 std::to_string(element_size) + " bytes");
  COHORT_EXPECTS(
      reinterpret_cast<std::uintptr_t>(data_) % element_alignment == 0,
      "a Buffer's data is not aligned to " + std::to_string(element_alignment) + " bytes");
}

}  // namespace cohort
