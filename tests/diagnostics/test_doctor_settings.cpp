// cohort-doctor on the settings the library reads, what will run, the rendezvous address,
// secrets, and the checks across ranks (collectives, nodes, the summary).

#include "checks.hpp"
#include "doctor_test_support.hpp"

#include <cohort/comm/transport.hpp>
#include <cohort/launch/rendezvous.hpp>

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

namespace {

using namespace cohort::doctor;
using namespace cohort::doctor::testing;

const Finding* with_topic(const std::vector<Finding>& findings, const std::string& topic) {
  return find_topic(findings, topic);
}

// ---- The library's own parsers ----------------------------------------------------------------

TEST(DoctorSettings, AValueTheLibraryRefusesIsAnError) {
  const EnvMap bad = {{"COHORT_HOST_TRANSPORT", "bogus"},
                      {"COHORT_TIMEOUT", "ten minutes"},
                      {"COHORT_DEBUG_COLLECTIVES", "maybe"},
                      {"COHORT_LOG_LEVEL", "loud"},
                      {"COHORT_STORE", "redis"}};
  const auto findings = check_library_settings(bad);
  for (const char* topic : {"COHORT_HOST_TRANSPORT", "COHORT_TIMEOUT", "COHORT_DEBUG_COLLECTIVES",
                            "COHORT_LOG_LEVEL", "COHORT_STORE"}) {
    const Finding* f = with_topic(findings, topic);
    ASSERT_NE(f, nullptr) << topic;
    EXPECT_EQ(f->severity, Severity::error) << topic;
    EXPECT_TRUE(contains(f->message, "cohort refuses it")) << f->message;
  }
  EXPECT_TRUE(contains(with_topic(findings, "COHORT_HOST_TRANSPORT")->message, "'bogus'"));
  EXPECT_EQ(exit_status(findings), 1);
}

TEST(DoctorSettings, ValuesTheLibraryTakesAreNotFlagged) {
  const EnvMap good = {{"COHORT_HOST_TRANSPORT", "shm"},      {"COHORT_TIMEOUT", "90s"},
                       {"COHORT_DEBUG_COLLECTIVES", "off"},   {"COHORT_LOG_LEVEL", "debug"},
                       {"COHORT_STORE", "file:/shared/rdzv"}, {"COHORT_PRESET", "ci"}};
  const auto findings = check_library_settings(good);
  for (const Finding& f : findings) EXPECT_EQ(f.severity, Severity::ok) << f.topic << f.message;
  ASSERT_NE(with_topic(findings, "COHORT_TIMEOUT"), nullptr);
  EXPECT_TRUE(contains(with_topic(findings, "COHORT_TIMEOUT")->message, "1.5 min"))
      << with_topic(findings, "COHORT_TIMEOUT")->message;
}

TEST(DoctorSettings, AMisspeltVariableNamesTheOneMeant) {
  const auto findings = check_library_settings({{"COHORT_TIMOUT", "60"}});
  ASSERT_EQ(findings.size(), 1u);
  EXPECT_EQ(findings[0].severity, Severity::warn);
  EXPECT_TRUE(contains(findings[0].message, "did you mean COHORT_TIMEOUT?")) << findings[0].message;
}

TEST(DoctorSettings, SecretsAreNeverShown) {
  EXPECT_TRUE(is_secret("COHORT_STORE_TOKEN"));
  EXPECT_TRUE(is_secret("WANDB_API_KEY"));
  EXPECT_TRUE(is_secret("HF_TOKEN"));
  EXPECT_TRUE(is_secret("DB_PASSWORD"));
  EXPECT_FALSE(is_secret("NCCL_IB_PKEY"));
  EXPECT_FALSE(is_secret("COHORT_STORE"));
  EXPECT_EQ(shown_value("COHORT_STORE_TOKEN", "hunter2"), "(set, 7 characters, not shown)");
  EXPECT_EQ(shown_value("NCCL_DEBUG", "WARN"), "WARN");
}

// ---- What will run: the library's decisions
// ------------------------------------------------------

TEST(DoctorTransport, TheLibraryDecidesWhichHostCommunicatorRuns) {
  using cohort::Backend;
  using cohort::HostTransport;
  const std::vector<int> one_host = {4};
  const std::vector<int> two_even = {2, 2};
  const std::vector<int> uneven = {3, 1};
  const std::vector<int> one_each = {1, 1};
  EXPECT_EQ(cohort::host_backend_for(HostTransport::automatic, one_host), Backend::shm);
  EXPECT_EQ(cohort::host_backend_for(HostTransport::automatic, two_even), Backend::hierarchical);
  EXPECT_EQ(cohort::host_backend_for(HostTransport::automatic, uneven), Backend::gloo);
  EXPECT_EQ(cohort::host_backend_for(HostTransport::automatic, one_each), Backend::gloo);
  EXPECT_EQ(cohort::host_backend_for(HostTransport::gloo, one_host), Backend::gloo);
  EXPECT_EQ(cohort::host_backend_for(HostTransport::shm, two_even), Backend::hierarchical);
  EXPECT_THROW((void)cohort::parse_host_transport("bogus"), cohort::InvalidArgument);
  EXPECT_EQ(cohort::parse_host_transport("automatic"), HostTransport::automatic);
}

TEST(DoctorTransport, ReportsSharedMemoryWhereSharedMemoryRuns) {
  const EnvMap cohortrun = {{"COHORT_RANK", "0"},
                            {"COHORT_WORLD_SIZE", "4"},
                            {"COHORT_LOCAL_RANK", "0"},
                            {"COHORT_LOCAL_WORLD_SIZE", "4"},
                            {"COHORT_MASTER_ADDR", "127.0.0.1"},
                            {"COHORT_MASTER_PORT", "29511"},
                            {"COHORT_STORE_EXTERNAL", "1"}};
  const TransportCheck check = check_transport(cohortrun, false);
  EXPECT_EQ(check.backend_name, "shm");
  EXPECT_EQ(check.backend.severity, Severity::ok);
  EXPECT_TRUE(contains(check.backend.message, "4 ranks on 1 host")) << check.backend.message;
  EXPECT_FALSE(contains(check.backend.message, "Gloo")) << check.backend.message;
  EXPECT_EQ(check.store_kind, "tcp");
  EXPECT_TRUE(check.store_expected_up);

  EnvMap forced = cohortrun;
  forced["COHORT_HOST_TRANSPORT"] = "gloo";
  const TransportCheck gloo = check_transport(forced, false);
  EXPECT_EQ(gloo.backend_name, "gloo");
  EXPECT_EQ(gloo.backend.severity, Severity::warn);

  forced["COHORT_HOST_TRANSPORT"] = "bogus";
  const TransportCheck refused = check_transport(forced, false);
  EXPECT_EQ(refused.backend.severity, Severity::error);
  EXPECT_EQ(refused.backend_name, "unknown");
}

TEST(DoctorTransport, TwoNodesOfTwoRunHierarchical) {
  const EnvMap torchrun = {{"RANK", "0"},
                           {"WORLD_SIZE", "4"},
                           {"LOCAL_RANK", "0"},
                           {"LOCAL_WORLD_SIZE", "2"},
                           {"GROUP_RANK", "0"},
                           {"GROUP_WORLD_SIZE", "2"},
                           {"MASTER_ADDR", "node0"},
                           {"MASTER_PORT", "29500"},
                           {"TORCHELASTIC_RUN_ID", "x"}};
  const TransportCheck check = check_transport(torchrun, false);
  EXPECT_EQ(check.backend_name, "hierarchical") << check.backend.message;
}

TEST(DoctorTransport, StorePlanIsTheOneConnectStoreOpens) {
  cohort::LaunchInfo info;
  info.world_size = 2;
  info.launcher = cohort::Launcher::torchrun;
  info.master_addr = "node0";
  info.master_port = 29400;
  const cohort::EnvLookup none = [](std::string_view) { return std::optional<std::string>(); };
  const cohort::StorePlan tcp = cohort::plan_store(info, none);
  EXPECT_EQ(tcp.kind, cohort::StorePlan::Kind::tcp);
  EXPECT_TRUE(tcp.serves);
  EXPECT_EQ(tcp.describe(),
            "cohort's TCP store at node0:29400 (this rank serves it), without a token");
  const cohort::EnvLookup token = [](std::string_view name) {
    return name == "COHORT_STORE_TOKEN" ? std::optional<std::string>("s3cret")
                                        : std::optional<std::string>();
  };
  const cohort::StorePlan with_token = cohort::plan_store(info, token);
  EXPECT_TRUE(with_token.has_token);
  EXPECT_FALSE(contains(with_token.describe(), "s3cret"));
  const cohort::EnvLookup redis = [](std::string_view name) {
    return name == "COHORT_STORE" ? std::optional<std::string>("redis")
                                  : std::optional<std::string>();
  };
  EXPECT_THROW((void)cohort::plan_store(info, redis), cohort::InvalidArgument);
}

// ---- The rendezvous address
// ----------------------------------------------------------------------

TEST(DoctorRendezvous, AnAddressThatDoesNotResolveIsAnError) {
  RendezvousFacts facts;
  facts.host = "node-17.invalid";
  facts.port = 29500;
  facts.source = "MASTER_ADDR";
  facts.resolve_error = "Name or service not known";
  const Finding finding = check_rendezvous(facts, 2, false);
  EXPECT_EQ(finding.severity, Severity::error);
  EXPECT_TRUE(contains(finding.message, "node-17.invalid:29500 (MASTER_ADDR) does not resolve"))
      << finding.message;
}

TEST(DoctorRendezvous, LoopbackAcrossNodesIsAnError) {
  RendezvousFacts facts;
  facts.host = "localhost";
  facts.port = 29500;
  facts.source = "MASTER_ADDR";
  facts.addresses = {"127.0.0.1", "::1"};
  facts.reach = RendezvousFacts::Reach::open;
  EXPECT_EQ(check_rendezvous(facts, 2, false).severity, Severity::error);
  EXPECT_EQ(check_rendezvous(facts, 1, false).severity, Severity::ok);
}

TEST(DoctorRendezvous, NothingListeningIsAnErrorOnlyWhenTheLauncherShouldServe) {
  RendezvousFacts facts;
  facts.host = "node0";
  facts.port = 29500;
  facts.source = "MASTER_ADDR";
  facts.addresses = {"10.0.0.1"};
  facts.reach = RendezvousFacts::Reach::refused;
  EXPECT_EQ(check_rendezvous(facts, 2, true).severity, Severity::error);
  const Finding early = check_rendezvous(facts, 2, false);
  EXPECT_EQ(early.severity, Severity::info);
  EXPECT_TRUE(contains(early.message, "rank 0 starts the store")) << early.message;
  RendezvousFacts none;
  EXPECT_EQ(check_rendezvous(none, 1, false).severity, Severity::ok);
}

// ---- Across ranks
// --------------------------------------------------------------------------------

TEST(DoctorCollectives, BusFactorsAreNcclTests) {
  EXPECT_DOUBLE_EQ(bus_factor("all_reduce", 8), 1.75);
  EXPECT_DOUBLE_EQ(bus_factor("reduce_scatter", 8), 0.875);
  EXPECT_DOUBLE_EQ(bus_factor("all_gather", 4), 0.75);
  EXPECT_DOUBLE_EQ(bus_factor("broadcast", 4), 1.0);
  EXPECT_DOUBLE_EQ(bus_factor("all_reduce", 1), 0.0);
}

TEST(DoctorCollectives, AFloorFailsSlowCollectivesAndWrongValuesFailAlways) {
  std::vector<CollectiveResult> results = {{"all_reduce", 8, 1 << 30, 9000.0, 119.3, 208.8, 0},
                                           {"all_gather", 8, 1 << 30, 9000.0, 119.3, 104.4, 0},
                                           {"broadcast", 8, 1 << 30, 9000.0, 119.3, 119.3, 3}};
  auto findings = check_collectives(results, 150.0);
  ASSERT_EQ(findings.size(), 3u);
  EXPECT_EQ(findings[0].severity, Severity::ok);
  EXPECT_TRUE(contains(findings[0].message, "floor 150 GB/s: pass")) << findings[0].message;
  EXPECT_EQ(findings[1].severity, Severity::error);
  EXPECT_TRUE(contains(findings[1].message, "below the floor of 150 GB/s")) << findings[1].message;
  EXPECT_EQ(findings[2].severity, Severity::error);
  EXPECT_TRUE(contains(findings[2].message, "3 WRONG values")) << findings[2].message;
  findings = check_collectives(results, 0.0);
  EXPECT_EQ(findings[1].severity, Severity::ok);  // no floor: measured only
}

RankSummary rank_on(int rank, int node, const std::string& host, const std::string& driver) {
  RankSummary r;
  r.rank = rank;
  r.node_rank = node;
  r.host = host;
  r.fingerprint = {{"cohort", "0.1.0"}, {"driver", driver}, {"GPUs", "8"}};
  return r;
}

TEST(DoctorFleet, NodesThatDifferAreNamed) {
  std::vector<RankSummary> ranks = {rank_on(0, 0, "node0", "550.54.15"),
                                    rank_on(1, 0, "node0", "550.54.15"),
                                    rank_on(2, 1, "node1", "550.54.15")};
  EXPECT_EQ(check_nodes_agree(ranks).severity, Severity::ok);
  ranks.push_back(rank_on(3, 1, "node1", "535.104.05"));
  const Finding differ = check_nodes_agree(ranks);
  EXPECT_EQ(differ.severity, Severity::warn);
  EXPECT_TRUE(contains(differ.message, "driver: 535.104.05 on node1 550.54.15 on node0"))
      << differ.message;
}

TEST(DoctorFleet, SummaryHasOneLinePerNodeAndEachError) {
  std::vector<RankSummary> ranks = {rank_on(0, 0, "node0", "1"), rank_on(1, 0, "node0", "1"),
                                    rank_on(2, 1, "node1", "1"), rank_on(3, 1, "node1", "1")};
  ranks[3].errors = 1;
  ranks[3].exit_status = 1;
  ranks[3].problems.push_back(Finding{Severity::error, "GPU1 ECC", "uncorrected errors", ""});
  const std::string text = render_summary(ranks, check_nodes_agree(ranks));
  EXPECT_TRUE(contains(text, "Summary of 4 rank(s) on 2 node(s)")) << text;
  EXPECT_TRUE(contains(text, "node 0  node0  ranks 0,1: 0 error(s)")) << text;
  EXPECT_TRUE(contains(text, "node 1  node1  ranks 2,3: 1 error(s)")) << text;
  EXPECT_TRUE(contains(text, "rank 3 (node1) [ERROR] GPU1 ECC: uncorrected errors")) << text;
  EXPECT_TRUE(contains(text, "Verdict: FAIL")) << text;
}

}  // namespace
