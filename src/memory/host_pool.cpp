#include <cohort/core/error.hpp>
#include <cohort/memory/host_pool.hpp>
#include <cohort/memory/host_resource.hpp>

#include <bit>
#include <utility>

namespace cohort {
namespace {

constexpr std::size_t kSmallestClass = 256;  // == kAllocationAlignment
constexpr std::size_t kLargestMaxBlock = std::size_t{1} << 48;

/// Note [Host pool size classes]: class 0 is 256 bytes; above it, four classes per power of two.
std::size_t class_index(std::size_t bytes) noexcept {
  if (bytes <= kSmallestClass) {
    return 0;
  }
  const auto exponent = static_cast<std::size_t>(std::bit_width(bytes - 1)) - 1;  // 2^e < bytes
  const std::size_t step_shift = exponent - 2;
  const std::size_t quarters = ((bytes - 1) >> step_shift) + 1;  // in 5..8
  return 4 * (exponent - 8) + (quarters - 4);
}

std::size_t class_bytes(std::size_t index) noexcept {
  if (index == 0) {
    return kSmallestClass;
  }
  const std::size_t exponent = 8 + (index - 1) / 4;
  const std::size_t quarters = (index - 1) % 4 + 5;
  return quarters << (exponent - 2);
}

std::shared_ptr<MemoryResource> upstream_or_default(std::shared_ptr<MemoryResource> upstream) {
  if (!upstream) {
    return std::make_shared<HostResource>();
  }
  COHORT_EXPECTS(upstream->host_accessible(),
                 "a host pool needs host-accessible memory, not " + upstream->name());
  return upstream;
}

}  // namespace

HostPoolResource::HostPoolResource(HostPoolOptions options)
    : HostPoolResource(upstream_or_default(std::move(options.upstream)), options) {}

HostPoolResource::HostPoolResource(std::shared_ptr<MemoryResource> upstream,
                                   const HostPoolOptions& options)
    : MemoryResource(upstream->device(), true, upstream->device_accessible(),
                     "host_pool(" + upstream->name() + ")"),
      upstream_(std::move(upstream)),
      max_block_bytes_(options.max_block_bytes),
      max_cached_bytes_(options.max_cached_bytes) {
  COHORT_EXPECTS(max_block_bytes_ >= kSmallestClass && max_block_bytes_ <= kLargestMaxBlock,
                 "HostPoolOptions::max_block_bytes must be in [256, 2^48], got " +
                     std::to_string(max_block_bytes_));
  class_count_ = class_index(max_block_bytes_) + 1;
  classes_ = std::make_unique<SizeClass[]>(class_count_);
}

HostPoolResource::~HostPoolResource() {
  do_release_unused();
}

std::size_t HostPoolResource::block_bytes(std::size_t bytes) const noexcept {
  return bytes > max_block_bytes_ ? bytes : class_bytes(class_index(bytes));
}

HostPoolStatistics HostPoolResource::statistics() const {
  HostPoolStatistics result;
  for (std::size_t index = 0; index < class_count_; ++index) {
    SizeClass& size_class = classes_[index];
    const std::lock_guard<std::mutex> lock(size_class.mutex);
    result.cached_blocks += size_class.free_blocks.size();
    result.cached_bytes += size_class.free_blocks.size() * class_bytes(index);
  }
  result.hits = hits_.load(std::memory_order_relaxed);
  result.misses = misses_.load(std::memory_order_relaxed);
  return result;
}

void* HostPoolResource::do_allocate(std::size_t bytes, const Stream* /*stream*/) {
  if (bytes > max_block_bytes_) {
    misses_.fetch_add(1, std::memory_order_relaxed);
    return upstream_->allocate(bytes);
  }
  const std::size_t index = class_index(bytes);
  const std::size_t size = class_bytes(index);
  SizeClass& size_class = classes_[index];
  {
    const std::lock_guard<std::mutex> lock(size_class.mutex);
    if (!size_class.free_blocks.empty()) {
      void* block = size_class.free_blocks.back();
      size_class.free_blocks.pop_back();
      cached_bytes_.fetch_sub(size, std::memory_order_relaxed);
      hits_.fetch_add(1, std::memory_order_relaxed);
      return block;
    }
  }
  misses_.fetch_add(1, std::memory_order_relaxed);
  try {
    return upstream_->allocate(size);
  } catch (const OutOfMemory&) {
    if (do_release_unused() == 0) {
      throw;
    }
    return upstream_->allocate(size);
  }
}

void HostPoolResource::do_deallocate(void* pointer, std::size_t bytes,
                                     const Stream* stream) noexcept {
  wait_for_stream(stream);
  if (bytes > max_block_bytes_) {
    upstream_->deallocate(pointer, bytes);
    return;
  }
  const std::size_t index = class_index(bytes);
  const std::size_t size = class_bytes(index);
  if (cached_bytes_.fetch_add(size, std::memory_order_relaxed) + size > max_cached_bytes_) {
    cached_bytes_.fetch_sub(size, std::memory_order_relaxed);
    upstream_->deallocate(pointer, size);
    return;
  }
  SizeClass& size_class = classes_[index];
  try {
    const std::lock_guard<std::mutex> lock(size_class.mutex);
    size_class.free_blocks.push_back(pointer);
  } catch (...) {  // the free list could not grow: give the block back instead
    cached_bytes_.fetch_sub(size, std::memory_order_relaxed);
    upstream_->deallocate(pointer, size);
  }
}

std::size_t HostPoolResource::do_release_unused() {
  std::size_t released = 0;
  for (std::size_t index = 0; index < class_count_; ++index) {
    std::vector<void*> blocks;
    {
      const std::lock_guard<std::mutex> lock(classes_[index].mutex);
      blocks.swap(classes_[index].free_blocks);
    }
    const std::size_t size = class_bytes(index);
    for (void* block : blocks) {
      upstream_->deallocate(block, size);
    }
    cached_bytes_.fetch_sub(blocks.size() * size, std::memory_order_relaxed);
    released += blocks.size() * size;
  }
  return released;
}

}  // namespace cohort
