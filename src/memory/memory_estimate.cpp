// available_memory and check_memory_fits: refuse what cannot fit before allocating it.

#include <cohort/memory/memory_estimate.hpp>

#include "cgroup_memory.hpp"

#include <cohort/core/error.hpp>
#include <cohort/core/format.hpp>
#include <cohort/memory/memory_resource.hpp>

#if COHORT_WITH_CUDA
#include "cuda_detail.hpp"
#endif

#include <fstream>
#include <optional>
#include <string>

namespace cohort {
namespace {

/// MemAvailable from /proc/meminfo, in bytes.
std::optional<std::size_t> mem_available() {
  std::ifstream in("/proc/meminfo");
  std::string name;
  std::size_t kib = 0;
  std::string unit;
  while (in >> name >> kib) {
    std::getline(in, unit);
    if (name == "MemAvailable:") return kib * 1024;
  }
  return std::nullopt;
}

std::string in_words(std::size_t bytes) {
  return std::to_string(bytes) + " bytes (" + format_bytes(bytes) + ")";
}

}  // namespace

MemoryAvailability memory_availability(Device device) {
  if (device.is_cuda()) {
#if COHORT_WITH_CUDA
    return {detail::device_memory_info(device.index()).free_bytes,
            "cudaMemGetInfo's free memory on " + device.to_string()};
#else
    return {};
#endif
  }
  MemoryAvailability available;
  if (const auto bytes = mem_available()) {
    available = {*bytes, "MemAvailable (/proc/meminfo)"};
  }
  // Note [Memory cgroups]
  if (const auto cgroup = detail::own_cgroup_memory()) {
    if (available.bytes == 0 || cgroup->room() < available.bytes) {
      available = {cgroup->room(), "the memory cgroup limit of " + cgroup->folder + " (v" +
                                       std::to_string(cgroup->version) + ": " +
                                       format_bytes(cgroup->limit) + ", " +
                                       format_bytes(cgroup->in_use) + " of it in use)"};
    }
  }
  return available;
}

std::size_t available_memory(Device device) {
  return memory_availability(device).bytes;
}

// Note [Oversubscribed managed memory]
// Managed memory made with `allow_oversubscription` may be larger than the GPU's free memory: the
// driver keeps the pages that do not fit on the host and migrates them as kernels touch them or
// as they are prefetched. Such a request is bounded by the GPU's free memory and the host's
// available memory together; the GPU's alone would refuse exactly what the option exists for
// (optimizer state larger than the GPU, docs/memory.md). Whatever NCCL reads stays out of such
// memory (Note [Optimizer scalars in device memory], src/optim/optimizer.cpp).

namespace detail {

MemoryFit memory_fit(std::size_t bytes, bool device_is_cuda, bool oversubscribable,
                     std::size_t device_available, std::size_t host_available) {
  MemoryFit fit;
  if (device_is_cuda && oversubscribable) {
    // Note [Oversubscribed managed memory]
    if (device_available == 0 || host_available == 0) return fit;
    fit.available = device_available + host_available;
    fit.where =
        "the GPU's free memory and the host's available memory together (managed memory "
        "that oversubscribes the GPU spills to the host)";
  } else {
    fit.available = device_available;
    fit.where = device_is_cuda ? "the GPU's free memory" : "the host's available memory";
  }
  fit.fits = fit.available == 0 || bytes <= fit.available;
  return fit;
}

}  // namespace detail

void check_memory_fits(Device device, std::size_t bytes, std::string_view what) {
  check_memory_fits(memory_availability(device), device, bytes, 1, what);
}

void check_memory_fits(const MemoryAvailability& available, Device device,
                       std::size_t bytes_per_rank, int ranks, std::string_view what,
                       std::string_view advice) {
  const std::size_t total = bytes_per_rank * static_cast<std::size_t>(ranks > 0 ? ranks : 1);
  if (available.bytes == 0 || total <= available.bytes) return;
  std::string needs = std::string(what) + " needs " + in_words(total) + " on " + device.to_string();
  if (ranks > 1) {
    needs += " (" + format_bytes(bytes_per_rank) + " for each of the " + std::to_string(ranks) +
             " ranks that share it)";
  }
  const std::string default_advice =
      std::string(
          "Use a smaller model or batch, more ranks with ZeRO sharding, or fewer ranks on "
          "this ") +
      (device.is_cuda() ? "GPU" : "host") + ".";
  COHORT_FAIL(OutOfMemory,
              needs + ", but only " + in_words(available.bytes) + " are available (" +
                  available.source + "); refused before allocating. " +
                  std::string(advice.empty() ? std::string_view(default_advice) : advice));
}

void check_memory_fits(const MemoryResource& resource, std::size_t bytes, std::string_view what) {
  const Device device = resource.device();
  if (!device.is_cuda() || !resource.oversubscribable()) {
    check_memory_fits(device, bytes, what);
    return;
  }
  // Note [Oversubscribed managed memory]
  const MemoryAvailability gpu = memory_availability(device);
  const MemoryAvailability host = memory_availability(Device::host());
  const detail::MemoryFit fit = detail::memory_fit(bytes, true, true, gpu.bytes, host.bytes);
  if (fit.fits) return;
  check_memory_fits(
      MemoryAvailability{fit.available, fit.where + ": " + gpu.source + " and " + host.source},
      device, bytes, 1, what);
}

}  // namespace cohort
