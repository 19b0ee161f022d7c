#include "supervisor.hpp"

#include "line_prefixer.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

namespace cohortrun {
namespace {

using Clock = std::chrono::steady_clock;

/// The write end of the self-pipe; the signal handler's only state.
int g_signal_pipe_write = -1;

extern "C" void on_signal(int signal_number) {
  const int saved_errno = errno;
  const auto byte = static_cast<unsigned char>(signal_number);
  // A full pipe already holds a wake-up; losing this byte loses nothing but a repeat.
  [[maybe_unused]] const auto written = ::write(g_signal_pipe_write, &byte, 1);
  errno = saved_errno;
}

constexpr int kHandledSignals[] = {SIGINT, SIGTERM, SIGCHLD};

/// SIGINT and SIGTERM, the signals that ask cohortrun to stop.
const sigset_t& stopping_signals() {
  static const sigset_t set = [] {
    sigset_t signals;
    sigemptyset(&signals);
    sigaddset(&signals, SIGINT);
    sigaddset(&signals, SIGTERM);
    return signals;
  }();
  return set;
}

/// Writes all of `text` to `fd`, riding out EINTR, short writes and a non-blocking terminal.
/// Returns false when the reader is gone (EPIPE) or the descriptor fails.
bool write_all(int fd, std::string_view text) {
  while (!text.empty()) {
    const ssize_t written = ::write(fd, text.data(), text.size());
    if (written >= 0) {
      text.remove_prefix(static_cast<std::size_t>(written));
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      pollfd wait_writable{fd, POLLOUT, 0};
      ::poll(&wait_writable, 1, 100);
    } else if (errno != EINTR) {
      return false;
    }
  }
  return true;
}

void report(std::string_view message) {
  std::string line = "cohortrun: ";
  line += message;
  line += '\n';
  write_all(STDERR_FILENO, line);
}

std::string errno_text(int error) {
  return std::strerror(error);
}

std::string signal_name(int signal_number) {
  return signal_number == SIGINT ? "SIGINT" : signal_number == SIGTERM ? "SIGTERM" : "a signal";
}

std::string plural(std::size_t count, std::string_view noun) {
  return std::to_string(count) + " " + std::string(noun) + (count == 1 ? "" : "s");
}

/// A rank's process and its output pipes.
struct Rank {
  int rank = 0;
  pid_t pid = -1;
  bool running = false;
  int stdout_fd = -1;
  int stderr_fd = -1;
  LinePrefixer stdout_lines;
  LinePrefixer stderr_lines;

  explicit Rank(int index)
      : rank(index),
        stdout_lines("[rank " + std::to_string(index) + "] "),
        stderr_lines("[rank " + std::to_string(index) + "] ") {}
};

class Supervisor {
 public:
  explicit Supervisor(const SupervisorOptions& options) : options_(options) {}
  ~Supervisor();
  Supervisor(const Supervisor&) = delete;
  Supervisor& operator=(const Supervisor&) = delete;

  int run(const std::vector<RankSpec>& specs);
  int received_signal() const noexcept { return received_signal_; }
  int unrecoverable_rank() const noexcept { return unrecoverable_rank_; }

 private:
  void install_signal_handlers();
  /// Starts one rank; returns false when PROGRAM could not be executed.
  bool start(const RankSpec& spec);
  void handle_signals();
  /// Passes on what `fd` has now; at its end (or when `last`), the unfinished line too, and
  /// closes it.
  void forward_output(int& fd, LinePrefixer& lines, int destination, bool last = false);
  void reap();
  void on_rank_failed(const Rank& rank, int status);
  /// Sends `signal_number` to the process group of every rank started.
  void signal_all(int signal_number);
  void begin_stopping();
  std::size_t running_count() const;
  bool any_output_open() const;
  int poll_timeout_ms() const;

  SupervisorOptions options_;
  std::vector<Rank> ranks_;
  int signal_pipe_[2] = {-1, -1};
  std::optional<int> failure_status_;
  int received_signal_ = 0;
  bool any_rank_failed_ = false;
  std::size_t preempted_ranks_ = 0;  ///< ranks that exited kPreemptedStatus
  int unrecoverable_rank_ = -1;      ///< the first rank that exited kUnrecoverableStatus
  std::optional<Clock::time_point> kill_deadline_;
  std::chrono::milliseconds stop_timeout_{0};  ///< what kill_deadline_ was set from
  std::optional<Clock::time_point> drain_deadline_;
  bool stdout_open_ = true;
  bool stderr_open_ = true;
};

Supervisor::~Supervisor() {
  // Only after an error inside cohortrun can ranks still run here; none may outlive it.
  for (Rank& rank : ranks_) {
    if (rank.running) {
      ::kill(-rank.pid, SIGKILL);
      ::waitpid(rank.pid, nullptr, 0);
    }
  }
  for (Rank& rank : ranks_) {
    if (rank.stdout_fd >= 0) ::close(rank.stdout_fd);
    if (rank.stderr_fd >= 0) ::close(rank.stderr_fd);
  }
  // SIGINT and SIGTERM stay blocked from here on: one that comes between attempts waits, pending,
  // for cohortrun's wait to restart or the next attempt's handlers (Note [Restarts]).
  ::sigprocmask(SIG_BLOCK, &stopping_signals(), nullptr);
  for (int signal_number : kHandledSignals) std::signal(signal_number, SIG_DFL);
  g_signal_pipe_write = -1;
  for (int fd : signal_pipe_) {
    if (fd >= 0) ::close(fd);
  }
}

void Supervisor::install_signal_handlers() {
  if (::pipe2(signal_pipe_, O_CLOEXEC | O_NONBLOCK) != 0) {
    throw std::runtime_error("cannot create a pipe: " + errno_text(errno));
  }
  g_signal_pipe_write = signal_pipe_[1];
  struct sigaction action {};
  action.sa_handler = on_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  for (int signal_number : kHandledSignals) ::sigaction(signal_number, &action, nullptr);
  // Blocked by an earlier attempt's supervisor as it ended; one pending now is handled at once.
  ::sigprocmask(SIG_UNBLOCK, &stopping_signals(), nullptr);
  // A closed stdout must not kill cohortrun while its ranks run; the ranks get SIGPIPE back.
  std::signal(SIGPIPE, SIG_IGN);
}

bool Supervisor::start(const RankSpec& spec) {
  Rank& rank = ranks_.emplace_back(spec.rank);
  int output[2] = {-1, -1};
  int errors[2] = {-1, -1};
  int exec_status[2] = {-1, -1};
  if ((options_.prefix_output &&
       (::pipe2(output, O_CLOEXEC) != 0 || ::pipe2(errors, O_CLOEXEC) != 0)) ||
      ::pipe2(exec_status, O_CLOEXEC) != 0) {
    throw std::runtime_error("cannot create a pipe: " + errno_text(errno));
  }

  // Everything the child needs is built before fork: after it, only async-signal-safe calls.
  std::vector<char*> argv;
  for (const std::string& argument : options_.command) {
    argv.push_back(const_cast<char*>(argument.c_str()));
  }
  argv.push_back(nullptr);
  std::vector<char*> envp;
  for (const std::string& entry : spec.environment)
    envp.push_back(const_cast<char*>(entry.c_str()));
  envp.push_back(nullptr);
  const pid_t parent = ::getpid();

  // Block signals across fork so no handler of ours runs in the child before exec.
  sigset_t all;
  sigset_t previous;
  sigfillset(&all);
  ::sigprocmask(SIG_SETMASK, &all, &previous);
  const pid_t pid = ::fork();
  if (pid == 0) {
    for (int signal_number : {SIGINT, SIGTERM, SIGCHLD, SIGPIPE}) {
      std::signal(signal_number, SIG_DFL);
    }
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);
    if (options_.prefix_output) {
      ::dup2(output[1], STDOUT_FILENO);
      ::dup2(errors[1], STDERR_FILENO);
    }
    const int null_input = ::open("/dev/null", O_RDONLY);
    if (null_input >= 0) ::dup2(null_input, STDIN_FILENO);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::execvpe(argv[0], argv.data(), envp.data());
    const int error = errno;
    [[maybe_unused]] const auto written = ::write(exec_status[1], &error, sizeof error);
    ::_exit(127);
  }
  const int fork_error = errno;
  if (pid > 0) ::setpgid(pid, pid);  // Also here, so a signal sent right away finds the group.
  ::sigprocmask(SIG_SETMASK, &previous, nullptr);
  for (int fd : {output[1], errors[1], exec_status[1]}) {
    if (fd >= 0) ::close(fd);
  }
  if (pid < 0) {
    for (int fd : {output[0], errors[0], exec_status[0]}) {
      if (fd >= 0) ::close(fd);
    }
    throw std::runtime_error("cannot start rank " + std::to_string(spec.rank) +
                             ": fork: " + errno_text(fork_error));
  }
  rank.pid = pid;
  rank.running = true;
  rank.stdout_fd = output[0];
  rank.stderr_fd = errors[0];
  for (int fd : {rank.stdout_fd, rank.stderr_fd}) {
    if (fd >= 0) ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  }

  // The exec pipe closes on a successful exec; otherwise it carries errno.
  int exec_error = 0;
  ssize_t received = 0;
  do {
    received = ::read(exec_status[0], &exec_error, sizeof exec_error);
  } while (received < 0 && errno == EINTR);
  ::close(exec_status[0]);
  if (received == static_cast<ssize_t>(sizeof exec_error)) {
    report("cannot run '" + options_.command.front() + "': " + errno_text(exec_error));
    failure_status_ = 127;
    any_rank_failed_ = true;
    return false;
  }
  return true;
}

void Supervisor::signal_all(int signal_number) {
  for (const Rank& rank : ranks_) {
    // The group outlives a reaped leader while the rank's own children live on.
    if (rank.pid > 0) ::kill(-rank.pid, signal_number);
  }
}

void Supervisor::begin_stopping() {
  if (kill_deadline_) return;
  signal_all(SIGTERM);
  stop_timeout_ = options_.kill_timeout;
  kill_deadline_ = Clock::now() + options_.kill_timeout;
}

std::size_t Supervisor::running_count() const {
  return static_cast<std::size_t>(
      std::count_if(ranks_.begin(), ranks_.end(), [](const Rank& r) { return r.running; }));
}

bool Supervisor::any_output_open() const {
  return std::any_of(ranks_.begin(), ranks_.end(),
                     [](const Rank& r) { return r.stdout_fd >= 0 || r.stderr_fd >= 0; });
}

void Supervisor::handle_signals() {
  unsigned char bytes[64];
  for (;;) {
    const ssize_t count = ::read(signal_pipe_[0], bytes, sizeof bytes);
    if (count <= 0) {
      if (count < 0 && errno == EINTR) continue;
      return;
    }
    for (ssize_t i = 0; i < count; ++i) {
      const int signal_number = bytes[i];
      if (signal_number == SIGCHLD) continue;  // reap() runs every round anyway
      if (received_signal_ == 0) {
        received_signal_ = signal_number;
        report("received " + signal_name(signal_number) + "; passing it to " +
               plural(running_count(), "rank"));
        signal_all(signal_number);
        stop_timeout_ = options_.grace;
        if (!kill_deadline_) kill_deadline_ = Clock::now() + options_.grace;
      } else {
        report("received another signal; killing every rank");
        signal_all(SIGKILL);
      }
    }
  }
}

void Supervisor::forward_output(int& fd, LinePrefixer& lines, int destination, bool last) {
  bool& open = destination == STDOUT_FILENO ? stdout_open_ : stderr_open_;
  char buffer[1 << 16];
  // Bounded, so that one chatty rank cannot starve the others; poll() brings us back.
  for (int round = 0; round < 16; ++round) {
    const ssize_t count = ::read(fd, buffer, sizeof buffer);
    if (count > 0) {
      const std::string text = lines.feed({buffer, static_cast<std::size_t>(count)});
      if (open && !text.empty()) open = write_all(destination, text);
      continue;
    }
    if (count < 0 && errno == EINTR) continue;
    const bool drained = count < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
    if (drained && !last) return;
    // The end of the output, a failed pipe, or the last look: flush the unfinished line.
    const std::string rest = lines.finish();
    if (open && !rest.empty()) open = write_all(destination, rest);
    ::close(fd);
    fd = -1;
    return;
  }
}

void Supervisor::on_rank_failed(const Rank& rank, int status) {
  any_rank_failed_ = true;
  if (failure_status_ || received_signal_ != 0) return;
  std::string what;
  if (WIFSIGNALED(status)) {
    const int signal_number = WTERMSIG(status);
    failure_status_ = 128 + signal_number;
    what = "was killed by signal " + std::to_string(signal_number) + " (" +
           std::string(::strsignal(signal_number)) + (WCOREDUMP(status) ? ", core dumped" : "") +
           ")";
  } else {
    failure_status_ = WEXITSTATUS(status);
    what = "exited with status " + std::to_string(WEXITSTATUS(status));
  }
  const std::size_t others = running_count();
  std::string message =
      "rank " + std::to_string(rank.rank) + " (pid " + std::to_string(rank.pid) + ") " + what;
  if (others > 0) message += "; stopping the other " + plural(others, "rank");
  report(message);
  begin_stopping();
}

void Supervisor::reap() {
  for (Rank& rank : ranks_) {
    if (!rank.running) continue;
    int status = 0;
    pid_t result = 0;
    do {
      result = ::waitpid(rank.pid, &status, WNOHANG);
    } while (result < 0 && errno == EINTR);
    if (result != rank.pid) continue;
    rank.running = false;
    // Pass on what the rank wrote last (often why it failed) before reporting its end.
    if (rank.stdout_fd >= 0) forward_output(rank.stdout_fd, rank.stdout_lines, STDOUT_FILENO);
    if (rank.stderr_fd >= 0) forward_output(rank.stderr_fd, rank.stderr_lines, STDERR_FILENO);
    if (WIFEXITED(status) && WEXITSTATUS(status) == kPreemptedStatus) ++preempted_ranks_;
    if (WIFEXITED(status) && WEXITSTATUS(status) == kUnrecoverableStatus &&
        unrecoverable_rank_ < 0) {
      unrecoverable_rank_ = rank.rank;
    }
    if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0)) on_rank_failed(rank, status);
  }
}

int Supervisor::poll_timeout_ms() const {
  std::optional<Clock::time_point> next;
  if (kill_deadline_ && running_count() > 0) next = kill_deadline_;
  if (drain_deadline_ && (!next || *drain_deadline_ < *next)) next = drain_deadline_;
  if (!next) return -1;
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(*next - Clock::now()).count();
  return static_cast<int>(std::clamp<long long>(left, 0, 60'000));
}

int Supervisor::run(const std::vector<RankSpec>& specs) {
  install_signal_handlers();
  ranks_.reserve(specs.size());
  for (const RankSpec& spec : specs) {
    if (received_signal_ != 0 || !start(spec)) {
      begin_stopping();
      break;
    }
  }

  std::vector<pollfd> fds;
  std::vector<std::pair<Rank*, bool>> owners;  // rank and whether the fd is its stdout
  for (;;) {
    reap();
    if (kill_deadline_ && running_count() > 0 && Clock::now() >= *kill_deadline_) {
      report(plural(running_count(), "rank") + " still running after " +
             std::to_string(stop_timeout_.count()) + " ms; sending SIGKILL");
      signal_all(SIGKILL);
      kill_deadline_ = Clock::time_point::max();
    }
    if (running_count() == 0) {
      if (!any_output_open()) break;
      // A rank's own children may hold its pipes open; give them a moment, then stop reading.
      if (!drain_deadline_) drain_deadline_ = Clock::now() + std::chrono::seconds(1);
      if (Clock::now() >= *drain_deadline_) {
        for (Rank& rank : ranks_) {
          if (rank.stdout_fd >= 0) {
            forward_output(rank.stdout_fd, rank.stdout_lines, STDOUT_FILENO, true);
          }
          if (rank.stderr_fd >= 0) {
            forward_output(rank.stderr_fd, rank.stderr_lines, STDERR_FILENO, true);
          }
        }
        break;
      }
    }

    fds.clear();
    owners.clear();
    fds.push_back({signal_pipe_[0], POLLIN, 0});
    owners.emplace_back(nullptr, false);
    for (Rank& rank : ranks_) {
      if (rank.stdout_fd >= 0) {
        fds.push_back({rank.stdout_fd, POLLIN, 0});
        owners.emplace_back(&rank, true);
      }
      if (rank.stderr_fd >= 0) {
        fds.push_back({rank.stderr_fd, POLLIN, 0});
        owners.emplace_back(&rank, false);
      }
    }
    const int ready = ::poll(fds.data(), fds.size(), poll_timeout_ms());
    if (ready < 0) {
      if (errno == EINTR) continue;
      throw std::runtime_error("poll: " + errno_text(errno));
    }
    if (fds[0].revents != 0) handle_signals();
    for (std::size_t i = 1; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      Rank& rank = *owners[i].first;
      if (owners[i].second) {
        forward_output(rank.stdout_fd, rank.stdout_lines, STDOUT_FILENO);
      } else {
        forward_output(rank.stderr_fd, rank.stderr_lines, STDERR_FILENO);
      }
    }
  }

  if (unrecoverable_rank_ >= 0) return kUnrecoverableStatus;
  if (failure_status_) return *failure_status_;
  if (received_signal_ != 0 && preempted_ranks_ == specs.size() && ranks_.size() == specs.size()) {
    // Every rank saved and stopped when asked to: a clean preemption, for a job script to
    // requeue, not a failure by the signal.
    report("every rank exited with status " + std::to_string(kPreemptedStatus) +
           " (saved and stopped after the " + signal_name(received_signal_) + "); exiting with " +
           std::to_string(kPreemptedStatus));
    return kPreemptedStatus;
  }
  if (received_signal_ != 0 && any_rank_failed_) return 128 + received_signal_;
  return 0;
}

}  // namespace

SuperviseOutcome supervise(const SupervisorOptions& options, const std::vector<RankSpec>& ranks) {
  Supervisor supervisor(options);
  const int status = supervisor.run(ranks);
  return SuperviseOutcome{status, supervisor.received_signal(), supervisor.unrecoverable_rank()};
}

}  // namespace cohortrun
