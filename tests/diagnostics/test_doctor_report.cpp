// cohort-doctor's whole report on made-up machines: findings, exit status, text and JSON.

#include "checks.hpp"
#include "doctor_test_support.hpp"
#include "report.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace {

using cohort::doctor::Finding;
using cohort::doctor::GpuInfo;
using cohort::doctor::ResourceLimit;
using cohort::doctor::Severity;
using cohort::doctor::Version;
using namespace cohort::doctor::testing;

cohort::doctor::Report host_report() {
  cohort::doctor::Report report;
  report.cohort_version = "0.1.0";
  report.environment = {{"PATH", "/usr/bin"}, {"NCCL_DEBUG", "WARN"}};
  report.hostname = "node1";
  report.hostname_address = "10.0.0.2";
  report.cpu_cores_online = 16;
  report.cpu_cores_usable = 8;
  report.interfaces = sample_interfaces(false);
  report.shm = cohort::doctor::FileSystemSize{64 * kMiB, 60 * kMiB};
  report.memlock = ResourceLimit{};
  report.stack = ResourceLimit{8 * kMiB, std::nullopt};
  return report;
}

cohort::doctor::Report two_gpu_report() {
  cohort::doctor::Report report = host_report();
  report.built_with_cuda = true;
  report.cuda_architectures = "90";
  report.cuda_runtime_code = 13000;
  report.cuda_driver_code = 13000;
  report.libraries = {{"NCCL", Version{2, 28, 9}, Version{2, 28, 9}},
                      {"cuBLAS", Version{13, 1, 0}, Version{13, 1, 0}},
                      {"cuDNN", Version{9, 19, 0}, Version{9, 19, 0}}};
  report.gpu_count = 2;
  for (int index = 0; index < 2; ++index) {
    GpuInfo info = gpu(9, 0);
    info.index = index;
    info.name = "NVIDIA H200";
    info.total_memory_bytes = 141 * kGiB;
    info.multiprocessors = 132;
    info.concurrent_managed_access = true;
    report.gpus.push_back(info);
  }
  report.peer_links = full_mesh(2);
  report.nvlink_note = "cannot be determined";
  report.nccl_backend = true;
  // NVML: two healthy GPUs.
  report.gpu_system.nvml_loaded = true;
  report.gpu_system.driver_version = "580.65.06";
  report.gpu_system.nvml_version = "13.580.65.06";
  report.gpu_system.nvidia_pci_devices = 2;
  for (int index = 0; index < 2; ++index) {
    cohort::doctor::GpuHealth health;
    health.index = index;
    health.name = "NVIDIA H200";
    health.pcie = cohort::doctor::PcieLink{5, 16, 5, 16};
    health.ecc_enabled = true;
    health.ecc_uncorrected_volatile = 0;
    health.ecc_uncorrected_aggregate = 0;
    health.throttle_reasons = 0x1;
    health.persistence = true;
    health.mig = false;
    report.gpu_system.gpus.push_back(health);
  }
  return report;
}

TEST(DoctorReport, DriverTooOldMakesExitStatusOne) {
  auto report = two_gpu_report();
  report.cuda_driver_code = 12040;
  const auto findings = cohort::doctor::diagnose(report);
  const Finding* driver = find_topic(findings, "CUDA driver");
  ASSERT_NE(driver, nullptr);
  EXPECT_EQ(driver->severity, Severity::error);
  EXPECT_EQ(cohort::doctor::exit_status(findings), 1);
}

TEST(DoctorReport, HealthyGpuMachineOnlyWarnsAboutShm) {
  const auto report = two_gpu_report();
  const auto findings = cohort::doctor::diagnose(report);
  EXPECT_EQ(cohort::doctor::exit_status(findings), 0);
  for (const Finding& finding : findings) {
    if (finding.severity == Severity::warn || finding.severity == Severity::error) {
      EXPECT_EQ(finding.topic, "/dev/shm") << finding.message;
    }
  }
  EXPECT_NE(find_topic(findings, "GPU1 architecture"), nullptr);
  EXPECT_NE(find_topic(findings, "peer access"), nullptr);
  EXPECT_NE(find_topic(findings, "NCCL socket interface"), nullptr);
}

TEST(DoctorReport, BuildWithoutCudaIsNotAnError) {
  auto report = host_report();
  report.gpu_unavailable_reason = "cohort was built without CUDA (COHORT_WITH_CUDA=OFF)";
  const auto findings = cohort::doctor::diagnose(report);
  EXPECT_EQ(cohort::doctor::exit_status(findings), 0);
  const Finding* build = find_topic(findings, "build");
  ASSERT_NE(build, nullptr);
  EXPECT_EQ(build->severity, Severity::info);
  EXPECT_EQ(find_topic(findings, "CUDA driver"), nullptr);
  EXPECT_EQ(find_topic(findings, "NCCL socket interface"), nullptr);
  const std::string text = cohort::doctor::render_text(report, findings);
  EXPECT_TRUE(contains(text, "built without CUDA")) << text;
  EXPECT_TRUE(contains(text, "No GPU")) << text;
  EXPECT_TRUE(contains(text, "Host backend")) << text;
}

TEST(DoctorReport, TextShowsGpusAndTopology) {
  const auto report = two_gpu_report();
  const std::string text = cohort::doctor::render_text(report, cohort::doctor::diagnose(report));
  for (const std::string part : {"NVIDIA H200", "141 GiB", "compute capability 9.0",
                                 "132 multiprocessors", "P2P/0+A", "NVLink: cannot be determined",
                                 "NCCL_DEBUG=WARN", "2.28.9", "exit status 0", "--shm-size=1g"}) {
    EXPECT_TRUE(contains(text, part)) << "missing '" << part << "' in:\n" << text;
  }
  EXPECT_FALSE(contains(text, "Host backend")) << text;
}

TEST(DoctorReport, JsonHasTheSameFacts) {
  const auto report = two_gpu_report();
  const auto findings = cohort::doctor::diagnose(report);
  const auto json = cohort::doctor::to_json(report, findings);
  EXPECT_EQ(json.at("gpu_count"), 2);
  ASSERT_EQ(json.at("gpus").size(), 2U);
  EXPECT_EQ(json.at("gpus")[1].at("compute_capability"), "9.0");
  EXPECT_EQ(json.at("topology").at("peer_links").size(), 2U);
  EXPECT_EQ(json.at("versions").at("nccl").at("loaded"), "2.28.9");
  EXPECT_EQ(json.at("versions").at("cuda_driver"), "13.0");
  EXPECT_EQ(json.at("environment").at("NCCL_DEBUG"), "WARN");
  EXPECT_FALSE(json.at("environment").contains("PATH"));
  EXPECT_EQ(json.at("limits").at("memlock").at("soft"), "unlimited");
  EXPECT_EQ(json.at("limits").at("shm").at("total_bytes"), 64 * kMiB);
  EXPECT_EQ(json.at("host").at("backend"), "nccl");
  EXPECT_EQ(json.at("findings").size(), findings.size());
  EXPECT_EQ(json.at("summary").at("warn"), 1);
  EXPECT_EQ(json.at("exit_status"), 0);
}

}  // namespace
