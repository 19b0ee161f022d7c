// Managed memory (CUDA builds only): the resource, and the one place that calls
// cudaMemPrefetchAsync and cudaMemAdvise, whose signatures changed in CUDA 13.

#include "cuda_detail.hpp"

#include <cohort/core/detail/cuda_check.hpp>
#include <cohort/core/error.hpp>
#include <cohort/core/logging.hpp>
#include <cohort/memory/managed.hpp>

#include <cuda_runtime_api.h>

#include <memory>
#include <mutex>
#include <vector>

namespace cohort {
namespace {

// ---- Capabilities: probed once per device, cached for the process ----

struct ManagedCapabilities {
  std::vector<bool> concurrent_access;  // per CUDA ordinal
  std::unique_ptr<std::once_flag[]> warned;
};

const ManagedCapabilities& capabilities() {
  static const ManagedCapabilities probed = [] {
    ManagedCapabilities result;
    const int count = cuda_device_count();
    result.warned = std::make_unique<std::once_flag[]>(static_cast<std::size_t>(count));
    for (int device = 0; device < count; ++device) {
      int value = 0;
      if (cudaDeviceGetAttribute(&value, cudaDevAttrConcurrentManagedAccess, device) !=
          cudaSuccess) {
        (void)cudaGetLastError();
        value = 0;
      }
      result.concurrent_access.push_back(value != 0);
    }
    return result;
  }();
  return probed;
}

/// Whether hints for `device` can be given; warns once per device when they cannot.
bool hints_supported(int device) {
  if (managed::concurrent_access(device)) {
    return true;
  }
  if (device < 0 || static_cast<std::size_t>(device) >= capabilities().concurrent_access.size()) {
    return false;  // not a device this process sees; callers check ordinals first
  }
  std::call_once(capabilities().warned[static_cast<std::size_t>(device)], [device] {
    COHORT_LOG(warn) << "cuda:" << device
                     << " lacks concurrent managed access (cudaDevAttrConcurrentManagedAccess): "
                        "managed-memory prefetches and advice are skipped, and the host must not "
                        "touch managed memory while a kernel runs";
  });
  return false;
}

// ---- Locations: the CUDA 12 / CUDA 13 difference lives here and in the two calls below ----

#if CUDART_VERSION >= 13000
cudaMemLocation to_cuda_location(Device location) {
  cudaMemLocation result{};
  result.type = location.is_host() ? cudaMemLocationTypeHost : cudaMemLocationTypeDevice;
  result.id = location.is_host() ? 0 : location.index();  // the id of a host location is ignored
  return result;
}
#else
int to_cuda_location(Device location) {
  return location.is_host() ? cudaCpuDeviceId : location.index();
}
#endif

/// The device that allocated a managed range; throws InvalidArgument for any other memory.
int managed_owner(const void* data) {
  cudaPointerAttributes attributes{};
  const cudaError_t status = cudaPointerGetAttributes(&attributes, data);
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
  }
  COHORT_EXPECTS(status == cudaSuccess && attributes.type == cudaMemoryTypeManaged,
                 "prefetch and advice need managed memory (cudaMallocManaged, "
                 "make_managed_resource); this pointer is not");
  return attributes.device;
}

void check_location(Device location) {
  if (location.is_cuda()) {
    detail::check_cuda_ordinal(location.index());
  }
}

cudaMemoryAdvise to_cuda_advice(detail::ManagedAdvice advice) {
  switch (advice) {
    case detail::ManagedAdvice::set_preferred_location:
      return cudaMemAdviseSetPreferredLocation;
    case detail::ManagedAdvice::unset_preferred_location:
      return cudaMemAdviseUnsetPreferredLocation;
    case detail::ManagedAdvice::set_accessed_by:
      return cudaMemAdviseSetAccessedBy;
    case detail::ManagedAdvice::unset_accessed_by:
      return cudaMemAdviseUnsetAccessedBy;
    case detail::ManagedAdvice::set_read_mostly:
      return cudaMemAdviseSetReadMostly;
    case detail::ManagedAdvice::unset_read_mostly:
      return cudaMemAdviseUnsetReadMostly;
  }
  COHORT_FAIL(InvalidArgument, "unknown managed-memory advice");
}

bool takes_location(detail::ManagedAdvice advice) {
  return advice == detail::ManagedAdvice::set_preferred_location ||
         advice == detail::ManagedAdvice::set_accessed_by ||
         advice == detail::ManagedAdvice::unset_accessed_by;
}

// ---- The resource ----

class ManagedResource final : public MemoryResource {
 public:
  explicit ManagedResource(const ManagedOptions& options)
      : MemoryResource(Device::cuda(options.device), true, true,
                       "managed(" + Device::cuda(options.device).to_string() + ")"),
        options_(options) {
    set_oversubscribable(options.allow_oversubscription);
    detail::check_cuda_ordinal(options_.device);
    if (options_.preferred_location) {
      check_location(*options_.preferred_location);
    }
  }

 private:
  void* do_allocate(std::size_t bytes, const Stream* /*stream*/) override {
    if (!options_.allow_oversubscription) {
      const detail::DeviceMemoryInfo info = detail::device_memory_info(options_.device);
      if (bytes > info.free_bytes) {
        COHORT_FAIL(OutOfMemory,
                    "cannot allocate " + detail::bytes_in_words(bytes) + " from " + name() +
                        ": only " + detail::bytes_in_words(info.free_bytes) + " are free on " +
                        device().to_string() + " (of " + detail::bytes_in_words(info.total_bytes) +
                        "); set ManagedOptions::allow_oversubscription to oversubscribe");
      }
    }
    const detail::CudaDeviceScope scope(options_.device);  // the range belongs to this device
    void* pointer = nullptr;
    const cudaError_t status = cudaMallocManaged(&pointer, bytes, cudaMemAttachGlobal);
    if (status == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      COHORT_FAIL(OutOfMemory, "cannot allocate " + detail::bytes_in_words(bytes) + " from " +
                                   name() + ": cudaMallocManaged failed");
    }
    COHORT_CUDA_TRY(status);
    if (options_.preferred_location) {
      try {
        detail::managed_advise(pointer, bytes, detail::ManagedAdvice::set_preferred_location,
                               *options_.preferred_location);
      } catch (...) {
        COHORT_CUDA_CHECK_NOEXCEPT(cudaFree(pointer));
        throw;
      }
    }
    return pointer;
  }

  void do_deallocate(void* pointer, std::size_t /*bytes*/, const Stream* stream) noexcept override {
    wait_for_stream(stream);
    const detail::CudaDeviceScope scope(options_.device);  // Note [Every call binds its device]
    COHORT_CUDA_CHECK_NOEXCEPT(cudaFree(pointer));
  }

  ManagedOptions options_;
};

}  // namespace

std::shared_ptr<MemoryResource> make_managed_resource(const ManagedOptions& options) {
  return std::make_shared<ManagedResource>(options);
}

bool managed::concurrent_access(int device) {
  const ManagedCapabilities& probed = capabilities();
  return device >= 0 && static_cast<std::size_t>(device) < probed.concurrent_access.size() &&
         probed.concurrent_access[static_cast<std::size_t>(device)];
}

void detail::managed_prefetch(const void* data, std::size_t bytes, Device destination,
                              const Stream& stream) {
  if (bytes == 0) {
    return;
  }
  COHORT_EXPECTS(stream.device().is_cuda(),
                 "prefetching managed memory needs a CUDA stream, not a host stream");
  (void)managed_owner(data);
  check_location(destination);
  if (!hints_supported(destination.is_cuda() ? destination.index() : stream.device().index())) {
    return;
  }
  const CudaDeviceScope scope(stream.device().index());  // Note [Every call binds its device]
  auto* const cuda_stream = static_cast<cudaStream_t>(stream.native_handle());
#if CUDART_VERSION >= 13000
  COHORT_CUDA_TRY(
      cudaMemPrefetchAsync(data, bytes, to_cuda_location(destination), /*flags=*/0, cuda_stream));
#else
  COHORT_CUDA_TRY(cudaMemPrefetchAsync(data, bytes, to_cuda_location(destination), cuda_stream));
#endif
}

void detail::managed_advise(const void* data, std::size_t bytes, ManagedAdvice advice,
                            Device location) {
  if (bytes == 0) {
    return;
  }
  const int owner = managed_owner(data);
  if (!takes_location(advice)) {
    location = Device::cuda(owner);  // ignored by CUDA; a valid one all the same
  }
  check_location(location);
  if (!hints_supported(location.is_cuda() ? location.index() : owner)) {
    return;
  }
  // Same spelling in CUDA 12 and 13: only the type of the location argument changed.
  COHORT_CUDA_TRY(cudaMemAdvise(data, bytes, to_cuda_advice(advice), to_cuda_location(location)));
}

}  // namespace cohort
