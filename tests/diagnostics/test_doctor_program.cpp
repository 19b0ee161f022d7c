// Runs the built cohort-doctor on this machine: exit status, what the text says, JSON keys.

#include <cohort/core/device.hpp>
#include <cohort/version.hpp>

#include "doctor_test_support.hpp"
#include "support/test_helpers.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

namespace {

struct DoctorRun {
  int exit_status = -1;
  std::string output;  // stdout only
};

/// `$COHORT_TEST_BINARY_DIR/tools/cohort-doctor/cohort-doctor` (ctest sets the variable to the
/// top build folder), else the path CMake compiled in.
std::string doctor_path() {
  const std::string binary_dir = cohort_test::test_binary_dir();
  if (!binary_dir.empty()) {
    return binary_dir + "/tools/cohort-doctor/cohort-doctor";
  }
#ifdef COHORT_DOCTOR_PROGRAM
  return COHORT_DOCTOR_PROGRAM;
#else
  return {};
#endif
}

/// cohortrun of the same build.
std::string cohortrun_path() {
  const std::string binary_dir = cohort_test::test_binary_dir();
  return binary_dir.empty() ? std::string() : binary_dir + "/tools/cohortrun/cohortrun";
}

/// Runs `environment [prefix] doctor arguments` through the shell (`prefix`: a launcher);
/// stderr goes to the test's stderr, or into the output with `merge`.
DoctorRun run_doctor(const std::string& environment, const std::string& arguments,
                     const std::string& prefix = "", bool merge = false) {
  const std::string command =
      environment + " " + prefix + " '" + doctor_path() + "' " + arguments + (merge ? " 2>&1" : "");
  DoctorRun run;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) {
    return run;
  }
  std::array<char, 4096> buffer{};
  std::size_t got = 0;
  while ((got = std::fread(buffer.data(), 1, buffer.size(), pipe)) > 0) {
    run.output.append(buffer.data(), got);
  }
  const int status = pclose(pipe);
  run.exit_status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return run;
}

class DoctorProgram : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string path = doctor_path();
    ASSERT_FALSE(path.empty()) << "COHORT_TEST_BINARY_DIR is not set (ctest sets it)";
    ASSERT_TRUE(std::filesystem::exists(path)) << path << " is missing: build cohort-doctor";
  }
};

TEST_F(DoctorProgram, TextReportExitsZeroAndSaysWhetherThereIsAGpu) {
  const DoctorRun run = run_doctor("", "");
  EXPECT_EQ(run.exit_status, 0) << run.output;
  EXPECT_NE(run.output.find("cohort-doctor: cohort " + std::string(cohort::version())),
            std::string::npos)
      << run.output;
  if (cohort::cuda_device_count() == 0) {
    EXPECT_NE(run.output.find("No GPU. Reason: " + cohort::cuda_unavailable_reason()),
              std::string::npos)
        << run.output;
    EXPECT_NE(run.output.find("Host backend"), std::string::npos) << run.output;
  } else {
    EXPECT_NE(run.output.find("GPU0  "), std::string::npos) << run.output;
  }
  for (const char* section : {"Versions", "GPUs", "Launch", "Environment", "Host", "/dev/shm",
                              "ulimit -l", "ulimit -s", "Findings", "Summary:"}) {
    EXPECT_NE(run.output.find(section), std::string::npos) << section << " in\n" << run.output;
  }
}

TEST_F(DoctorProgram, JsonOutputParsesAndHasTheKeys) {
  const DoctorRun run = run_doctor("COHORT_DOCTOR_TEST_MARKER=42 NCCL_DEBUG=WARN", "--json");
  EXPECT_EQ(run.exit_status, 0) << run.output;
  nlohmann::json json;
  ASSERT_NO_THROW(json = nlohmann::json::parse(run.output)) << run.output;
  for (const char* key : {"cohort_version", "built_with_cuda", "versions", "gpu_count",
                          "gpu_unavailable_reason", "gpus", "topology", "launcher", "environment",
                          "host", "limits", "findings", "summary", "exit_status"}) {
    EXPECT_TRUE(json.contains(key)) << key;
  }
  EXPECT_EQ(json.at("cohort_version"), cohort::version());
  EXPECT_EQ(json.at("built_with_cuda"), cohort::built_with_cuda());
  EXPECT_EQ(json.at("gpu_count"), cohort::cuda_device_count());
  EXPECT_EQ(json.at("gpus").size(), static_cast<std::size_t>(cohort::cuda_device_count()));
  EXPECT_EQ(json.at("exit_status"), 0);
  EXPECT_EQ(json.at("launcher").at("name"), "none");
  EXPECT_EQ(json.at("environment").at("COHORT_DOCTOR_TEST_MARKER"), "42");
  EXPECT_EQ(json.at("environment").at("NCCL_DEBUG"), "WARN");
  EXPECT_GE(json.at("host").at("cpu_cores_usable").get<int>(), 1);
  EXPECT_TRUE(json.at("limits").contains("memlock"));
  ASSERT_FALSE(json.at("findings").empty());
  for (const auto& finding : json.at("findings")) {
    for (const char* key : {"severity", "topic", "message", "advice"}) {
      EXPECT_TRUE(finding.contains(key)) << finding.dump();
    }
  }
}

TEST_F(DoctorProgram, AnErrorFindingExitsOne) {
  // A rank outside its world: cohort would refuse to start, so the doctor reports an error.
  const DoctorRun run = run_doctor("RANK=9 WORLD_SIZE=8", "--json");
  EXPECT_EQ(run.exit_status, 1) << run.output;
  const nlohmann::json json = nlohmann::json::parse(run.output);
  EXPECT_EQ(json.at("exit_status"), 1);
  bool launcher_error = false;
  for (const auto& finding : json.at("findings")) {
    launcher_error =
        launcher_error || (finding.at("topic") == "launcher" && finding.at("severity") == "error");
  }
  EXPECT_TRUE(launcher_error) << json.at("findings").dump(2);
}

std::size_t occurrences(const std::string& text, const std::string& part) {
  std::size_t count = 0;
  for (std::size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) {
    ++count;
  }
  return count;
}

TEST_F(DoctorProgram, TheStoreTokenIsNeverPrinted) {
  const std::string secret = "hunter2-do-not-print";
  for (const char* format : {"", "--json"}) {
    const DoctorRun run =
        run_doctor("COHORT_STORE_TOKEN=" + secret + " HF_TOKEN=" + secret, format);
    EXPECT_EQ(run.output.find(secret), std::string::npos) << run.output;
    EXPECT_NE(run.output.find("not shown"), std::string::npos) << run.output;
  }
}

TEST_F(DoctorProgram, AHostTransportTheLibraryRefusesIsAnError) {
  const DoctorRun run = run_doctor("COHORT_HOST_TRANSPORT=bogus", "--json");
  EXPECT_EQ(run.exit_status, 1) << run.output;
  const nlohmann::json json = nlohmann::json::parse(run.output);
  bool refused = false;
  for (const auto& finding : json.at("findings")) {
    refused = refused ||
              (finding.at("topic") == "COHORT_HOST_TRANSPORT" && finding.at("severity") == "error");
  }
  EXPECT_TRUE(refused) << json.at("findings").dump(2);
}

TEST_F(DoctorProgram, SaysSharedMemoryRunsOnOneHost) {
  const DoctorRun run = run_doctor("", "--json");
  const nlohmann::json json = nlohmann::json::parse(run.output);
  if (cohort::cuda_device_count() == 0) {
    EXPECT_EQ(json.at("will_run").at("backend"), "shm") << json.at("will_run").dump();
    EXPECT_EQ(json.at("host").at("backend"), "shm");
  }
  EXPECT_TRUE(json.at("inventory").at("memory_total_bytes").get<double>() > 0);
  EXPECT_FALSE(json.at("inventory").at("kernel").get<std::string>().empty());
  EXPECT_FALSE(json.at("inventory").at("cpu_model").get<std::string>().empty());
}

TEST_F(DoctorProgram, AnUnresolvableRendezvousAddressIsAnError) {
  // Rank 1 of 2 under torchrun-like variables: it must reach MASTER_ADDR, which cannot resolve.
  const DoctorRun run = run_doctor(
      "RANK=1 WORLD_SIZE=2 LOCAL_RANK=1 LOCAL_WORLD_SIZE=2 MASTER_ADDR=no-such-host.invalid "
      "MASTER_PORT=29577",
      "--timeout 5");
  EXPECT_EQ(run.exit_status, 1) << run.output;
  EXPECT_NE(run.output.find("[ERROR] rendezvous: no-such-host.invalid:29577 (MASTER_ADDR) does "
                            "not resolve"),
            std::string::npos)
      << run.output;
}

TEST_F(DoctorProgram, UsageErrorsExitTwoWithAGuess) {
  DoctorRun run = run_doctor("", "--collectve", "", true);
  EXPECT_EQ(run.exit_status, 2) << run.output;
  EXPECT_NE(run.output.find("did you mean --collective?"), std::string::npos) << run.output;
  run = run_doctor("", "--min-busbw 100", "", true);
  EXPECT_EQ(run.exit_status, 2) << run.output;
  EXPECT_NE(run.output.find("--min-busbw applies only with --collective"), std::string::npos)
      << run.output;
  run = run_doctor("RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1", "--collective --ranks 2",
                   "", true);
  EXPECT_EQ(run.exit_status, 2) << run.output;
  run = run_doctor("", "--help");
  EXPECT_EQ(run.exit_status, 0);
  EXPECT_NE(run.output.find("--bytes"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("64M"), std::string::npos) << "the default is shown\n" << run.output;
}

TEST_F(DoctorProgram, UnderALauncherOneReportPerNodeAndASummary) {
  const std::string launcher = cohortrun_path();
  ASSERT_TRUE(std::filesystem::exists(launcher)) << launcher;
  const DoctorRun run = run_doctor("", "", "'" + launcher + "' --nproc-per-node 3");
  EXPECT_EQ(run.exit_status, 0) << run.output;
  EXPECT_EQ(occurrences(run.output, "\nFindings\n") + occurrences(run.output, "] Findings\n"), 1u)
      << run.output;
  EXPECT_EQ(occurrences(run.output, "cohort-doctor: node "), 1u) << run.output;
  EXPECT_NE(run.output.find("Summary of 3 rank(s) on 1 node(s)"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("Verdict: PASS"), std::string::npos) << run.output;
}

TEST_F(DoctorProgram, CollectivesRunAcrossRanksAndAFloorFails) {
  const std::string launcher = cohortrun_path();
  ASSERT_TRUE(std::filesystem::exists(launcher)) << launcher;
  DoctorRun run = run_doctor("", "--collective --bytes 256K --iters 3 --json",
                             "'" + launcher + "' --nproc-per-node 2");
  EXPECT_EQ(run.exit_status, 0) << run.output;
  // cohortrun prefixes each line with the rank; the JSON is rank 0's.
  std::string json_text;
  for (std::size_t at = 0; at < run.output.size();) {
    const std::size_t end = run.output.find('\n', at);
    std::string line =
        run.output.substr(at, end == std::string::npos ? std::string::npos : end - at);
    if (line.starts_with("[rank 0] ")) json_text += line.substr(9) + "\n";
    at = end == std::string::npos ? run.output.size() : end + 1;
  }
  nlohmann::json json;
  ASSERT_NO_THROW(json = nlohmann::json::parse(json_text)) << run.output;
  EXPECT_EQ(json.at("verdict"), "pass");
  ASSERT_EQ(json.at("nodes").size(), 1u);
  const auto& collectives = json.at("nodes").at(0).at("collectives");
  ASSERT_EQ(collectives.size(), 4u);
  std::vector<std::string> names;
  for (const auto& c : collectives) {
    names.push_back(c.at("name"));
    EXPECT_EQ(c.at("ranks"), 2);
    EXPECT_EQ(c.at("wrong"), 0);
    EXPECT_GT(c.at("busbw_bytes_per_s").get<double>(), 0.0);
  }
  EXPECT_EQ(names,
            (std::vector<std::string>{"all_reduce", "reduce_scatter", "all_gather", "broadcast"}));
  // A floor no host reaches: every collective fails, and so does the run.
  run = run_doctor("", "--collective --bytes 256K --iters 3 --min-busbw 100000",
                   "'" + launcher + "' --nproc-per-node 2");
  EXPECT_NE(run.exit_status, 0) << run.output;
  EXPECT_NE(run.output.find("below the floor of 1e+05 GB/s (--min-busbw): FAIL"), std::string::npos)
      << run.output;
  EXPECT_NE(run.output.find("Verdict: FAIL"), std::string::npos) << run.output;
}

#ifdef COHORT_FAKE_NVML
TEST_F(DoctorProgram, ReadsGpuHealthThroughNvmlAndSysfs) {
  cohort::doctor::testing::FakeSysfs sysfs;
  const DoctorRun run = run_doctor("", "--nvml-library '" + std::string(COHORT_FAKE_NVML) +
                                           "' --sysfs-root '" + sysfs.root().string() + "'");
  EXPECT_EQ(run.exit_status, 1) << run.output;  // GPU1's uncorrected ECC errors
  for (const char* part : {"GPU and network health (NVML, sysfs)", "driver          550.54.15",
                           "[ERROR] GPU1 ECC", "[WARN]  GPU1 PCIe: Gen3 x8", "[WARN]  GPU1 MIG",
                           "[WARN]  GPUDirect RDMA", "mlx5_1/1  DOWN"}) {
    EXPECT_NE(run.output.find(part), std::string::npos) << part << " in\n" << run.output;
  }
}
#endif

}  // namespace
