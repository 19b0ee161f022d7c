#pragma once

// Real PyTorch TCPStore servers for the TorchStore tests, from the PyTorch of the virtual
// environment COHORT_TEST_TORCH_PYTHON names (build/torch-venv, made by scripts/lib/common.sh:
// ensure_torch_venv; tests/launch/CMakeLists.txt defines the macro). One Python
// process per test program holds them all; it ends when its stdin closes, which the kernel does
// when the test program exits, so no server outlives the test however it ends. Where PyTorch is
// not installed the tests skip and say so.

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <mutex>
#include <string>
#include <vector>

extern char** environ;

namespace cohort_test {

/// Driven one line at a time: `new` prints the port of a fresh server (its own keys; libuv's,
/// PyTorch's default and torchrun's); `set PORT KEY VALUE` and `get PORT KEY` go through PyTorch's
/// own client of that server.
inline constexpr const char* kTorchStoreServerScript = R"PY(
import sys
from datetime import timedelta
from torch.distributed import TCPStore

timeout = timedelta(seconds=30)
servers, clients = {}, {}

def answer(text):
    sys.stdout.write(f"{text}\n")
    sys.stdout.flush()

answer("ready")
for line in sys.stdin:
    words = line.split()
    try:
        if words[0] == "new":
            server = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                              timeout=timeout)
            servers[server.port] = server
            clients[server.port] = TCPStore("127.0.0.1", server.port, is_master=False,
                                            timeout=timeout)
            answer(server.port)
        elif words[0] == "set":
            clients[int(words[1])].set(words[2], words[3])
            answer("ok")
        elif words[0] == "get":
            answer(clients[int(words[1])].get(words[2]).decode())
        else:
            answer(f"error: unknown command {words[0]}")
    except Exception as error:
        answer(f"error: {type(error).__name__}: {error}")
)PY";

class TorchStoreServers {
 public:
  /// The process of this test program, started on first use; nullptr when it cannot run, and
  /// then `why` says why (for GTEST_SKIP).
  static TorchStoreServers* instance(std::string& why) {
    static std::mutex mutex;
    static TorchStoreServers* servers = nullptr;
    static std::string failure;
    const std::lock_guard lock(mutex);
    if (servers == nullptr && failure.empty()) {
      auto* started = new TorchStoreServers();  // kept until the program exits: see above
      if (started->start(failure)) {
        servers = started;
      } else {
        delete started;
      }
    }
    why = failure;
    return servers;
  }

  /// The port of a fresh TCPStore server.
  int new_server() {
    const std::string reply = command("new");
    try {
      return std::stoi(reply);
    } catch (const std::exception&) {
      ADD_FAILURE() << "the PyTorch helper did not start a server: " << reply;
      return 0;
    }
  }

  /// Sends one command and returns its one-line answer ("error: ..." when PyTorch failed).
  std::string command(const std::string& line) {
    const std::lock_guard lock(mutex_);
    const std::string bytes = line + "\n";
    if (::write(to_child_, bytes.data(), bytes.size()) != static_cast<ssize_t>(bytes.size())) {
      return "error: the PyTorch helper is gone";
    }
    return read_line(std::chrono::seconds(60));
  }

  ~TorchStoreServers() {
    if (to_child_ >= 0) ::close(to_child_);  // the helper ends at end of input
    if (from_child_ >= 0) ::close(from_child_);
    if (pid_ > 0) {
      for (int i = 0; i < 50 && ::waitpid(pid_, nullptr, WNOHANG) == 0; ++i) ::usleep(100'000);
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  TorchStoreServers(const TorchStoreServers&) = delete;
  TorchStoreServers& operator=(const TorchStoreServers&) = delete;

 private:
  TorchStoreServers() = default;

  bool start(std::string& why) {
    const std::string python = COHORT_TEST_TORCH_PYTHON;
    if (!std::filesystem::exists(python)) {
      why = "PyTorch is not installed in " + python +
            " (scripts/test.sh installs it: ensure_torch_venv in scripts/lib/common.sh)";
      return false;
    }
    int in[2];
    int out[2];
    if (::pipe2(in, O_CLOEXEC) != 0 || ::pipe2(out, O_CLOEXEC) != 0) {
      why = "pipe() failed";
      return false;
    }
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, in[0], 0);
    posix_spawn_file_actions_adddup2(&actions, out[1], 1);
    std::vector<std::string> args = {python, "-c", kTorchStoreServerScript};
    std::vector<char*> argv;
    for (auto& arg : args) argv.push_back(arg.data());
    argv.push_back(nullptr);
    const int error = ::posix_spawn(&pid_, python.c_str(), &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    ::close(in[0]);
    ::close(out[1]);
    to_child_ = in[1];
    from_child_ = out[0];
    if (error != 0) {
      pid_ = -1;
      why = "cannot run " + python;
      return false;
    }
    const std::string first = read_line(std::chrono::seconds(120));  // importing torch is slow
    if (first != "ready") {
      why = "PyTorch's TCPStore does not import in " + python + " (" + first + ")";
      return false;
    }
    return true;
  }

  std::string read_line(std::chrono::seconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    std::string line;
    char c = 0;
    for (;;) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      pollfd descriptor{from_child_, POLLIN, 0};
      if (left.count() <= 0 || ::poll(&descriptor, 1, static_cast<int>(left.count())) <= 0) {
        return "error: no answer from the PyTorch helper in " + std::to_string(timeout.count()) +
               " s";
      }
      if (::read(from_child_, &c, 1) != 1) return "error: the PyTorch helper ended";
      if (c == '\n') return line;
      line.push_back(c);
    }
  }

  std::mutex mutex_;
  pid_t pid_ = -1;
  int to_child_ = -1;
  int from_child_ = -1;
};

}  // namespace cohort_test
