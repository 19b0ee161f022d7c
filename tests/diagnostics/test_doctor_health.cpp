// cohort-doctor's GPU and network health: the checks on made-up facts, and the probes on a
// made-up /sys with a stand-in NVML (fake_nvml.cpp, loaded by dlopen as the real one would be).

#include "checks.hpp"
#include "doctor_test_support.hpp"
#include "probe.hpp"
#include "report.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace {

using namespace cohort::doctor;
using namespace cohort::doctor::testing;

GpuHealth healthy_gpu(int index) {
  GpuHealth gpu;
  gpu.index = index;
  gpu.name = "NVIDIA A100-SXM4-80GB";
  gpu.pcie = PcieLink{4, 16, 4, 16};
  gpu.ecc_enabled = true;
  gpu.ecc_uncorrected_volatile = 0;
  gpu.ecc_uncorrected_aggregate = 0;
  gpu.ecc_corrected_volatile = 0;
  gpu.remap_supported = true;
  gpu.throttle_reasons = 0x1;  // idle
  gpu.persistence = true;
  gpu.mig = false;
  return gpu;
}

TEST(DoctorHealth, NamesThrottleReasonsWithoutIdle) {
  EXPECT_TRUE(throttle_reason_names(0x1).empty());
  const auto names = throttle_reason_names(0x40 | 0x80 | 0x4);
  EXPECT_EQ(names, (std::vector<std::string>{"software power cap", "hardware thermal slowdown",
                                             "hardware power brake"}));
}

TEST(DoctorHealth, PciRelationFollowsTheTree) {
  const std::string gpu0 = "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0/0000:07:00.0";
  const std::string nic0 = "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:01.0/0000:08:00.0";
  const std::string far = "pci0000:00/0000:00:03.0/0000:30:00.0";
  const std::string deep =
      "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:03.0/0000:05:00.0/"
      "0000:06:00.0/0000:09:00.0";
  EXPECT_EQ(pci_relation(gpu0, 0, nic0, 0), "PIX");
  EXPECT_EQ(pci_relation(gpu0, 0, deep, 0), "PXB");
  EXPECT_EQ(pci_relation(gpu0, 0, far, 0), "PHB");
  EXPECT_EQ(pci_relation(gpu0, 0, "pci0000:40/0000:40:01.0/0000:41:00.0", 0), "NODE");
  EXPECT_EQ(pci_relation(gpu0, 0, "pci0000:80/0000:80:01.0/0000:81:00.0", 1), "SYS");
  EXPECT_EQ(pci_relation("", 0, nic0, 0), "?");
}

TEST(DoctorHealth, LinkMatrixCountsNvLinksAndFallsBackToPcie) {
  GpuSystem system;
  for (int i = 0; i < 3; ++i) system.gpus.push_back(healthy_gpu(i));
  system.gpus[0].pci_bus_id = "0000:07:00.0";
  system.gpus[1].pci_bus_id = "0000:0f:00.0";
  system.gpus[2].pci_bus_id = "0000:47:00.0";
  // GPU0 and GPU1 share 4 direct links; GPU2 has none.
  for (int link = 0; link < 4; ++link) {
    system.gpus[0].nvlinks.push_back(NvLink{link, true, "0000:0F:00.0", false});
    system.gpus[1].nvlinks.push_back(NvLink{link, true, "0000:07:00.0", false});
  }
  system.gpus[0].pci_path = "pci0000:00/0000:00:01.0/0000:07:00.0";
  system.gpus[2].pci_path = "pci0000:40/0000:40:01.0/0000:47:00.0";
  system.gpus[0].numa_node = 0;
  system.gpus[2].numa_node = 1;
  system.nvml_topology = {{-1, 10, -1}, {10, -1, 30}, {-1, 30, -1}};
  Nic nic;
  nic.name = "mlx5_0";
  nic.pci_path = "pci0000:00/0000:00:01.0/0000:08:00.0";
  nic.numa_node = 0;
  system.nics.push_back(nic);
  const auto matrix = link_matrix(system);
  ASSERT_EQ(matrix.size(), 3u);
  EXPECT_EQ(matrix[0], (std::vector<std::string>{"X", "NV4", "SYS", "PIX"}));
  // GPU1 has no sysfs path: NVML's level (host bridge) stands in for GPU2.
  EXPECT_EQ(matrix[1][0], "NV4");
  EXPECT_EQ(matrix[1][2], "PHB");
  EXPECT_EQ(matrix[1][3], "?");
}

TEST(DoctorHealth, PcieWidthBelowMaximumWarnsAndLowerGenerationIsANote) {
  GpuHealth gpu = healthy_gpu(0);
  EXPECT_EQ(check_pcie(gpu).severity, Severity::ok);
  gpu.pcie = PcieLink{4, 8, 4, 16};
  const Finding narrow = check_pcie(gpu);
  EXPECT_EQ(narrow.severity, Severity::warn);
  EXPECT_TRUE(contains(narrow.message, "8 of 16 lanes")) << narrow.message;
  gpu.pcie = PcieLink{1, 16, 4, 16};
  const Finding idle = check_pcie(gpu);
  EXPECT_EQ(idle.severity, Severity::info);
  EXPECT_TRUE(contains(idle.advice, "under load")) << idle.advice;
}

TEST(DoctorHealth, NvLinkDownWarnsOnlyWhenOthersAreUp) {
  GpuHealth gpu = healthy_gpu(0);
  EXPECT_FALSE(check_nvlinks(gpu).has_value());
  gpu.nvlinks = {{0, true, "", true}, {1, true, "", true}, {2, false, "", false}};
  const auto down = check_nvlinks(gpu);
  ASSERT_TRUE(down.has_value());
  EXPECT_EQ(down->severity, Severity::warn);
  EXPECT_TRUE(contains(down->message, "2 of 3 links active; link(s) 2 down")) << down->message;
  gpu.nvlinks = {{0, false, "", false}};
  EXPECT_EQ(check_nvlinks(gpu)->severity, Severity::info);
}

TEST(DoctorHealth, EccErrorsAndRowRemapping) {
  GpuHealth gpu = healthy_gpu(1);
  EXPECT_EQ(check_ecc(gpu).severity, Severity::ok);
  gpu.ecc_uncorrected_aggregate = 4;
  EXPECT_EQ(check_ecc(gpu).severity, Severity::warn);
  gpu.ecc_uncorrected_volatile = 1;
  EXPECT_EQ(check_ecc(gpu).severity, Severity::error);
  gpu.ecc_enabled = false;
  EXPECT_EQ(check_ecc(gpu).severity, Severity::warn);

  EXPECT_EQ(check_row_remapping(gpu)->severity, Severity::ok);
  gpu.remap_pending = true;
  EXPECT_EQ(check_row_remapping(gpu)->severity, Severity::warn);
  gpu.remap_failure = true;
  EXPECT_EQ(check_row_remapping(gpu)->severity, Severity::error);
  gpu.remap_supported = false;
  EXPECT_FALSE(check_row_remapping(gpu).has_value());
}

TEST(DoctorHealth, ThermalAndPowerThrottlingWarn) {
  GpuHealth gpu = healthy_gpu(0);
  EXPECT_EQ(check_throttle(gpu).severity, Severity::ok);
  gpu.throttle_reasons = 0x4;  // software power cap: normal under load
  EXPECT_EQ(check_throttle(gpu).severity, Severity::ok);
  gpu.throttle_reasons = 0x40;
  gpu.temperature_c = 91;
  const Finding hot = check_throttle(gpu);
  EXPECT_EQ(hot.severity, Severity::warn);
  EXPECT_TRUE(contains(hot.message, "hardware thermal slowdown at 91 C")) << hot.message;
}

TEST(DoctorHealth, PersistenceOffIsANoteAndMigWarns) {
  GpuHealth gpu = healthy_gpu(0);
  for (const Finding& f : check_gpu_modes(gpu)) EXPECT_EQ(f.severity, Severity::ok) << f.topic;
  gpu.persistence = false;
  gpu.mig = true;
  const auto findings = check_gpu_modes(gpu);
  ASSERT_EQ(findings.size(), 2u);
  EXPECT_EQ(findings[0].severity, Severity::info);
  EXPECT_EQ(findings[1].severity, Severity::warn);
}

TEST(DoctorHealth, InfinibandPortsAndRates) {
  Nic a;
  a.name = "mlx5_0";
  a.ports = {{1, "ACTIVE", "LinkUp", "200 Gb/sec (4X HDR)", 200.0, "InfiniBand"}};
  Nic b = a;
  b.name = "mlx5_1";
  std::vector<Nic> nics = {a, b};
  auto findings = check_infiniband(nics, 2);
  ASSERT_EQ(findings.size(), 1u);
  EXPECT_EQ(findings[0].severity, Severity::ok);
  nics[1].ports[0].rate_gbps = 100.0;
  findings = check_infiniband(nics, 2);
  ASSERT_EQ(findings.size(), 2u);
  EXPECT_EQ(findings[1].severity, Severity::warn);
  EXPECT_TRUE(contains(findings[1].message, "100 to 200 Gb/s")) << findings[1].message;
  nics[0].ports[0].state = "DOWN";
  nics[1].ports[0].state = "INIT";
  findings = check_infiniband(nics, 2);
  EXPECT_EQ(findings[0].severity, Severity::error);  // none active across nodes
  EXPECT_EQ(check_infiniband(nics, 1)[0].severity, Severity::warn);
}

TEST(DoctorHealth, NvmlMissingWithGpusOnTheBusWarns) {
  GpuSystem system;
  system.nvml_problem = "cannot load libnvidia-ml.so.1";
  system.nvidia_pci_devices = 8;
  const Finding missing = check_nvml(system, 0);
  EXPECT_EQ(missing.severity, Severity::warn);
  EXPECT_TRUE(contains(missing.advice, "--gpus all")) << missing.advice;
  system.nvidia_pci_devices = 0;
  EXPECT_EQ(check_nvml(system, 2).severity, Severity::warn);
  EXPECT_EQ(check_nvml(system, 0).severity, Severity::info);
}

// ---- The probes on a made-up node
// ----------------------------------------------------------------

#ifdef COHORT_FAKE_NVML
TEST(DoctorProbe, ReadsNvmlAndSysfsOfAMadeUpNode) {
  FakeSysfs sysfs;
  Report report;
  ProbeOptions options;
  options.sysfs_root = sysfs.root().string();
  options.nvml_library = COHORT_FAKE_NVML;
  probe_gpu_system(report, options);
  const GpuSystem& system = report.gpu_system;
  ASSERT_TRUE(system.nvml_loaded) << system.nvml_problem;
  EXPECT_EQ(system.driver_version, "550.54.15");
  EXPECT_EQ(system.nvidia_pci_devices, 2);
  ASSERT_EQ(system.gpus.size(), 2u);
  const GpuHealth& good = system.gpus[0];
  const GpuHealth& bad = system.gpus[1];
  EXPECT_EQ(good.pci_bus_id, "0000:07:00.0");
  EXPECT_EQ(good.pci_path, "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0/0000:07:00.0");
  EXPECT_EQ(good.numa_node, 0);
  EXPECT_EQ(bad.numa_node, 1);
  EXPECT_EQ(good.nvlinks.size(), 12u);
  ASSERT_TRUE(bad.pcie.has_value());
  EXPECT_EQ(bad.pcie->width, 8);
  EXPECT_EQ(bad.ecc_uncorrected_volatile, 2u);
  EXPECT_EQ(bad.ecc_uncorrected_aggregate, 5u);
  EXPECT_TRUE(bad.remap_pending);
  EXPECT_EQ(bad.throttle_reasons, 0x40u);
  EXPECT_EQ(bad.persistence, false);
  EXPECT_EQ(bad.mig, true);
  ASSERT_EQ(system.nics.size(), 2u);
  EXPECT_EQ(system.nics[0].name, "mlx5_0");
  EXPECT_EQ(system.nics[0].pci_bus_id, "0000:08:00.0");
  EXPECT_EQ(system.nics[0].ports.at(0).state, "ACTIVE");
  EXPECT_DOUBLE_EQ(system.nics[0].ports.at(0).rate_gbps, 200.0);
  EXPECT_EQ(system.nics[1].ports.at(0).state, "DOWN");
  EXPECT_FALSE(system.peer_memory_module.has_value());

  // The matrix: NVSwitch links between the GPUs; each GPU next to its own socket's NIC.
  const auto matrix = link_matrix(system);
  EXPECT_EQ(matrix[0], (std::vector<std::string>{"X", "NV12", "PIX", "SYS"}));
  EXPECT_EQ(matrix[1], (std::vector<std::string>{"NV11", "X", "SYS", "PIX"}));

  // Every problem of GPU 1 and the node is a finding; GPU 0 has none.
  report.gpu_count = 0;
  const auto findings = diagnose(report);
  const auto severity_of = [&](const std::string& topic) {
    const Finding* f = find_topic(findings, topic);
    return f == nullptr ? std::string("missing") : std::string(to_string(f->severity));
  };
  EXPECT_EQ(severity_of("NVML"), "ok");
  EXPECT_EQ(severity_of("GPU0 PCIe"), "ok");
  EXPECT_EQ(severity_of("GPU0 ECC"), "ok");
  EXPECT_EQ(severity_of("GPU0 clocks"), "ok");
  EXPECT_EQ(severity_of("GPU1 PCIe"), "warn");
  EXPECT_EQ(severity_of("GPU1 NVLink"), "warn");
  EXPECT_EQ(severity_of("GPU1 ECC"), "error");
  EXPECT_EQ(severity_of("GPU1 remapped rows"), "warn");
  EXPECT_EQ(severity_of("GPU1 clocks"), "warn");
  EXPECT_EQ(severity_of("GPU1 persistence"), "info");
  EXPECT_EQ(severity_of("GPU1 MIG"), "warn");
  EXPECT_EQ(severity_of("RDMA ports"), "warn");
  EXPECT_EQ(severity_of("GPUDirect RDMA"), "warn");
  EXPECT_EQ(exit_status(findings), 1);

  // The text shows the matrix and the ports; JSON the same facts.
  const std::string text = render_text(report, findings);
  EXPECT_TRUE(contains(text, "GPU and network health (NVML, sysfs)")) << text;
  EXPECT_TRUE(contains(text, "NV12")) << text;
  EXPECT_TRUE(contains(text, "mlx5_1/1  DOWN (Disabled)")) << text;
  const auto json = to_json(report, findings);
  EXPECT_EQ(json.at("gpu_health").at("gpus").at(1).at("pcie").at("width"), 8);
  EXPECT_EQ(json.at("gpu_health").at("link_matrix").at(1).at(0), "NV11");
  EXPECT_EQ(json.at("gpu_health").at("nics").at(1).at("ports").at(0).at("state"), "DOWN");
}

TEST(DoctorProbe, PeerMemoryModuleSilencesTheGpuDirectWarning) {
  FakeSysfs sysfs;
  sysfs.load_peermem();
  Report report;
  probe_gpu_system(report, ProbeOptions{sysfs.root().string(), COHORT_FAKE_NVML, 2.0});
  ASSERT_EQ(report.gpu_system.peer_memory_module, "nvidia_peermem");
  const auto gdr = check_gpudirect(report.gpu_system);
  ASSERT_TRUE(gdr.has_value());
  EXPECT_EQ(gdr->severity, Severity::ok);
}
#endif

TEST(DoctorProbe, NoNvmlIsSaidNotHidden) {
  FakeSysfs sysfs;
  Report report;
  probe_gpu_system(report,
                   ProbeOptions{sysfs.root().string(), "/nonexistent/libnvidia-ml.so.1", 2.0});
  EXPECT_FALSE(report.gpu_system.nvml_loaded);
  EXPECT_TRUE(contains(report.gpu_system.nvml_problem, "cannot load"))
      << report.gpu_system.nvml_problem;
  // Two NVIDIA GPUs on the made-up bus and no driver: said, as a warning.
  EXPECT_EQ(check_nvml(report.gpu_system, 0).severity, Severity::warn);
}

}  // namespace
