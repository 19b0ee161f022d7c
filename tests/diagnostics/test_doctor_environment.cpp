// cohort-doctor's checks on made-up environments: NCCL/CUDA/cohort variables, launchers,
// network interfaces.

#include "checks.hpp"
#include "doctor_test_support.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace {

using cohort::doctor::EnvMap;
using cohort::doctor::Finding;
using cohort::doctor::NetworkInterface;
using cohort::doctor::Severity;
using cohort::doctor::Version;
using namespace cohort::doctor::testing;

// ---- Environment -------------------------------------------------------------------------------

TEST(DoctorEnvironment, KeepsOnlyRelevantVariables) {
  const EnvMap all = {{"NCCL_DEBUG", "WARN"},
                      {"COHORT_RANK", "0"},
                      {"GLOO_SOCKET_IFNAME", "eth0"},
                      {"CUDA_VISIBLE_DEVICES", "0,1"},
                      {"PATH", "/usr/bin"},
                      {"HOME", "/root"},
                      {"NCCLX", "1"},
                      {"MY_NCCL_DEBUG", "1"}};
  const EnvMap relevant = cohort::doctor::relevant_variables(all);
  const EnvMap expected = {{"COHORT_RANK", "0"},
                           {"CUDA_VISIBLE_DEVICES", "0,1"},
                           {"GLOO_SOCKET_IFNAME", "eth0"},
                           {"NCCL_DEBUG", "WARN"}};
  EXPECT_EQ(relevant, expected);
}

TEST(DoctorEnvironment, CleanEnvironmentHasNoFindings) {
  EXPECT_TRUE(cohort::doctor::check_environment({}, Version{2, 28, 9}).empty());
  const EnvMap harmless = {{"NCCL_DEBUG", "WARN"},
                           {"NCCL_P2P_DISABLE", "0"},
                           {"NCCL_SHM_DISABLE", "yes"},
                           {"CUDA_VISIBLE_DEVICES", "0,1"},
                           {"COHORT_LOG_LEVEL", "debug"}};
  const auto findings = cohort::doctor::check_environment(harmless, Version{2, 28, 9});
  EXPECT_TRUE(findings.empty()) << findings.front().topic;
}

TEST(DoctorEnvironment, FlagsSlowAndDebugSettings) {
  const EnvMap environment = {{"NCCL_P2P_DISABLE", "1"},       {"NCCL_SHM_DISABLE", "1"},
                              {"NCCL_IB_DISABLE", "1"},        {"NCCL_PROTO", "LL128"},
                              {"NCCL_ALGO", "Ring"},           {"NCCL_DEBUG", "info"},
                              {"CUDA_LAUNCH_BLOCKING", "1"},   {"CUDA_VISIBLE_DEVICES", ""},
                              {"COHORT_LOG_LEVEL", "verbose"}, {"NCCL_BLOCKING_WAIT", "1"},
                              {"COHORT_ALLOW_SHARED_GPU", "1"}};
  const auto findings = cohort::doctor::check_environment(environment, Version{2, 28, 9});
  const std::vector<std::pair<std::string, Severity>> expected = {
      {"NCCL_P2P_DISABLE", Severity::warn},
      {"NCCL_SHM_DISABLE", Severity::warn},
      {"NCCL_IB_DISABLE", Severity::info},
      {"NCCL_PROTO", Severity::warn},
      {"NCCL_ALGO", Severity::info},
      {"NCCL_DEBUG", Severity::info},
      {"CUDA_LAUNCH_BLOCKING", Severity::warn},
      {"CUDA_VISIBLE_DEVICES", Severity::warn},
      {"NCCL_BLOCKING_WAIT", Severity::info},
      {"COHORT_ALLOW_SHARED_GPU", Severity::info}};
  EXPECT_EQ(findings.size(), expected.size());
  for (const auto& [topic, severity] : expected) {
    const Finding* finding = find_topic(findings, topic);
    ASSERT_NE(finding, nullptr) << topic;
    EXPECT_EQ(finding->severity, severity) << topic;
    if (severity == Severity::warn) {
      EXPECT_FALSE(finding->advice.empty()) << topic;
    }
  }
  EXPECT_EQ(cohort::doctor::exit_status(findings), 0);
  // A log level init() refuses is the library settings' error, not a warning here.
  EXPECT_EQ(find_topic(findings, "COHORT_LOG_LEVEL"), nullptr);
  const auto settings = cohort::doctor::check_library_settings(environment);
  ASSERT_NE(find_topic(settings, "COHORT_LOG_LEVEL"), nullptr);
  EXPECT_EQ(find_topic(settings, "COHORT_LOG_LEVEL")->severity, Severity::error);
}

TEST(DoctorEnvironment, MultiRankGpuNeedsNccl230) {
  const EnvMap environment = {{"NCCL_MULTI_RANK_GPU_ENABLE", "1"}};
  const auto old = cohort::doctor::check_environment(environment, Version{2, 28, 9});
  ASSERT_EQ(old.size(), 1U);
  EXPECT_EQ(old[0].severity, Severity::warn);
  EXPECT_TRUE(contains(old[0].message, "2.28.9")) << old[0].message;
  const auto recent = cohort::doctor::check_environment(environment, Version{2, 30, 7});
  ASSERT_EQ(recent.size(), 1U);
  EXPECT_EQ(recent[0].severity, Severity::info);
}

TEST(DoctorLaunch, NoLauncherIsOneProcess) {
  const auto check = cohort::doctor::check_launch({{"PATH", "/usr/bin"}});
  EXPECT_EQ(check.finding.severity, Severity::ok);
  EXPECT_EQ(check.launcher, "none");
  EXPECT_EQ(check.local_world_size, 1);
  EXPECT_EQ(check.num_nodes, 1);
}

TEST(DoctorLaunch, DetectsTorchrun) {
  const EnvMap environment = {{"RANK", "3"},
                              {"WORLD_SIZE", "8"},
                              {"LOCAL_RANK", "3"},
                              {"LOCAL_WORLD_SIZE", "4"},
                              {"MASTER_ADDR", "10.0.0.1"},
                              {"MASTER_PORT", "29500"}};
  const auto check = cohort::doctor::check_launch(environment);
  EXPECT_EQ(check.finding.severity, Severity::ok) << check.finding.message;
  EXPECT_EQ(check.launcher, "torchrun");
  EXPECT_EQ(check.local_world_size, 4);
  EXPECT_EQ(check.num_nodes, 2);
  EXPECT_TRUE(contains(check.description, "rank 3 of 8")) << check.description;
}

TEST(DoctorLaunch, BrokenLaunchVariablesAreAnError) {
  const auto check = cohort::doctor::check_launch({{"RANK", "9"}, {"WORLD_SIZE", "8"}});
  EXPECT_EQ(check.finding.severity, Severity::error);
  EXPECT_TRUE(contains(check.finding.message, "RANK")) << check.finding.message;
  EXPECT_EQ(check.launcher, "unknown");
  EXPECT_FALSE(check.finding.advice.empty());
  EXPECT_EQ(cohort::doctor::check_launch({{"COHORT_RANK", "abc"}}).finding.severity,
            Severity::error);
}

// ---- Network -----------------------------------------------------------------------------------

TEST(DoctorNetwork, MatchesNcclInterfaceLists) {
  using cohort::doctor::matches_interface_list;
  EXPECT_TRUE(matches_interface_list("eth", "eth0"));
  EXPECT_FALSE(matches_interface_list("eth", "ib0"));
  EXPECT_TRUE(matches_interface_list("ib,eth", "eth1"));
  EXPECT_FALSE(matches_interface_list("^docker,lo", "lo"));
  EXPECT_FALSE(matches_interface_list("^docker,lo", "docker0"));
  EXPECT_TRUE(matches_interface_list("^docker,lo", "eth0"));
  EXPECT_FALSE(matches_interface_list("=eth0", "eth01"));
  EXPECT_TRUE(matches_interface_list("=eth0", "eth0"));
  EXPECT_TRUE(matches_interface_list("eth0:1234", "eth0"));
  EXPECT_FALSE(matches_interface_list("^=eth0", "eth0"));
  EXPECT_TRUE(matches_interface_list("^=eth0", "eth01"));
}

using Names = std::vector<std::string>;

TEST(DoctorNetwork, NcclDefaultPrefersIbThenSkipsDockerAndLoopback) {
  using cohort::doctor::nccl_socket_interfaces;
  EXPECT_EQ(nccl_socket_interfaces({}, sample_interfaces(true)), Names{"ib0"});
  EXPECT_EQ(nccl_socket_interfaces({}, sample_interfaces(false)), Names{"eth0"});
  const std::vector<NetworkInterface> container = {{"lo", "127.0.0.1", true, true},
                                                   {"docker0", "172.17.0.1", false, true}};
  EXPECT_EQ(nccl_socket_interfaces({}, container), Names{"docker0"});
  const std::vector<NetworkInterface> loopback = {{"lo", "127.0.0.1", true, true}};
  EXPECT_EQ(nccl_socket_interfaces({}, loopback), Names{"lo"});
  EXPECT_TRUE(nccl_socket_interfaces({}, {}).empty());
}

TEST(DoctorNetwork, NcclSocketIfnameSelects) {
  using cohort::doctor::nccl_socket_interfaces;
  const auto interfaces = sample_interfaces(true);
  EXPECT_EQ(nccl_socket_interfaces({{"NCCL_SOCKET_IFNAME", "eth"}}, interfaces), Names{"eth0"});
  EXPECT_EQ(nccl_socket_interfaces({{"NCCL_SOCKET_IFNAME", "^eth,ib"}}, interfaces),
            (Names{"lo", "docker0"}));
  // NCCL ignores a value of one character.
  EXPECT_EQ(nccl_socket_interfaces({{"NCCL_SOCKET_IFNAME", "e"}}, interfaces), Names{"ib0"});
}

TEST(DoctorNetwork, NcclSocketMatchingNothingFails) {
  using cohort::doctor::check_nccl_socket;
  const auto interfaces = sample_interfaces(false);
  const EnvMap bogus = {{"NCCL_SOCKET_IFNAME", "bond9"}};
  const Finding with_gpus = check_nccl_socket(bogus, interfaces, 1, true);
  EXPECT_EQ(with_gpus.severity, Severity::error);
  EXPECT_TRUE(contains(with_gpus.message, "matches none")) << with_gpus.message;
  EXPECT_TRUE(contains(with_gpus.message, "eth0 (10.0.0.2)")) << with_gpus.message;
  EXPECT_EQ(check_nccl_socket(bogus, interfaces, 1, false).severity, Severity::warn);
  const Finding fine = check_nccl_socket({}, interfaces, 4, true);
  EXPECT_EQ(fine.severity, Severity::ok);
  EXPECT_TRUE(contains(fine.message, "eth0")) << fine.message;
}

TEST(DoctorNetwork, LoopbackOnlyFailsAcrossNodes) {
  using cohort::doctor::check_nccl_socket;
  const std::vector<NetworkInterface> loopback = {{"lo", "127.0.0.1", true, true}};
  EXPECT_EQ(check_nccl_socket({}, loopback, 1, true).severity, Severity::ok);
  EXPECT_EQ(check_nccl_socket({}, loopback, 2, true).severity, Severity::error);
  const EnvMap forced = {{"NCCL_SOCKET_IFNAME", "lo"}};
  EXPECT_EQ(check_nccl_socket(forced, sample_interfaces(false), 2, true).severity, Severity::error);
}

TEST(DoctorNetwork, GlooSocket) {
  using cohort::doctor::check_gloo_socket;
  const auto interfaces = sample_interfaces(false);
  const Finding named =
      check_gloo_socket({{"GLOO_SOCKET_IFNAME", "eth0"}}, interfaces, std::nullopt, 2);
  EXPECT_EQ(named.severity, Severity::ok);
  EXPECT_TRUE(contains(named.message, "eth0 (10.0.0.2)")) << named.message;
  const Finding absent =
      check_gloo_socket({{"GLOO_SOCKET_IFNAME", "eth0,wlan0"}}, interfaces, std::nullopt, 1);
  EXPECT_EQ(absent.severity, Severity::warn);
  EXPECT_TRUE(contains(absent.message, "wlan0")) << absent.message;
  EXPECT_EQ(check_gloo_socket({}, interfaces, std::string("10.0.0.2"), 2).severity, Severity::ok);
  // One node: 127.0.0.1, whatever the host name does.
  const Finding one = check_gloo_socket({}, interfaces, std::nullopt, 1);
  EXPECT_EQ(one.severity, Severity::ok);
  EXPECT_TRUE(contains(one.message, "127.0.0.1")) << one.message;
  // Across nodes the route to the store host decides, not the host name.
  const Finding routed =
      check_gloo_socket({{"MASTER_ADDR", "10.0.0.1"}}, interfaces, std::string("127.0.1.1"), 2);
  EXPECT_EQ(routed.severity, Severity::ok);
  EXPECT_TRUE(contains(routed.message, "route to the store host 10.0.0.1")) << routed.message;
  const Finding unresolved =
      check_gloo_socket({{"COHORT_MASTER_ADDR", "node0"}}, interfaces, std::nullopt, 2);
  EXPECT_EQ(unresolved.severity, Severity::ok);
  EXPECT_TRUE(contains(unresolved.message, "does not resolve, is not needed"))
      << unresolved.message;
  const Finding loopback =
      check_gloo_socket({{"MASTER_ADDR", "127.0.0.1"}}, interfaces, std::string("10.0.0.2"), 2);
  EXPECT_EQ(loopback.severity, Severity::warn);
  EXPECT_TRUE(contains(loopback.message, "loopback")) << loopback.message;
}

}  // namespace
