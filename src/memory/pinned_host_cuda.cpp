// Pinned host memory behind make_pinned_host_resource (CUDA builds only).

#include "cuda_detail.hpp"

#include <cohort/core/detail/cuda_check.hpp>
#include <cohort/core/error.hpp>
#include <cohort/memory/pinned_host.hpp>

#include <cuda_runtime_api.h>

namespace cohort {
namespace {

unsigned int host_alloc_flags(const PinnedHostOptions& options) {
  unsigned int flags = cudaHostAllocDefault;
  if (options.portable) {
    flags |= cudaHostAllocPortable;
  }
  if (options.write_combined) {
    flags |= cudaHostAllocWriteCombined;
  }
  return flags;
}

class PinnedHostResource final : public MemoryResource {
 public:
  explicit PinnedHostResource(const PinnedHostOptions& options)
      : MemoryResource(Device::host(), true, true,
                       options.write_combined ? "pinned_host(write_combined)" : "pinned_host"),
        flags_(host_alloc_flags(options)) {}

 private:
  void* do_allocate(std::size_t bytes, const Stream* /*stream*/) override {
    void* pointer = nullptr;
    const cudaError_t status = cudaHostAlloc(&pointer, bytes, flags_);
    if (status == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      COHORT_FAIL(OutOfMemory, "cannot allocate " + detail::bytes_in_words(bytes) + " from " +
                                   name() + ": cudaHostAlloc could not pin that much memory");
    }
    COHORT_CUDA_TRY(status);
    return pointer;  // page-aligned
  }

  void do_deallocate(void* pointer, std::size_t /*bytes*/, const Stream* stream) noexcept override {
    wait_for_stream(stream);
    COHORT_CUDA_CHECK_NOEXCEPT(cudaFreeHost(pointer));
  }

  unsigned int flags_;
};

}  // namespace

std::shared_ptr<MemoryResource> make_pinned_host_resource(const PinnedHostOptions& options) {
  // Pinning needs a CUDA context, so a device, although the memory is the host's.
  COHORT_EXPECTS(cuda_device_count() > 0,
                 "cannot create a pinned host resource: " + cuda_unavailable_reason());
  return std::make_shared<PinnedHostResource>(options);
}

}  // namespace cohort
