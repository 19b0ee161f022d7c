// LaunchInfo from an arbitrary environment: lines "NAME=VALUE" (the seeds and the dictionary hold
// the variables launchers set). Reading either gives a consistent LaunchInfo or throws
// InvalidArgument naming a variable; any other outcome is a bug.

#include <cohort/core/error.hpp>
#include <cohort/launch/launch_info.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <string>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view input(reinterpret_cast<const char*>(data), size);
  std::map<std::string, std::string, std::less<>> variables;
  while (!input.empty()) {
    const std::size_t end = input.find('\n');
    const std::string_view line = input.substr(0, end);
    const std::size_t equals = line.find('=');
    if (equals != std::string_view::npos) {
      variables[std::string(line.substr(0, equals))] = std::string(line.substr(equals + 1));
    }
    if (end == std::string_view::npos) break;
    input.remove_prefix(end + 1);
  }
  const cohort::EnvLookup lookup = [&](std::string_view name) -> std::optional<std::string> {
    const auto it = variables.find(name);
    if (it == variables.end()) return std::nullopt;
    return it->second;
  };
  try {
    const cohort::LaunchInfo info = cohort::LaunchInfo::from_environment(lookup);
    const bool consistent = info.world_size >= 1 && info.rank >= 0 && info.rank < info.world_size &&
                            info.local_world_size >= 1 && info.local_rank >= 0 &&
                            info.local_rank < info.local_world_size && info.num_nodes >= 1 &&
                            info.node_rank >= 0 && info.node_rank < info.num_nodes &&
                            info.master_port >= 1 && info.master_port <= 65535 &&
                            !info.master_addr.empty();
    if (!consistent) std::abort();
    (void)info.describe();
  } catch (const cohort::InvalidArgument&) {
  }
  return 0;
}
