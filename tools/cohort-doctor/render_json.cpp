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
               {"backend", report.gpu_count > 0 ? "nccl" : "gloo"}};
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
    environment[name] = value;
  }
  json["environment"] = environment;
  json["host"] = host_json(report);
  json["limits"] = limits_json(report);

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
