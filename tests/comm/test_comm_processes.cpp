// Ranks as separate processes, launched the way torchrun would (RANK, WORLD_SIZE, MASTER_ADDR,
// MASTER_PORT), meeting through the TCP store hosted by rank 0 or through a file store.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace {

using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;

std::string worker_path() {
  const char* build = std::getenv("COHORT_TEST_BINARY_DIR");
  return std::string(build != nullptr ? build : ".") + "/tests/comm/comm_worker";
}

int free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = 0;
  bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address));
  socklen_t length = sizeof(address);
  getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  close(fd);
  return ntohs(address.sin_port);
}

struct Rank {
  pid_t pid = -1;
  std::filesystem::path output;
  int status = -1;
  double seconds = 0.0;
};

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

/// Starts `n` ranks of comm_worker with `scenario`, waits for all, returns them.
std::vector<Rank> run_ranks(int n, const std::string& scenario,
                            const std::vector<std::string>& extra_env, const std::string& tag) {
  const int port = free_port();
  const auto folder = std::filesystem::temp_directory_path() /
                      ("cohort-comm-" + tag + "-" + std::to_string(getpid()));
  std::filesystem::create_directories(folder);
  std::vector<Rank> ranks(static_cast<std::size_t>(n));
  const auto start = Clock::now();
  for (int r = 0; r < n; ++r) {
    Rank& rank = ranks[static_cast<std::size_t>(r)];
    rank.output = folder / ("rank" + std::to_string(r) + ".log");
    rank.pid = fork();
    if (rank.pid == 0) {
      const int fd = open(rank.output.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dup2(fd, 1);
      dup2(fd, 2);
      setenv("RANK", std::to_string(r).c_str(), 1);
      setenv("WORLD_SIZE", std::to_string(n).c_str(), 1);
      setenv("LOCAL_RANK", std::to_string(r).c_str(), 1);
      setenv("LOCAL_WORLD_SIZE", std::to_string(n).c_str(), 1);
      setenv("MASTER_ADDR", "127.0.0.1", 1);
      setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
      setenv("TORCHELASTIC_RUN_ID", (tag + std::to_string(port)).c_str(), 1);
      setenv("COHORT_TIMEOUT", "20s", 1);
      for (const auto& assignment : extra_env) {
        putenv(const_cast<char*>(assignment.c_str()));
      }
      const std::string path = worker_path();
      execl(path.c_str(), path.c_str(), scenario.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
  }
  for (auto& rank : ranks) {
    waitpid(rank.pid, &rank.status, 0);
    rank.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  }
  return ranks;
}

std::string report(const std::vector<Rank>& ranks) {
  std::string text;
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    text += "--- rank " + std::to_string(r) + " (status " + std::to_string(ranks[r].status) +
            "):\n" + read_file(ranks[r].output);
  }
  return text;
}

TEST(Processes, CollectivesThroughTheTcpStore) {
  const auto ranks = run_ranks(4, "check", {}, "tcp");
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    ASSERT_TRUE(WIFEXITED(ranks[r].status) && WEXITSTATUS(ranks[r].status) == 0) << report(ranks);
    EXPECT_THAT(read_file(ranks[r].output), HasSubstr("rank " + std::to_string(r) + " ok"));
  }
}

TEST(Processes, CollectivesThroughTheFileStore) {
  const auto folder = std::filesystem::temp_directory_path() /
                      ("cohort-file-store-" + std::to_string(getpid()));
  const std::string store = "COHORT_STORE=file:" + folder.string();
  const auto ranks = run_ranks(3, "check", {store}, "file");
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    ASSERT_TRUE(WIFEXITED(ranks[r].status) && WEXITSTATUS(ranks[r].status) == 0) << report(ranks);
  }
  std::filesystem::remove_all(folder);
}

TEST(Processes, AKilledRankIsNamedAndNobodyHangs) {
  const auto ranks = run_ranks(4, "kill", {}, "kill");
  ASSERT_TRUE(WIFSIGNALED(ranks[2].status)) << report(ranks);
  for (int r : {0, 1, 3}) {
    const Rank& rank = ranks[static_cast<std::size_t>(r)];
    ASSERT_TRUE(WIFEXITED(rank.status)) << report(ranks);
    EXPECT_EQ(WEXITSTATUS(rank.status), 3) << report(ranks);
    // Within the 20 s deadline plus a few seconds, and in practice far sooner: the peer's
    // connections close when it dies.
    EXPECT_LT(rank.seconds, 25.0) << report(ranks);
    EXPECT_THAT(read_file(rank.output), HasSubstr("rank 2")) << report(ranks);
  }
}

}  // namespace
