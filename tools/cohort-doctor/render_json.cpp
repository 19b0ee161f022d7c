// The report as one JSON object for scripts.

#include "report.hpp"

#include <map>

namespace cohort::doctor {

namespace {

using Json = nlohmann::ordered_json;

Json version_json(const std::optional<Version>& version) {
  return version ? Json(version->to_string()) : Json(nullptr);
}

/// A limit in bytes, or "unlimited".
Json limit_json(std::optional<std::uint64_t> value) {
  return value ? Json(*value) : Json("unlimited");
}

Json versions_json(const Report& report) {
  Json versions = Json::object();
  if (!report.built_with_cuda) {
    versions["cuda_runtime"] = nullptr;
    versions["cuda_driver"] = nullptr;
    return versions;
  }
  versions["cuda_runtime"] = cuda_version_from_code(report.cuda_runtime_code).to_string(false);
  versions["cuda_driver"] =
      report.cuda_driver_code > 0
          ? Json(cuda_version_from_code(report.cuda_driver_code).to_string(false))
          : Json(nullptr);
  for (const LibraryVersion& library : report.libraries) {
    std::string key;
    for (const char c : library.name) {
      key.push_back(static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c));
    }
    versions[key] = {{"loaded", version_json(library.loaded)},
                     {"compiled", version_json(library.compiled)}};
  }
  return versions;
}

Json gpus_json(const Report& report) {
  Json gpus = Json::array();
  for (const GpuInfo& gpu : report.gpus) {
    gpus.push_back({{"index", gpu.index},
                    {"name", gpu.name},
                    {"total_memory_bytes", gpu.total_memory_bytes},
                    {"compute_capability",
                     std::to_string(gpu.compute_major) + "." + std::to_string(gpu.compute_minor)},
                    {"multiprocessors", gpu.multiprocessors},
                    {"pci_bus_id", gpu.pci_bus_id},
                    {"compute_mode", std::string(to_string(gpu.compute_mode))},
                    {"concurrent_managed_access", gpu.concurrent_managed_access},
                    {"pageable_memory_access", gpu.pageable_memory_access}});
  }
  return gpus;
}

Json topology_json(const Report& report) {
  Json links = Json::array();
  for (const PeerLink& link : report.peer_links) {
    links.push_back({{"from", link.from},
                     {"to", link.to},
                     {"access", link.access},
                     {"performance_rank", link.performance_rank},
                     {"native_atomics", link.native_atomics}});
  }
  return {{"peer_links", links}, {"nvlink", report.nvlink_note}};
}

Json host_json(const Report& report) {
  Json interfaces = Json::array();
  for (const NetworkInterface& interface : report.interfaces) {
    interfaces.push_back({{"name", interface.name},
                          {"address", interface.address},
                          {"loopback", interface.loopback},
                          {"up", interface.up}});
  }
  Json host = {{"hostname", report.hostname},
               {"hostname_address",
                report.hostname_address ? Json(*report.hostname_address) : Json(nullptr)},
               {"cpu_cores_online", report.cpu_cores_online},
               {"cpu_cores_usable", report.cpu_cores_usable},
               {"interfaces", interfaces},
               {"backend", check_transport(report.environment, report.nccl_backend).backend_name}};
  if (report.built_with_cuda) {
    host["nccl_socket_interfaces"] = nccl_socket_interfaces(report.environment, report.interfaces);
  }
  return host;
}

Json limits_json(const Report& report) {
  Json shm = nullptr;
  if (report.shm) {
    shm = {{"path", "/dev/shm"},
           {"total_bytes", report.shm->total_bytes},
           {"available_bytes", report.shm->available_bytes}};
  }
  return {{"shm", shm},
          {"memlock",
           {{"soft", limit_json(report.memlock.soft)}, {"hard", limit_json(report.memlock.hard)}}},
          {"stack",
           {{"soft", limit_json(report.stack.soft)}, {"hard", limit_json(report.stack.hard)}}}};
}

template <typename T>
Json optional_json(const std::optional<T>& value) {
  return value ? Json(*value) : Json(nullptr);
}

Json inventory_json(const HostInventory& inventory) {
  Json libraries = Json::object();
  for (const auto& [name, version] : inventory.libraries) libraries[name] = version;
  return {{"cpu_model", inventory.cpu_model},
          {"sockets", inventory.sockets},
          {"numa_nodes", inventory.numa_nodes},
          {"memory_total_bytes", inventory.memory_total_bytes},
          {"memory_available_bytes", inventory.memory_available_bytes},
          {"os", inventory.os},
          {"kernel", inventory.kernel},
          {"compiler", inventory.compiler},
          {"libraries", libraries}};
}

Json gpu_system_json(const GpuSystem& system) {
  Json gpus = Json::array();
  for (const GpuHealth& gpu : system.gpus) {
    Json nvlinks = Json::array();
    for (const NvLink& link : gpu.nvlinks) {
      nvlinks.push_back(
          {{"link", link.link},
           {"active", link.active},
           {"remote_bus_id", link.remote_bus_id.empty() ? Json(nullptr) : Json(link.remote_bus_id)},
           {"remote_is_switch", link.remote_is_switch}});
    }
    Json pcie = nullptr;
    if (gpu.pcie) {
      pcie = {{"generation", gpu.pcie->generation},
              {"width", gpu.pcie->width},
              {"max_generation", gpu.pcie->max_generation},
              {"max_width", gpu.pcie->max_width}};
    }
    Json reasons = nullptr;
    if (gpu.throttle_reasons) reasons = throttle_reason_names(*gpu.throttle_reasons);
    gpus.push_back(
        {{"index", gpu.index},
         {"name", gpu.name},
         {"uuid", gpu.uuid},
         {"pci_bus_id", gpu.pci_bus_id},
         {"pci_path", gpu.pci_path},
         {"numa_node", gpu.numa_node < 0 ? Json(nullptr) : Json(gpu.numa_node)},
         {"compute_capability",
          std::to_string(gpu.compute_major) + "." + std::to_string(gpu.compute_minor)},
         {"pcie", pcie},
         {"nvlinks", nvlinks},
         {"ecc_enabled", optional_json(gpu.ecc_enabled)},
         {"ecc_uncorrected_volatile", optional_json(gpu.ecc_uncorrected_volatile)},
         {"ecc_uncorrected_aggregate", optional_json(gpu.ecc_uncorrected_aggregate)},
         {"ecc_corrected_volatile", optional_json(gpu.ecc_corrected_volatile)},
         {"remapped_rows", gpu.remap_supported ? Json{{"correctable", gpu.remapped_correctable},
                                                      {"uncorrectable", gpu.remapped_uncorrectable},
                                                      {"pending", gpu.remap_pending},
                                                      {"failure", gpu.remap_failure}}
                                               : Json(nullptr)},
         {"throttle_reasons", reasons},
         {"persistence", optional_json(gpu.persistence)},
         {"mig", optional_json(gpu.mig)},
         {"temperature_c", optional_json(gpu.temperature_c)}});
  }
  Json nics = Json::array();
  for (const Nic& nic : system.nics) {
    Json ports = Json::array();
    for (const IbPort& port : nic.ports) {
      ports.push_back({{"port", port.port},
                       {"state", port.state},
                       {"phys_state", port.phys_state},
                       {"rate", port.rate},
                       {"rate_bits_per_s", port.rate_gbps * 1e9},
                       {"link_layer", port.link_layer}});
    }
    nics.push_back({{"name", nic.name},
                    {"pci_bus_id", nic.pci_bus_id},
                    {"numa_node", nic.numa_node < 0 ? Json(nullptr) : Json(nic.numa_node)},
                    {"ports", ports}});
  }
  return {{"nvml_loaded", system.nvml_loaded},
          {"nvml_problem", system.nvml_problem.empty() ? Json(nullptr) : Json(system.nvml_problem)},
          {"driver_version",
           system.driver_version.empty() ? Json(nullptr) : Json(system.driver_version)},
          {"nvidia_pci_devices",
           system.nvidia_pci_devices < 0 ? Json(nullptr) : Json(system.nvidia_pci_devices)},
          {"gpus", gpus},
          {"link_matrix", link_matrix(system)},
          {"nics", nics},
          {"peer_memory_module", optional_json(system.peer_memory_module)}};
}

}  // namespace

nlohmann::ordered_json to_json(const Report& report, const std::vector<Finding>& findings) {
  Json json;
  json["cohort_version"] = report.cohort_version;
  json["built_with_cuda"] = report.built_with_cuda;
  json["cuda_architectures"] = report.cuda_architectures;
  json["versions"] = versions_json(report);
  json["gpu_count"] = report.gpu_count;
  json["gpu_unavailable_reason"] = report.gpu_unavailable_reason;
  json["gpus"] = gpus_json(report);
  json["topology"] = topology_json(report);

  const LaunchCheck launch = check_launch(report.environment);
  json["launcher"] = {{"name", launch.launcher},
                      {"description", launch.description},
                      {"local_world_size", launch.local_world_size},
                      {"num_nodes", launch.num_nodes}};
  Json environment = Json::object();
  for (const auto& [name, value] : relevant_variables(report.environment)) {
    environment[name] = shown_value(name, value);
  }
  json["environment"] = environment;
  const TransportCheck transport = check_transport(report.environment, report.nccl_backend);
  const RendezvousFacts& r = report.rendezvous;
  json["will_run"] = {
      {"backend", transport.backend_name},
      {"description", transport.backend.message},
      {"store", transport.store_kind},
      {"store_description", transport.store.message},
      {"rendezvous", r.host.empty()
                         ? Json(nullptr)
                         : Json{{"host", r.host},
                                {"port", r.port},
                                {"source", r.source},
                                {"addresses", r.addresses},
                                {"resolve_error",
                                 r.resolve_error.empty() ? Json(nullptr) : Json(r.resolve_error)},
                                {"reach", std::string(to_string(r.reach))}}}};
  json["host"] = host_json(report);
  json["limits"] = limits_json(report);
  json["inventory"] = inventory_json(report.inventory);
  json["gpu_health"] = gpu_system_json(report.gpu_system);
  Json collectives = Json::array();
  for (const CollectiveResult& c : report.collectives) {
    collectives.push_back({{"name", c.name},
                           {"ranks", c.ranks},
                           {"bytes", c.bytes},
                           {"time_s", c.time_us * 1e-6},
                           {"algbw_bytes_per_s", c.algbw_gbps * 1e9},
                           {"busbw_bytes_per_s", c.busbw_gbps * 1e9},
                           {"wrong", c.wrong}});
  }
  json["collectives"] = collectives;
  json["busbw_floor_bytes_per_s"] =
      report.busbw_floor_gbps > 0 ? Json(report.busbw_floor_gbps * 1e9) : Json(nullptr);

  Json list = Json::array();
  std::map<std::string, int> counts = {{"ok", 0}, {"info", 0}, {"warn", 0}, {"error", 0}};
  for (const Finding& finding : findings) {
    const std::string severity(to_string(finding.severity));
    ++counts[severity];
    list.push_back({{"severity", severity},
                    {"topic", finding.topic},
                    {"message", finding.message},
                    {"advice", finding.advice}});
  }
  json["findings"] = list;
  json["summary"] = {{"ok", counts["ok"]},
                     {"info", counts["info"]},
                     {"warn", counts["warn"]},
                     {"error", counts["error"]}};
  json["exit_status"] = exit_status(findings);
  return json;
}

}  // namespace cohort::doctor
