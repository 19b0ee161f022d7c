#pragma once

/// @file
/// Starts the ranks of one node and watches them: forwards their output and the signals cohortrun
/// receives, and stops them all when one fails.

#include <chrono>
#include <string>
#include <vector>

namespace cohortrun {

/// One rank to start.
struct RankSpec {
  int rank = 0;
  /// The whole environment of the process, as "NAME=value".
  std::vector<std::string> environment;
};

struct SupervisorOptions {
  /// PROGRAM and its arguments, passed to `execvp` untouched.
  std::vector<std::string> command;
  /// Put "[rank R] " before every line of output (through pipes); otherwise the ranks write to
  /// cohortrun's own stdout and stderr.
  bool prefix_output = true;
  /// After asking the ranks to stop (SIGTERM) because one failed, how long to wait before
  /// SIGKILL.
  std::chrono::milliseconds kill_timeout{5000};
  /// After passing on a SIGTERM or SIGINT that cohortrun received, how long the ranks have to
  /// save and exit before SIGKILL (a preempted machine's remaining time).
  std::chrono::milliseconds grace{30000};
};

/// A rank's exit status saying "saved a checkpoint and stopped because it was asked to; run me
/// again later" (EX_TEMPFAIL; cohort::kPreemptedExitStatus).
inline constexpr int kPreemptedStatus = 75;
/// A rank's exit status saying "a restart cannot fix this" (EX_CONFIG: a checkpoint that can
/// never load, a bad configuration): never restarted.
inline constexpr int kUnrecoverableStatus = 78;

/// How one supervised run ended.
struct SuperviseOutcome {
  int status = 0;               ///< cohortrun's exit status for this run (below)
  int received_signal = 0;      ///< SIGINT or SIGTERM when cohortrun itself was asked to stop
  int unrecoverable_rank = -1;  ///< the first rank that exited kUnrecoverableStatus, or -1
};

/// Runs every rank to the end and returns cohortrun's exit status:
/// - 0 when every rank exits 0;
/// - 78 when any rank exits 78 (kUnrecoverableStatus), whatever the others did;
/// - the status of the first rank that fails (its exit code, or 128 + the signal that killed
///   it), after the others were sent SIGTERM and, past `kill_timeout`, SIGKILL;
/// - 127 when PROGRAM cannot be executed;
/// - when cohortrun received SIGINT or SIGTERM (forwarded to every rank, which then have `grace`
///   before SIGKILL): 75 when every rank exits 75 (each saved and stopped: a clean preemption),
///   else 128 + the signal unless every rank exits 0.
///
/// Note [Supervising ranks]: each rank runs in its own process group, so that a signal reaches
/// the whole tree the rank started (a shell and its children) and a terminal's Ctrl-C reaches
/// cohortrun alone, which then decides. Signals arrive through a self-pipe; one `poll` waits on
/// it and on the ranks' output pipes, and `waitpid(WNOHANG)` reaps, so nothing blocks. A rank
/// also dies with SIGKILL if cohortrun itself dies (PR_SET_PDEATHSIG), so none is orphaned.
/// The ranks' stdin is /dev/null.
SuperviseOutcome supervise(const SupervisorOptions& options, const std::vector<RankSpec>& ranks);

}  // namespace cohortrun
