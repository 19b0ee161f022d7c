// available_memory and check_memory_fits: refuse what cannot fit before allocating it.

#include <cohort/memory/memory_estimate.hpp>

#include <cohort/core/error.hpp>
#include <cohort/core/format.hpp>
#include <cohort/memory/memory_resource.hpp>

#if COHORT_WITH_CUDA
#include "cuda_detail.hpp"
#endif

#include <algorithm>
#include <fstream>
#include <limits>
#include <optional>
#include <string>

namespace cohort {
namespace {

/// A number of bytes in a one-value file (cgroup v2's memory.max, memory.current); nullopt for
/// "max", a missing file or anything unreadable.
std::optional<std::size_t> read_bytes(const std::string& path) {
  std::ifstream in(path);
  std::string text;
  if (!(in >> text) || text.empty() || text.find_first_not_of("0123456789") != std::string::npos) {
    return std::nullopt;
  }
  try {
    return static_cast<std::size_t>(std::stoull(text));
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

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

/// The room left under this process's cgroup v2 memory limit, when it has one.
std::optional<std::size_t> cgroup_room() {
  std::ifstream in("/proc/self/cgroup");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("0::", 0) != 0) continue;  // the cgroup v2 entry
    const std::string folder = "/sys/fs/cgroup" + line.substr(3);
    const auto limit = read_bytes(folder + "/memory.max");
    const auto used = read_bytes(folder + "/memory.current");
    if (!limit || !used) return std::nullopt;
    return *limit > *used ? *limit - *used : 0;
  }
  return std::nullopt;
}

std::string in_words(std::size_t bytes) {
  return std::to_string(bytes) + " bytes (" + format_bytes(bytes) + ")";
}

}  // namespace

std::size_t available_memory(Device device) {
  if (device.is_cuda()) {
#if COHORT_WITH_CUDA
    return detail::device_memory_info(device.index()).free_bytes;
#else
    return 0;
#endif
  }
  std::size_t room = mem_available().value_or(0);
  if (const auto cgroup = cgroup_room()) room = room == 0 ? *cgroup : std::min(room, *cgroup);
  return room;
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
    fit.where = "the GPU's free memory and the host's available memory together (managed memory "
                "that oversubscribes the GPU spills to the host)";
  } else {
    fit.available = device_available;
    fit.where = device_is_cuda ? "the GPU's free memory" : "the host's available memory";
  }
  fit.fits = fit.available == 0 || bytes <= fit.available;
  return fit;
}

}  // namespace detail

namespace {

[[noreturn]] void refuse(Device device, std::size_t bytes, std::string_view what,
                         const detail::MemoryFit& fit) {
  COHORT_FAIL(OutOfMemory,
              std::string(what) + " needs " + in_words(bytes) + " on " + device.to_string() +
                  ", but only " + in_words(fit.available) + " are available (" + fit.where +
                  "); refused before allocating. Use a smaller model or batch, more ranks with "
                  "ZeRO-1 sharding, or fewer ranks on this " +
                  (device.is_cuda() ? "GPU" : "host") + ".");
}

}  // namespace

void check_memory_fits(Device device, std::size_t bytes, std::string_view what) {
  const detail::MemoryFit fit =
      detail::memory_fit(bytes, device.is_cuda(), false, available_memory(device), 0);
  if (!fit.fits) refuse(device, bytes, what, fit);
}

void check_memory_fits(const MemoryResource& resource, std::size_t bytes, std::string_view what) {
  const Device device = resource.device();
  const bool oversubscribing = device.is_cuda() && resource.oversubscribable();
  const detail::MemoryFit fit =
      detail::memory_fit(bytes, device.is_cuda(), oversubscribing, available_memory(device),
                         oversubscribing ? available_memory(Device::host()) : 0);
  if (!fit.fits) refuse(device, bytes, what, fit);
}

}  // namespace cohort
