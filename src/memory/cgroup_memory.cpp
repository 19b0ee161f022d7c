// The tightest memory cgroup limit of this process (Note [Memory cgroups]).

#include "cgroup_memory.hpp"

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace cohort::detail {
namespace {

/// v1 reports "no limit" as the largest page-aligned signed 64-bit number; anything this large is
/// no limit on any machine.
constexpr std::size_t kNoLimit = std::size_t{1} << 60;

std::vector<std::string> split(std::string_view text, char separator) {
  std::vector<std::string> parts;
  std::size_t begin = 0;
  while (begin <= text.size()) {
    const std::size_t end = std::min(text.find(separator, begin), text.size());
    parts.emplace_back(text.substr(begin, end - begin));
    begin = end + 1;
  }
  return parts;
}

/// mountinfo escapes space, tab, newline and backslash as \ooo (octal).
std::string unescape(const std::string& field) {
  std::string out;
  for (std::size_t i = 0; i < field.size(); ++i) {
    if (field[i] == '\\' && i + 3 < field.size()) {
      const std::string digits = field.substr(i + 1, 3);
      if (digits.find_first_not_of("01234567") == std::string::npos) {
        out.push_back(static_cast<char>(std::stoi(digits, nullptr, 8)));
        i += 3;
        continue;
      }
    }
    out.push_back(field[i]);
  }
  return out;
}

/// A number of bytes in a one-value file; nullopt for "max", a missing file or anything else.
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

/// The value of `key` in a memory.stat file (0 when absent).
std::size_t stat_value(const std::string& path, std::string_view key) {
  std::ifstream in(path);
  std::string name;
  std::size_t value = 0;
  while (in >> name >> value) {
    if (name == key) return value;
  }
  return 0;
}

struct Mount {
  int version = 0;
  std::string root;   ///< the part of the hierarchy mounted here
  std::string point;  ///< where
};

/// The memory hierarchies of `mountinfo`: cgroup v1 mounts with the memory controller, and v2.
std::vector<Mount> memory_mounts(std::string_view mountinfo) {
  std::vector<Mount> mounts;
  for (const std::string& line : split(mountinfo, '\n')) {
    const std::vector<std::string> fields = split(line, ' ');
    std::size_t dash = 0;
    while (dash < fields.size() && fields[dash] != "-") ++dash;
    if (fields.size() < 5 || dash + 1 >= fields.size()) continue;
    const std::string& type = fields[dash + 1];
    Mount mount{0, unescape(fields[3]), unescape(fields[4])};
    if (type == "cgroup2") {
      mount.version = 2;
    } else if (type == "cgroup" && dash + 3 < fields.size()) {
      for (const std::string& option : split(fields[dash + 3], ',')) {
        if (option == "memory") mount.version = 1;
      }
    }
    if (mount.version != 0) mounts.push_back(mount);
  }
  return mounts;
}

/// The limit of one cgroup folder, when it has one.
std::optional<CgroupMemory> limit_of(int version, const std::string& folder) {
  const auto limit = read_bytes(folder + (version == 1 ? "/memory.limit_in_bytes" : "/memory.max"));
  if (!limit || *limit >= kNoLimit) return std::nullopt;
  const auto usage =
      read_bytes(folder + (version == 1 ? "/memory.usage_in_bytes" : "/memory.current"));
  const std::size_t used = usage.value_or(0);
  const std::size_t cache =
      stat_value(folder + "/memory.stat", version == 1 ? "total_inactive_file" : "inactive_file");
  return CgroupMemory{version, folder, *limit, used > cache ? used - cache : 0};
}

std::string read_all(const char* path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

std::optional<CgroupMemory> tightest_cgroup_memory(std::string_view proc_self_cgroup,
                                                   std::string_view mountinfo,
                                                   const std::string& root) {
  const std::vector<Mount> mounts = memory_mounts(mountinfo);
  std::optional<CgroupMemory> tightest;
  for (const std::string& line : split(proc_self_cgroup, '\n')) {
    // "hierarchy-id:controllers:path"; v2 is "0::path".
    const std::size_t first = line.find(':');
    const std::size_t second = first == std::string::npos ? first : line.find(':', first + 1);
    if (second == std::string::npos) continue;
    const std::string controllers = line.substr(first + 1, second - first - 1);
    const std::string path = line.substr(second + 1);
    int version = 0;
    if (line.rfind("0::", 0) == 0) {
      version = 2;
    } else {
      for (const std::string& controller : split(controllers, ',')) {
        if (controller == "memory") version = 1;
      }
    }
    if (version == 0) continue;
    for (const Mount& mount : mounts) {
      if (mount.version != version) continue;
      // The cgroup's folder under this mount; a path outside the mounted part (another
      // namespace's) leaves the mount's own root.
      std::string relative;
      if (mount.root == "/") {
        relative = path;
      } else if (path.rfind(mount.root, 0) == 0) {
        relative = path.substr(mount.root.size());
      }
      while (!relative.empty() && relative.back() == '/') relative.pop_back();
      const std::string top = root + mount.point;
      // This folder and every ancestor up to the mount point.
      for (std::string folder = top + relative;;) {
        if (const auto limit = limit_of(version, folder)) {
          if (!tightest || limit->room() < tightest->room()) tightest = limit;
        }
        if (folder.size() <= top.size()) break;
        folder = folder.substr(0, folder.rfind('/'));
        if (folder.size() < top.size()) folder = top;
      }
    }
  }
  return tightest;
}

std::optional<CgroupMemory> own_cgroup_memory() {
  return tightest_cgroup_memory(read_all("/proc/self/cgroup"), read_all("/proc/self/mountinfo"));
}

}  // namespace cohort::detail
