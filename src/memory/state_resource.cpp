#include <cohort/memory/detail/state_resource.hpp>

#include <cohort/core/error.hpp>
#include <cohort/memory/host_resource.hpp>

#include <map>
#include <mutex>

#if COHORT_WITH_CUDA
#include <cohort/memory/device_pool.hpp>
#endif

namespace cohort::detail {

std::shared_ptr<MemoryResource> default_state_resource(Device device) {
  if (device.is_host()) {
    static const auto host = std::make_shared<HostResource>();
    return host;
  }
#if COHORT_WITH_CUDA
  static std::mutex mutex;
  static std::map<int, std::shared_ptr<MemoryResource>> pools;
  const std::lock_guard lock(mutex);
  auto& pool = pools[device.index()];
  if (!pool) {
    pool = make_device_pool_resource({.device = device.index()});
  }
  return pool;
#else
  COHORT_FAIL(InvalidArgument,
              "optimizer state on " + device.to_string() + " needs cohort built with CUDA");
#endif
}

bool is_managed(const MemoryResource& resource) noexcept {
  return resource.device().is_cuda() && resource.host_accessible() && resource.device_accessible();
}

}  // namespace cohort::detail
