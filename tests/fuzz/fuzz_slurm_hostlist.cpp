// The Slurm host-list and tasks-per-node parsers over arbitrary text. The first byte picks the
// node index for the tasks-per-node list; the rest is the list. A host found is one plain name:
// non-empty, without brackets or commas.

#include <cohort/launch/launch_info.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const int node_index = data[0];
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  if (const auto host = cohort::first_slurm_host(text)) {
    if (host->empty() || host->find_first_of("[],") != std::string_view::npos) std::abort();
  }
  if (const auto tasks = cohort::slurm_tasks_on_node(text, node_index)) {
    if (*tasks < 0) std::abort();
  }
  return 0;
}
