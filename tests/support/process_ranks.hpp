#pragma once

// Ranks as separate processes, launched the way torchrun would (RANK, WORLD_SIZE, LOCAL_RANK,
// LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT, TORCHELASTIC_RUN_ID) on a free loopback port, each
// rank's output in a file. Rank 0 hosts the TCP store unless the environment picks another.

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
#include <system_error>
#include <vector>

namespace cohort_test {

/// A program built into the test build folder: `relative` under COHORT_TEST_BINARY_DIR; where
/// that is not set or holds no such file (a GPU bundle keeps every program in one folder), the
/// program of that name beside the running test.
inline std::string build_path(const std::string& relative) {
  const char* build = std::getenv("COHORT_TEST_BINARY_DIR");
  const std::filesystem::path in_build = std::string(build != nullptr ? build : ".") + "/" + relative;
  std::error_code error;
  if (std::filesystem::exists(in_build, error)) {
    return in_build.string();
  }
  const auto self = std::filesystem::read_symlink("/proc/self/exe", error);
  if (error) {
    return in_build.string();
  }
  return (self.parent_path() / std::filesystem::path(relative).filename()).string();
}

/// A TCP port on 127.0.0.1 that was free a moment ago.
inline int free_port() {
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

inline std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

struct ProcessRank {
  pid_t pid = -1;
  std::filesystem::path output;
  int status = -1;
  double seconds = 0.0;  // from the start of the run until this rank was reaped

  bool exited_with(int code) const { return WIFEXITED(status) && WEXITSTATUS(status) == code; }
};

/// Starts `n` ranks of `program` with `arguments` and extra `environment` ("NAME=value"), waits
/// for all of them, and returns how each ended. `tag` names the run's output folder. The port was
/// free when picked, but another program may take it before rank 0 listens on it: a run whose
/// store could not listen for that reason is started again on another port (twice at most).
inline std::vector<ProcessRank> run_process_ranks_on(int port, int n, const std::string& program,
                                                     const std::vector<std::string>& arguments,
                                                     const std::vector<std::string>& environment,
                                                     const std::string& tag);

inline std::vector<ProcessRank> run_process_ranks(int n, const std::string& program,
                                                  const std::vector<std::string>& arguments,
                                                  const std::vector<std::string>& environment,
                                                  const std::string& tag) {
  for (int attempt = 0;; ++attempt) {
    const int port = free_port();
    auto ranks = run_process_ranks_on(port, n, program, arguments, environment, tag);
    const std::string first = ranks.empty() ? std::string() : read_file(ranks.front().output);
    std::string at_port(":");  // built in steps: GCC 12's -Wrestrict misreads "a" + s + "b"
    at_port += std::to_string(port);
    at_port += ':';
    const bool port_taken = first.find("cannot listen on") != std::string::npos &&
                            first.find(at_port) != std::string::npos;
    if (attempt == 2 || !port_taken) {
      return ranks;
    }
  }
}

inline std::vector<ProcessRank> run_process_ranks_on(int port, int n, const std::string& program,
                                                     const std::vector<std::string>& arguments,
                                                     const std::vector<std::string>& environment,
                                                     const std::string& tag) {
  const auto folder = std::filesystem::temp_directory_path() /
                      ("cohort-" + tag + "-" + std::to_string(getpid()));
  std::filesystem::create_directories(folder);
  std::vector<ProcessRank> ranks(static_cast<std::size_t>(n));
  const auto start = std::chrono::steady_clock::now();
  for (int r = 0; r < n; ++r) {
    ProcessRank& rank = ranks[static_cast<std::size_t>(r)];
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
      for (const auto& assignment : environment) {
        const auto equals = assignment.find('=');
        setenv(assignment.substr(0, equals).c_str(), assignment.substr(equals + 1).c_str(), 1);
      }
      std::vector<char*> argv;
      argv.push_back(const_cast<char*>(program.c_str()));
      for (const auto& argument : arguments) argv.push_back(const_cast<char*>(argument.c_str()));
      argv.push_back(nullptr);
      execv(program.c_str(), argv.data());
      _exit(127);
    }
  }
  for (auto& rank : ranks) {
    waitpid(rank.pid, &rank.status, 0);
    rank.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  return ranks;
}

/// Every rank's status and output, for a failure message.
inline std::string report(const std::vector<ProcessRank>& ranks) {
  std::string text;
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    text += "--- rank " + std::to_string(r) + " (status " + std::to_string(ranks[r].status) +
            "):\n" + read_file(ranks[r].output);
  }
  return text;
}

}  // namespace cohort_test
