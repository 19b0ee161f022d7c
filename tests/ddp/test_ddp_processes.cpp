// DataParallel with ranks as separate processes, launched the way torchrun would (RANK,
// WORLD_SIZE, MASTER_ADDR, MASTER_PORT), meeting through the TCP store hosted by rank 0. The
// launch helper is copied from tests/comm/test_comm_processes.cpp.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

namespace {

using ::testing::HasSubstr;

std::string worker_path() {
  const char* build = std::getenv("COHORT_TEST_BINARY_DIR");
  return std::string(build != nullptr ? build : ".") + "/tests/ddp/ddp_worker";
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
};

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

/// Starts `n` ranks of ddp_worker, waits for all, returns them.
std::vector<Rank> run_ranks(int n, const std::string& tag) {
  const int port = free_port();
  const auto folder = std::filesystem::temp_directory_path() /
                      ("cohort-ddp-" + tag + "-" + std::to_string(getpid()));
  std::filesystem::create_directories(folder);
  std::vector<Rank> ranks(static_cast<std::size_t>(n));
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
      const std::string path = worker_path();
      execl(path.c_str(), path.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
  }
  for (auto& rank : ranks) {
    waitpid(rank.pid, &rank.status, 0);
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

TEST(DdpProcesses, TrainingThroughTheTcpStoreMatchesOneRankAndRanksAgree) {
  const auto ranks = run_ranks(3, "tcp");
  std::string first_hash;
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    ASSERT_TRUE(WIFEXITED(ranks[r].status) && WEXITSTATUS(ranks[r].status) == 0) << report(ranks);
    const std::string output = read_file(ranks[r].output);
    EXPECT_THAT(output, HasSubstr("rank " + std::to_string(r) + " ok"));
    std::smatch match;
    ASSERT_TRUE(std::regex_search(output, match, std::regex("params ([0-9a-f]{16})")))
        << report(ranks);
    if (r == 0) {
      first_hash = match[1];
    } else {
      EXPECT_EQ(match[1], first_hash) << "rank " << r << " holds different parameters\n"
                                      << report(ranks);
    }
  }
}

}  // namespace
