#pragma once

/// @file
/// `HostResource`: plain pageable host memory, aligned to `kAllocationAlignment`.

#include <cohort/memory/memory_resource.hpp>

namespace cohort {

/// Pageable host memory from `std::aligned_alloc`, aligned to 256 bytes. Host-accessible only
/// (CUDA copies from it are staged through pinned buffers by the driver). Not stream-ordered
/// inside: `deallocate(p, n, stream)` waits for `stream`, then frees (Note [Stream-ordered
/// allocation]). Thread-safe.
///
///     auto host = std::make_shared<cohort::HostResource>();
class HostResource final : public MemoryResource {
 public:
  HostResource();

 private:
  void* do_allocate(std::size_t bytes, const Stream* stream) override;
  void do_deallocate(void* pointer, std::size_t bytes, const Stream* stream) noexcept override;
};

}  // namespace cohort
