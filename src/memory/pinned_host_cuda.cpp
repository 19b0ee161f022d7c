// Pinned host memory behind make_pinned_host_resource (CUDA builds only).

#include "cuda_detail.hpp"

#include <cohort/core/detail/cuda_check.hpp>
#include <cohort/core/error.hpp>
#include <cohort/memory/pinned_host.hpp>

#include <cuda_runtime_api.h>

#include <optional>

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

// Note [Pinning without a new context]
// cudaHostAlloc and cudaFreeHost run in the calling thread's context, and a thread that bound no
// device would get GPU 0's, created for the purpose (Note [Restoring an unbound thread]), on
// every rank of the node. Pinned memory is reachable from every context (portable), so any
// device whose context the process already has will do: the calling thread's when it has one,
// else the first device in use.
/// Binds, for the scope, a device whose primary context is already active (nothing when the
/// calling thread's current device is one, or when no device is in use yet).
class BoundToADeviceInUse {
 public:
  BoundToADeviceInUse() {
    int current = 0;
    if (cudaGetDevice(&current) != cudaSuccess) {
      (void)cudaGetLastError();
      return;
    }
    if (detail::primary_context_active(current)) {
      return;
    }
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) {
      (void)cudaGetLastError();
      return;
    }
    for (int device = 0; device < count; ++device) {
      if (detail::primary_context_active(device)) {
        scope_.emplace(device);
        return;
      }
    }
  }

 private:
  std::optional<detail::CudaDeviceScope> scope_;
};

class PinnedHostResource final : public MemoryResource {
 public:
  explicit PinnedHostResource(const PinnedHostOptions& options)
      : MemoryResource(Device::host(), true, true,
                       options.write_combined ? "pinned_host(write_combined)" : "pinned_host"),
        flags_(host_alloc_flags(options)) {}

 private:
  void* do_allocate(std::size_t bytes, const Stream* /*stream*/) override {
    const BoundToADeviceInUse bound;  // Note [Pinning without a new context]
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
    const BoundToADeviceInUse bound;
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
