#pragma once

// The memory a container really allows: the tightest memory limit of this process's cgroups, in
// cgroup v1 (memory.limit_in_bytes) or v2 (memory.max), as Docker, Kubernetes and Slurm impose.
//
// Note [Memory cgroups]
// A process may sit under several memory limits at once: its own cgroup's and every ancestor's
// (a Slurm job's step inside the job, a Kubernetes container inside its pod), in the v1 memory
// hierarchy, the v2 unified one, or both (a hybrid host). What is left for it is the smallest
// room among them, room = limit - (usage - inactive file cache): the page cache the kernel would
// reclaim before killing anything is not counted as used, as `docker stats` does not count it.
// Where each hierarchy is mounted is read from /proc/self/mountinfo (a container with a cgroup
// namespace sees its own cgroup at the mount's root; a hybrid host mounts v2 at
// /sys/fs/cgroup/unified), and the cgroup path from /proc/self/cgroup, less the mount's root.
// Every rank of a node usually shares one such limit (one container, one Slurm step per node),
// so a program checks what all its local ranks need against it, measured before any allocates.

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace cohort::detail {

/// One memory limit and what is charged against it.
struct CgroupMemory {
  int version = 0;         ///< 1 or 2
  std::string folder;      ///< the cgroup folder holding the limit
  std::size_t limit = 0;   ///< bytes
  std::size_t in_use = 0;  ///< usage less the inactive file cache, bytes
  std::size_t room() const noexcept { return limit > in_use ? limit - in_use : 0; }
};

/// The limit with the least room among the cgroups (and their ancestors up to the mount) that
/// `proc_self_cgroup` places this process in, given the mounts of `mountinfo`; nullopt when none
/// has a limit. `root` is prepended to every path read (a fake tree, for tests).
std::optional<CgroupMemory> tightest_cgroup_memory(std::string_view proc_self_cgroup,
                                                   std::string_view mountinfo,
                                                   const std::string& root = "");

/// The same for this process, from /proc/self/cgroup and /proc/self/mountinfo.
std::optional<CgroupMemory> own_cgroup_memory();

}  // namespace cohort::detail
