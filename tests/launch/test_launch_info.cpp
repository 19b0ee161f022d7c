// LaunchInfo from launcher environments, Slurm host lists, and the store connect_store picks.

#include <cohort/core/error.hpp>
#include <cohort/launch/launch_info.hpp>
#include <cohort/launch/rendezvous.hpp>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace cohort {
namespace {

using Env = std::map<std::string, std::string, std::less<>>;

EnvLookup lookup(Env env) {
  return [env = std::move(env)](std::string_view name) -> std::optional<std::string> {
    auto found = env.find(name);
    if (found == env.end()) return std::nullopt;
    return found->second;
  };
}

LaunchInfo read(const Env& env) {
  return LaunchInfo::from_environment(lookup(env));
}

// ---- Environments that parse ----

struct Expected {
  Launcher launcher;
  int rank;
  int world_size;
  int local_rank;
  int local_world_size;
  int node_rank;
  int num_nodes;
  std::string master_addr;
  int master_port;
  std::string run_id;  // empty: not checked here
  bool store_is_external = false;
};

struct GoodCase {
  std::string name;
  Env env;
  Expected expected;
};

const Env kCohortrunEnv{{"COHORT_RANK", "5"},
                        {"COHORT_WORLD_SIZE", "8"},
                        {"COHORT_LOCAL_RANK", "1"},
                        {"COHORT_LOCAL_WORLD_SIZE", "4"},
                        {"COHORT_NODE_RANK", "1"},
                        {"COHORT_NUM_NODES", "2"},
                        {"COHORT_MASTER_ADDR", "10.0.0.1"},
                        {"COHORT_MASTER_PORT", "40000"},
                        {"COHORT_RUN_ID", "run-abc"},
                        {"COHORT_STORE_EXTERNAL", "1"}};

const Env kTorchrunEnv{{"RANK", "3"},
                       {"WORLD_SIZE", "8"},
                       {"LOCAL_RANK", "3"},
                       {"LOCAL_WORLD_SIZE", "4"},
                       {"GROUP_RANK", "0"},
                       {"GROUP_WORLD_SIZE", "2"},
                       {"MASTER_ADDR", "10.0.0.2"},
                       {"MASTER_PORT", "29501"},
                       {"TORCHELASTIC_RUN_ID", "job7"}};

const Env kOpenMpiEnv{{"OMPI_COMM_WORLD_RANK", "6"},        {"OMPI_COMM_WORLD_SIZE", "8"},
                      {"OMPI_COMM_WORLD_LOCAL_RANK", "2"},  {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"},
                      {"OMPI_MCA_ess_base_jobid", "12345"}, {"MASTER_ADDR", "host0"}};

const Env kSlurmEnv{{"SLURM_PROCID", "5"},
                    {"SLURM_NTASKS", "8"},
                    {"SLURM_LOCALID", "1"},
                    {"SLURM_NODEID", "1"},
                    {"SLURM_NNODES", "2"},
                    {"SLURM_TASKS_PER_NODE", "4(x2)"},
                    {"SLURM_JOB_NODELIST", "gpu[007-009,012],cpu01"},
                    {"SLURM_JOB_ID", "99"},
                    {"SLURM_STEP_ID", "3"}};

Env merged(std::initializer_list<Env> parts) {
  Env out;
  for (const Env& part : parts) out.insert(part.begin(), part.end());
  return out;
}

Env with(Env env, const std::string& name, const std::string& value) {
  env[name] = value;
  return env;
}

std::vector<GoodCase> good_cases() {
  return {
      {"Nothing", {}, {Launcher::none, 0, 1, 0, 1, 0, 1, "127.0.0.1", 29500, ""}},
      {"Cohortrun",
       kCohortrunEnv,
       {Launcher::cohortrun, 5, 8, 1, 4, 1, 2, "10.0.0.1", 40000, "run-abc", true}},
      {"Torchrun", kTorchrunEnv, {Launcher::torchrun, 3, 8, 3, 4, 0, 2, "10.0.0.2", 29501, "job7"}},
      {"TorchrunOneNodeNoMaster",
       {{"RANK", "1"},
        {"WORLD_SIZE", "2"},
        {"LOCAL_RANK", "1"},
        {"LOCAL_WORLD_SIZE", "2"},
        {"TORCHELASTIC_RUN_ID", "none"}},
       {Launcher::torchrun, 1, 2, 1, 2, 0, 1, "127.0.0.1", 29500, "127.0.0.1-29500"}},
      {"OpenMpi", kOpenMpiEnv, {Launcher::open_mpi, 6, 8, 2, 4, 1, 2, "host0", 29500, "12345"}},
      {"Mpich",
       {{"PMI_RANK", "2"}, {"PMI_SIZE", "3"}, {"MPI_LOCALRANKID", "2"}, {"MPI_LOCALNRANKS", "3"}},
       {Launcher::mpich, 2, 3, 2, 3, 0, 1, "127.0.0.1", 29500, "127.0.0.1-29500"}},
      {"Slurm", kSlurmEnv, {Launcher::slurm, 5, 8, 1, 4, 1, 2, "gpu007", 29500, "99.3"}},
      {"SlurmJobNumNodesWithoutTasksPerNode",
       {{"SLURM_PROCID", "2"},
        {"SLURM_NTASKS", "8"},
        {"SLURM_LOCALID", "2"},
        {"SLURM_NODEID", "0"},
        {"SLURM_JOB_NUM_NODES", "2"},
        {"SLURM_JOB_NODELIST", "node[01-04]"},
        {"SLURM_JOB_ID", "7"}},
       {Launcher::slurm, 2, 8, 2, 4, 0, 2, "node01", 29500, "7"}},
      {"SlurmUnevenTasksPerNode",
       {{"SLURM_PROCID", "6"},
        {"SLURM_NTASKS", "7"},
        {"SLURM_LOCALID", "0"},
        {"SLURM_NODEID", "3"},
        {"SLURM_NNODES", "4"},
        {"SLURM_TASKS_PER_NODE", "2(x3),1"},
        {"SLURM_JOB_NODELIST", "a,b,c,d"}},
       {Launcher::slurm, 6, 7, 0, 1, 3, 4, "a", 29500, "a-29500"}},
      {"SlurmOneNode",
       {{"SLURM_PROCID", "1"},
        {"SLURM_NTASKS", "2"},
        {"SLURM_LOCALID", "1"},
        {"SLURM_NNODES", "1"},
        {"SLURM_JOB_NODELIST", "host17"}},
       {Launcher::slurm, 1, 2, 1, 2, 0, 1, "127.0.0.1", 29500, ""}},
      {"CohortrunOverTorchrunAndSlurm",
       merged({kCohortrunEnv, kTorchrunEnv, kSlurmEnv}),
       {Launcher::cohortrun, 5, 8, 1, 4, 1, 2, "10.0.0.1", 40000, "run-abc", true}},
      {"TorchrunInsideSlurm",
       merged({kTorchrunEnv, kSlurmEnv}),
       {Launcher::torchrun, 3, 8, 3, 4, 0, 2, "10.0.0.2", 29501, "job7"}},
      {"OpenMpiOverMpichAndSlurm",
       merged({kOpenMpiEnv, {{"PMI_RANK", "0"}, {"PMI_SIZE", "1"}}, kSlurmEnv}),
       {Launcher::open_mpi, 6, 8, 2, 4, 1, 2, "host0", 29500, "12345"}},
      {"PmiUnderSrunTakesLocalRanksFromSlurm",
       merged({{{"PMI_RANK", "5"}, {"PMI_SIZE", "8"}}, kSlurmEnv}),
       {Launcher::mpich, 5, 8, 1, 4, 1, 2, "gpu007", 29500, "99.3"}},
      {"MasterAddrOverridesSlurmGuess",
       merged({kSlurmEnv, {{"MASTER_ADDR", "10.1.1.1"}, {"MASTER_PORT", "1234"}}}),
       {Launcher::slurm, 5, 8, 1, 4, 1, 2, "10.1.1.1", 1234, "99.3"}},
      {"CohortMasterAddrOverridesMasterAddr",
       merged({kTorchrunEnv, {{"COHORT_MASTER_ADDR", "10.9.9.9"}, {"COHORT_MASTER_PORT", "7"}}}),
       {Launcher::torchrun, 3, 8, 3, 4, 0, 2, "10.9.9.9", 7, "job7"}},
      {"CohortRunIdOverridesLauncher",
       with(kSlurmEnv, "COHORT_RUN_ID", "mine"),
       {Launcher::slurm, 5, 8, 1, 4, 1, 2, "gpu007", 29500, "mine"}},
      {"EmptyValuesCountAsUnset",
       {{"RANK", ""}, {"WORLD_SIZE", ""}, {"MASTER_PORT", ""}, {"COHORT_STORE_EXTERNAL", ""}},
       {Launcher::none, 0, 1, 0, 1, 0, 1, "127.0.0.1", 29500, ""}},
      {"StoreExternalFalse",
       with(kCohortrunEnv, "COHORT_STORE_EXTERNAL", "0"),
       {Launcher::cohortrun, 5, 8, 1, 4, 1, 2, "10.0.0.1", 40000, "run-abc", false}},
  };
}

class LaunchInfoGood : public ::testing::TestWithParam<GoodCase> {};

TEST_P(LaunchInfoGood, ReadsTheLauncher) {
  const GoodCase& test = GetParam();
  const LaunchInfo info = read(test.env);
  const Expected& e = test.expected;
  EXPECT_EQ(info.launcher, e.launcher) << to_string(info.launcher);
  EXPECT_EQ(info.rank, e.rank);
  EXPECT_EQ(info.world_size, e.world_size);
  EXPECT_EQ(info.local_rank, e.local_rank);
  EXPECT_EQ(info.local_world_size, e.local_world_size);
  EXPECT_EQ(info.node_rank, e.node_rank);
  EXPECT_EQ(info.num_nodes, e.num_nodes);
  EXPECT_EQ(info.master_addr, e.master_addr);
  EXPECT_EQ(info.master_port, e.master_port);
  EXPECT_EQ(info.store_is_external, e.store_is_external);
  EXPECT_FALSE(info.run_id.empty());
  if (!e.run_id.empty()) {
    EXPECT_EQ(info.run_id, e.run_id);
  }
}

INSTANTIATE_TEST_SUITE_P(Environments, LaunchInfoGood, ::testing::ValuesIn(good_cases()),
                         [](const auto& param_info) { return param_info.param.name; });

TEST(LaunchInfo, SaysWhichTopologyTheLauncherGave) {
  // What is not given is a guess that cohort::init replaces with what the host names say.
  const LaunchInfo cohortrun = read(kCohortrunEnv);
  EXPECT_EQ(cohortrun.given.local_rank, "COHORT_LOCAL_RANK");
  EXPECT_EQ(cohortrun.given.node_rank, "COHORT_NODE_RANK");
  EXPECT_EQ(cohortrun.given.num_nodes, "COHORT_NUM_NODES");
  const LaunchInfo torchrun = read(kTorchrunEnv);
  EXPECT_EQ(torchrun.given.local_rank, "LOCAL_RANK");
  EXPECT_EQ(torchrun.given.node_rank, "GROUP_RANK");
  EXPECT_EQ(torchrun.given.num_nodes, "GROUP_WORLD_SIZE");
  const LaunchInfo open_mpi = read(kOpenMpiEnv);
  EXPECT_EQ(open_mpi.given.local_rank, "OMPI_COMM_WORLD_LOCAL_RANK");
  EXPECT_EQ(open_mpi.given.node_rank, "");
  const LaunchInfo slurm = read(kSlurmEnv);
  EXPECT_EQ(slurm.given.node_rank, "SLURM_NODEID");
  EXPECT_EQ(slurm.given.num_nodes, "SLURM_NNODES");
  EXPECT_EQ(read({}).given.local_rank, "");
}

TEST(LaunchInfo, TorchrunsAgentStoreAndRestartCount) {
  const LaunchInfo plain = read(kTorchrunEnv);
  EXPECT_FALSE(plain.torch_agent_store);
  EXPECT_EQ(plain.restart_count, 0);
  Env agent = with(with(kTorchrunEnv, "TORCHELASTIC_USE_AGENT_STORE", "True"),
                   "TORCHELASTIC_RESTART_COUNT", "2");
  const LaunchInfo restarted = read(agent);
  EXPECT_TRUE(restarted.torch_agent_store);
  EXPECT_EQ(restarted.restart_count, 2);
  // Only torchrun's own ranks use its store; cohortrun's count comes first.
  EXPECT_FALSE(read(merged({kCohortrunEnv, agent})).torch_agent_store);
  EXPECT_EQ(read(with(merged({kCohortrunEnv, agent}), "COHORT_RESTART_COUNT", "5")).restart_count,
            5);
  EXPECT_THROW(read(with(agent, "TORCHELASTIC_USE_AGENT_STORE", "maybe")), cohort::InvalidArgument);
}

TEST(LaunchInfo, RecordFailureWritesTorchrunsErrorFile) {
  const std::string path = ::testing::TempDir() + "cohort_error_file.json";
  std::remove(path.c_str());
  record_failure("never written", lookup({}));
  record_failure("rank 1: \"bad\"\nsecond line", lookup({{"TORCHELASTIC_ERROR_FILE", path}}));
  std::ifstream file(path);
  std::stringstream contents;
  contents << file.rdbuf();
  const std::string text = contents.str();
  EXPECT_THAT(text, ::testing::StartsWith(
                        "{\"message\": \"rank 1: \\\"bad\\\"\\nsecond line\", \"timestamp\": "));
  EXPECT_THAT(text, ::testing::EndsWith("}\n"));
  const long long stamp = std::stoll(text.substr(text.rfind(' ') + 1));
  EXPECT_GT(stamp, 1'700'000'000);  // seconds since 1970, not milliseconds or zero
  EXPECT_LT(stamp, 100'000'000'000);
  std::remove(path.c_str());
}

TEST(LaunchInfo, SingleProcessRunIdIsFreshEachTime) {
  const LaunchInfo first = read({});
  const LaunchInfo second = read({});
  EXPECT_FALSE(first.run_id.empty());
  EXPECT_NE(first.run_id, second.run_id);
}

TEST(LaunchInfo, WorldRunIdIsTheSameOnEveryRank) {
  Env env{{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "0"}, {"LOCAL_WORLD_SIZE", "2"}};
  const LaunchInfo rank0 = read(env);
  env["RANK"] = "1";
  env["LOCAL_RANK"] = "1";
  const LaunchInfo rank1 = read(env);
  EXPECT_EQ(rank0.run_id, rank1.run_id);
}

TEST(LaunchInfo, DescribeIsOneLine) {
  LaunchInfo info;
  info.rank = 3;
  info.world_size = 8;
  info.local_rank = 3;
  info.local_world_size = 4;
  info.node_rank = 0;
  info.num_nodes = 2;
  info.master_addr = "10.0.0.1";
  info.launcher = Launcher::torchrun;
  EXPECT_EQ(info.describe(),
            "rank 3 of 8 (local 3 of 4, node 0 of 2) via torchrun, store 10.0.0.1:29500");
  EXPECT_EQ(LaunchInfo{}.describe(),
            "rank 0 of 1 (local 0 of 1, node 0 of 1) without a launcher, store 127.0.0.1:29500");
}

TEST(LaunchInfo, LauncherNames) {
  EXPECT_EQ(to_string(Launcher::none), "none");
  EXPECT_EQ(to_string(Launcher::cohortrun), "cohortrun");
  EXPECT_EQ(to_string(Launcher::torchrun), "torchrun");
  EXPECT_EQ(to_string(Launcher::open_mpi), "Open MPI");
  EXPECT_EQ(to_string(Launcher::mpich), "MPICH");
  EXPECT_EQ(to_string(Launcher::slurm), "Slurm");
}

TEST(LaunchInfo, ProcessEnvironmentReadsGetenv) {
  ::setenv("COHORT_TEST_LAUNCH_INFO_VARIABLE", "value 1", 1);
  const EnvLookup env = process_environment();
  EXPECT_EQ(env("COHORT_TEST_LAUNCH_INFO_VARIABLE"), "value 1");
  ::unsetenv("COHORT_TEST_LAUNCH_INFO_VARIABLE");
  EXPECT_EQ(env("COHORT_TEST_LAUNCH_INFO_VARIABLE"), std::nullopt);
}

// ---- Environments that are refused ----

struct BadCase {
  std::string name;
  Env env;
  std::vector<std::string> message_parts;
};

const Env kTorchrunOneNode{
    {"RANK", "1"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "4"}};

std::vector<BadCase> bad_cases() {
  return {
      {"RankNotInteger", with(kTorchrunOneNode, "RANK", "abc"), {"RANK='abc' is not an integer"}},
      {"RankFraction",
       with(kCohortrunEnv, "COHORT_RANK", "1.5"),
       {"COHORT_RANK='1.5' is not an integer"}},
      {"RankTrailingText", with(kTorchrunOneNode, "RANK", "1 "), {"RANK='1 ' is not an integer"}},
      {"RankNegative", with(kTorchrunOneNode, "RANK", "-1"), {"RANK=-1 is negative"}},
      {"RankHuge", with(kTorchrunOneNode, "RANK", "99999999999"), {"RANK=99999999999", "range"}},
      {"RankNotBelowWorldSize",
       with(kTorchrunOneNode, "RANK", "4"),
       {"RANK=4 is not below WORLD_SIZE=4"}},
      {"LocalRankNotBelowLocalWorldSize",
       with(kTorchrunOneNode, "LOCAL_RANK", "4"),
       {"LOCAL_RANK=4 is not below LOCAL_WORLD_SIZE=4"}},
      {"LocalWorldSizeAboveWorldSize",
       with(kTorchrunOneNode, "LOCAL_WORLD_SIZE", "8"),
       {"LOCAL_WORLD_SIZE=8 is larger than WORLD_SIZE=4"}},
      {"WorldSizeZero",
       with(with(kTorchrunOneNode, "WORLD_SIZE", "0"), "RANK", "0"),
       {"WORLD_SIZE=0 must be at least 1"}},
      {"PortTooLarge",
       with(kTorchrunOneNode, "MASTER_PORT", "70000"),
       {"MASTER_PORT=70000 is outside 1..65535"}},
      {"PortZero", with(kTorchrunOneNode, "MASTER_PORT", "0"), {"MASTER_PORT=0 is outside"}},
      {"PortNotInteger",
       with(kTorchrunOneNode, "MASTER_PORT", "http"),
       {"MASTER_PORT='http' is not an integer"}},
      {"CohortPortTooLarge",
       with(kCohortrunEnv, "COHORT_MASTER_PORT", "65536"),
       {"COHORT_MASTER_PORT=65536 is outside 1..65535"}},
      {"RankWithoutWorldSize", {{"RANK", "0"}}, {"WORLD_SIZE is not", "set WORLD_SIZE"}},
      {"WorldSizeWithoutRank", {{"WORLD_SIZE", "2"}}, {"RANK is not", "set RANK"}},
      {"LocalRankWithoutLocalWorldSize",
       {{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "0"}},
       {"LOCAL_WORLD_SIZE is not", "set LOCAL_WORLD_SIZE"}},
      {"TorchrunWithoutLocalRanks",
       {{"RANK", "0"}, {"WORLD_SIZE", "2"}},
       {"LOCAL_RANK", "set LOCAL_RANK"}},
      {"OpenMpiRankOnly", {{"OMPI_COMM_WORLD_RANK", "0"}}, {"OMPI_COMM_WORLD_SIZE is not"}},
      {"MpichSizeOnly", {{"PMI_SIZE", "2"}}, {"PMI_RANK is not"}},
      {"CohortNodeRankWithoutNumNodes",
       [] {
         Env env = kCohortrunEnv;
         env.erase("COHORT_NUM_NODES");
         return env;
       }(),
       {"COHORT_NUM_NODES is not"}},
      {"CohortNodeRankNotBelowNumNodes",
       with(kCohortrunEnv, "COHORT_NODE_RANK", "2"),
       {"COHORT_NODE_RANK=2 is not below COHORT_NUM_NODES=2"}},
      {"SlurmWithoutNtasks", {{"SLURM_PROCID", "0"}}, {"SLURM_NTASKS is not"}},
      {"SlurmWithoutLocalId",
       {{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}},
       {"SLURM_LOCALID is not"}},
      {"SlurmBadTasksPerNode",
       with(kSlurmEnv, "SLURM_TASKS_PER_NODE", "4(x"),
       {"SLURM_TASKS_PER_NODE='4(x'"}},
      {"SlurmBadNodeList",
       with(kSlurmEnv, "SLURM_JOB_NODELIST", "gpu[1-2"),
       {"SLURM_JOB_NODELIST='gpu[1-2'", "MASTER_ADDR"}},
      {"SeveralNodesWithoutMasterAddr",
       {{"RANK", "0"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "0"}, {"LOCAL_WORLD_SIZE", "4"}},
       {"spans 2 nodes", "set MASTER_ADDR"}},
      {"StoreExternalNotBoolean",
       with(kCohortrunEnv, "COHORT_STORE_EXTERNAL", "maybe"),
       {"COHORT_STORE_EXTERNAL='maybe' is not a switch"}},
  };
}

class LaunchInfoBad : public ::testing::TestWithParam<BadCase> {};

TEST_P(LaunchInfoBad, IsRefusedWithTheVariableNamed) {
  const BadCase& test = GetParam();
  try {
    const LaunchInfo info = read(test.env);
    FAIL() << "accepted: " << info.describe();
  } catch (const InvalidArgument& error) {
    const std::string message = error.what();
    for (const std::string& part : test.message_parts) {
      EXPECT_NE(message.find(part), std::string::npos) << "'" << part << "' not in: " << message;
    }
    EXPECT_NE(message.find("set "), std::string::npos) << "says nothing to set: " << message;
  }
}

INSTANTIATE_TEST_SUITE_P(Environments, LaunchInfoBad, ::testing::ValuesIn(bad_cases()),
                         [](const auto& param_info) { return param_info.param.name; });

// ---- Slurm lists ----

TEST(SlurmHostList, FirstHost) {
  const std::vector<std::pair<std::string, std::string>> cases{
      {"node[01-04]", "node01"},
      {"a,b", "a"},
      {"gpu[007-009,012],cpu01", "gpu007"},
      {"host17", "host17"},
      {"gpu[012,007-009]", "gpu012"},
      {"rack[2-3]-gpu[10-11]", "rack2-gpu10"},
      {"n[5]", "n5"},
      {"login-1.cluster", "login-1.cluster"},
  };
  for (const auto& [list, first] : cases) {
    EXPECT_EQ(first_slurm_host(list), first) << list;
  }
}

TEST(SlurmHostList, Malformed) {
  for (const std::string list : {"", ",a", "gpu[1-2", "gpu]1[", "gpu[]", "gpu[a-b]", "x[[1]]"}) {
    EXPECT_EQ(first_slurm_host(list), std::nullopt) << list;
  }
}

TEST(SlurmTasksPerNode, Counts) {
  EXPECT_EQ(slurm_tasks_on_node("2(x3),1", 0), 2);
  EXPECT_EQ(slurm_tasks_on_node("2(x3),1", 2), 2);
  EXPECT_EQ(slurm_tasks_on_node("2(x3),1", 3), 1);
  EXPECT_EQ(slurm_tasks_on_node("2(x3),1", 4), std::nullopt);
  EXPECT_EQ(slurm_tasks_on_node("4", 0), 4);
  EXPECT_EQ(slurm_tasks_on_node("4", -1), std::nullopt);
  for (const std::string list : {"", "4(x", "x", "4(x0)", "4(y2)", "4,,1"}) {
    EXPECT_EQ(slurm_tasks_on_node(list, 1), std::nullopt) << list;
  }
}

// ---- connect_store ----

constexpr Milliseconds kShortTimeout{2000};

LaunchInfo single_process() {
  return read({});
}

TEST(ConnectStore, SingleProcessWithoutLauncherUsesMemory) {
  const auto store = connect_store(single_process(), lookup({}), kShortTimeout);
  EXPECT_EQ(store->describe().rfind("MemoryStore", 0), 0u) << store->describe();
  EXPECT_EQ(store->timeout(), kShortTimeout);
  store->set("k", "v");
  EXPECT_EQ(store->get("k"), "v");
}

TEST(ConnectStore, MemoryOnlyForOneProcess) {
  const auto store =
      connect_store(single_process(), lookup({{"COHORT_STORE", "memory"}}), kShortTimeout);
  EXPECT_EQ(store->describe().rfind("MemoryStore", 0), 0u) << store->describe();

  LaunchInfo two = read(kTorchrunOneNode);
  try {
    connect_store(two, lookup({{"COHORT_STORE", "memory"}}), kShortTimeout);
    FAIL() << "a memory store was made for 4 processes";
  } catch (const InvalidArgument& error) {
    EXPECT_NE(std::string(error.what()).find("COHORT_STORE=memory"), std::string::npos)
        << error.what();
  }
}

class ConnectStoreFile : public ::testing::Test {
 protected:
  void SetUp() override {
    folder_ = std::filesystem::temp_directory_path() /
              ("cohort-test-launch-" + std::to_string(::getpid()));
    std::filesystem::remove_all(folder_);
  }
  void TearDown() override { std::filesystem::remove_all(folder_); }
  std::filesystem::path folder_;
};

TEST_F(ConnectStoreFile, FileStoreInTheRunFolder) {
  const Env env{{"COHORT_STORE", "file:" + folder_.string()}};
  Env rank0 = kTorchrunOneNode;
  rank0["RANK"] = "0";
  rank0["LOCAL_RANK"] = "0";
  rank0["COHORT_RUN_ID"] = "run-17";
  Env rank1 = with(rank0, "RANK", "1");
  const auto first = connect_store(read(rank0), lookup(env), kShortTimeout);
  const auto second = connect_store(read(rank1), lookup(env), kShortTimeout);
  EXPECT_NE(first->describe().find("FileStore"), std::string::npos) << first->describe();
  EXPECT_NE(first->describe().find("run-17"), std::string::npos) << first->describe();
  EXPECT_TRUE(std::filesystem::is_directory(folder_ / "run-17"));
  first->set("greeting", "hello");
  EXPECT_EQ(second->get("greeting"), "hello");
}

TEST(ConnectStore, FileWithoutFolderIsRefused) {
  try {
    connect_store(single_process(), lookup({{"COHORT_STORE", "file:"}}), kShortTimeout);
    FAIL() << "accepted COHORT_STORE=file:";
  } catch (const InvalidArgument& error) {
    EXPECT_NE(std::string(error.what()).find("file:<folder>"), std::string::npos) << error.what();
  }
}

TEST(ConnectStore, UnknownStoreListsTheAcceptedForms) {
  try {
    connect_store(single_process(), lookup({{"COHORT_STORE", "redis://x"}}), kShortTimeout);
    FAIL() << "accepted COHORT_STORE=redis://x";
  } catch (const InvalidArgument& error) {
    const std::string message = error.what();
    for (const std::string part : {"COHORT_STORE='redis://x'", "tcp", "file:<folder>"}) {
      EXPECT_NE(message.find(part), std::string::npos) << "'" << part << "' not in: " << message;
    }
  }
}

/// A port nobody listens on now (bound and released; good enough on loopback in a test).
int unused_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = 0;
  socklen_t length = sizeof address;
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&address), length), 0);
  EXPECT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length), 0);
  ::close(fd);
  return ntohs(address.sin_port);
}

LaunchInfo tcp_rank(int rank, int port, bool external) {
  LaunchInfo info;
  info.rank = rank;
  info.world_size = 2;
  info.local_rank = rank;
  info.local_world_size = 2;
  info.master_port = port;
  info.launcher = Launcher::torchrun;
  info.store_is_external = external;
  info.run_id = "tcp-test";
  return info;
}

TEST(ConnectStore, TcpRankZeroServesTheOthers) {
  const int port = unused_port();
  const Env env{{"COHORT_STORE", "tcp"}};
  const auto rank0 = connect_store(tcp_rank(0, port, false), lookup(env), kShortTimeout);
  const auto rank1 = connect_store(tcp_rank(1, port, false), lookup({}), kShortTimeout);
  EXPECT_EQ(rank0->describe(), "TcpStore(127.0.0.1:" + std::to_string(port) + ")");
  rank0->set("from-0", "x");
  EXPECT_EQ(rank1->get("from-0"), "x");
}

TEST(ConnectStore, TcpExternalStoreIsNotStartedByRankZero) {
  const int port = unused_port();
  const auto start = std::chrono::steady_clock::now();
  EXPECT_THROW(connect_store(tcp_rank(0, port, true), lookup({}), Milliseconds(300)), Error);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
}

}  // namespace
}  // namespace cohort
