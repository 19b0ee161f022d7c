// The CUDA memory API in a build without CUDA (COHORT_WITH_CUDA=OFF): only host resources exist,
// and asking for anything else says so.

#include <cohort/core/error.hpp>
#include <cohort/memory/device_pool.hpp>
#include <cohort/memory/managed.hpp>
#include <cohort/memory/pinned_host.hpp>

#include <string>

namespace cohort {
namespace {

[[noreturn]] void fail_without_cuda(const std::string& what) {
  COHORT_FAIL(InvalidArgument, "cannot " + what +
                                   ": cohort was built without CUDA (COHORT_WITH_CUDA=OFF); only "
                                   "host resources (HostResource, HostPoolResource) exist");
}

}  // namespace

std::shared_ptr<MemoryResource> make_device_pool_resource(const DevicePoolOptions& /*options*/) {
  fail_without_cuda("create a device pool resource");
}

std::shared_ptr<MemoryResource> make_pinned_host_resource(const PinnedHostOptions& /*options*/) {
  fail_without_cuda("create a pinned host resource");
}

std::shared_ptr<MemoryResource> make_managed_resource(const ManagedOptions& /*options*/) {
  fail_without_cuda("create a managed memory resource");
}

bool managed::concurrent_access(int /*device*/) {
  return false;
}

void detail::managed_prefetch(const void* /*data*/, std::size_t /*bytes*/, Device /*destination*/,
                              const Stream& /*stream*/) {
  fail_without_cuda("prefetch managed memory");
}

void detail::managed_advise(const void* /*data*/, std::size_t /*bytes*/, ManagedAdvice /*advice*/,
                            Device /*location*/) {
  fail_without_cuda("advise on managed memory");
}

}  // namespace cohort
