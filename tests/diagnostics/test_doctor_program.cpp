// Runs the built cohort-doctor on this machine: exit status, what the text says, JSON keys.

#include <cohort/core/device.hpp>
#include <cohort/version.hpp>

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

/// Runs `environment doctor arguments` through the shell; stderr goes to the test's stderr.
DoctorRun run_doctor(const std::string& environment, const std::string& arguments) {
  const std::string command = environment + " '" + doctor_path() + "' " + arguments;
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

TEST_F(DoctorProgram, AnErrorFindingExitsTwo) {
  // A rank outside its world: cohort would refuse to start, so the doctor reports an error.
  const DoctorRun run = run_doctor("RANK=9 WORLD_SIZE=8", "--json");
  EXPECT_EQ(run.exit_status, 2) << run.output;
  const nlohmann::json json = nlohmann::json::parse(run.output);
  EXPECT_EQ(json.at("exit_status"), 2);
  bool launcher_error = false;
  for (const auto& finding : json.at("findings")) {
    launcher_error =
        launcher_error || (finding.at("topic") == "launcher" && finding.at("severity") == "error");
  }
  EXPECT_TRUE(launcher_error) << json.at("findings").dump(2);
}

}  // namespace
