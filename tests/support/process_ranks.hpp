#pragma once

// Ranks as separate processes, launched the way torchrun would (RANK, WORLD_SIZE, LOCAL_RANK,
// LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT, TORCHELASTIC_RUN_ID), each rank's output in a
// file, meeting through a TCP store this process serves on a loopback port it holds bound.

#include <cohort/launch/tcp_store.hpp>

#include "test_helpers.hpp"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
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
  const std::string build = test_binary_dir();
  const std::filesystem::path in_build =
      (build.empty() ? std::string(".") : build) + "/" + relative;
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

inline std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

/// The output folders of this test program's runs, removed when the program exits, so that a run
/// of the suite leaves nothing under the temporary folder (COHORT_TEST_KEEP_OUTPUT=1 keeps them;
/// a failing test has already printed every rank's output through report()). Only the process
/// that made them removes them: a forked child that exits normally leaves them alone.
class RunFolders {
 public:
  ~RunFolders() {
    if (getpid() != owner_ || std::getenv("COHORT_TEST_KEEP_OUTPUT") != nullptr) return;
    for (const auto& folder : folders_) {
      std::error_code ignored;
      std::filesystem::remove_all(folder, ignored);
    }
  }
  void add(const std::filesystem::path& folder) {
    if (std::find(folders_.begin(), folders_.end(), folder) == folders_.end()) {
      folders_.push_back(folder);
    }
  }

 private:
  pid_t owner_ = getpid();
  std::vector<std::filesystem::path> folders_;
};

inline RunFolders& run_folders() {
  static RunFolders folders;
  return folders;
}

struct ProcessRank {
  pid_t pid = -1;
  std::filesystem::path output;
  int status = -1;
  double seconds = 0.0;  // from the start of the run until this rank was reaped

  bool exited_with(int code) const { return WIFEXITED(status) && WEXITSTATUS(status) == code; }
};

/// Starts `n` ranks of `program` with `arguments` and extra `environment` ("NAME=value"), waits
/// for all of them, and returns how each ended. `tag` names the run's output folder.
///
/// The TCP store is served by this process, the way torchrun's agent and cohortrun serve it
/// (COHORT_STORE_EXTERNAL=1): its socket is bound to port 0 and listening before any rank starts,
/// so no other program can take the port between choosing it and using it. An `environment`
/// entry may still pick another store (COHORT_STORE=file:...).
inline std::vector<ProcessRank> run_process_ranks(int n, const std::string& program,
                                                  const std::vector<std::string>& arguments,
                                                  const std::vector<std::string>& environment,
                                                  const std::string& tag) {
  cohort::TcpStoreServerOptions server_options;
  server_options.host = "127.0.0.1";
  server_options.port = 0;
  cohort::TcpStoreServer server(server_options);
  const std::string port = std::to_string(server.port());

  const auto folder =
      std::filesystem::temp_directory_path() / ("cohort-" + tag + "-" + std::to_string(getpid()));
  std::filesystem::create_directories(folder);
  run_folders().add(folder);
  // Everything a child needs is built here: after fork() it only opens, duplicates and execs,
  // since the store's thread may hold the allocator's lock at the moment of the fork.
  std::vector<std::string> argv_text{program};
  argv_text.insert(argv_text.end(), arguments.begin(), arguments.end());
  std::vector<char*> argv;
  for (auto& argument : argv_text) argv.push_back(argument.data());
  argv.push_back(nullptr);
  std::vector<std::vector<std::string>> env_text(static_cast<std::size_t>(n));
  std::vector<std::vector<char*>> envp(static_cast<std::size_t>(n));
  std::vector<ProcessRank> ranks(static_cast<std::size_t>(n));
  for (int r = 0; r < n; ++r) {
    const auto index = static_cast<std::size_t>(r);
    ranks[index].output = folder / ("rank" + std::to_string(r) + ".log");
    std::vector<std::string> settings = {
        "RANK=" + std::to_string(r), "WORLD_SIZE=" + std::to_string(n),
        "LOCAL_RANK=" + std::to_string(r), "LOCAL_WORLD_SIZE=" + std::to_string(n),
        "MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + port, "COHORT_STORE_EXTERNAL=1",
        "TORCHELASTIC_RUN_ID=" + tag + port, "COHORT_TIMEOUT=20s",
        // A failure's collectives dump lands in the run's folder.
        "TMPDIR=" + folder.string()};
    settings.insert(settings.end(), environment.begin(), environment.end());
    auto& text = env_text[index];
    for (char** entry = environ; *entry != nullptr; ++entry) text.emplace_back(*entry);
    for (const auto& setting : settings) {
      const std::string name = setting.substr(0, setting.find('=') + 1);
      std::erase_if(text, [&](const std::string& entry) { return entry.starts_with(name); });
      text.push_back(setting);
    }
    for (auto& entry : text) envp[index].push_back(entry.data());
    envp[index].push_back(nullptr);
  }
  const auto start = std::chrono::steady_clock::now();
  for (int r = 0; r < n; ++r) {
    const auto index = static_cast<std::size_t>(r);
    ProcessRank& rank = ranks[index];
    rank.pid = fork();
    if (rank.pid == 0) {
      const int fd = open(rank.output.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dup2(fd, 1);
      dup2(fd, 2);
      execve(program.c_str(), argv.data(), envp[index].data());
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
