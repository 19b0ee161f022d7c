#pragma once

/// @file
/// Preemption: a spot instance's SIGTERM (or a scheduler's SIGUSR1, or a first Ctrl-C) becomes a
/// flag, and at the next step boundary every rank learns, in one tiny collective, whether any rank
/// got one.
///
///     cohort::PreemptionWatch preemption(world, dp.compute_stream());   // installs the handlers
///     for (int i = 0; i < steps; ++i) {
///       step();
///       if (preemption.agreed()) {          // collective, at the same step on every rank
///         checkpoints.save(state);
///         return cohort::kPreemptedExitStatus;
///       }
///     }
///
/// Note [Preemption]
/// The handler only sets an atomic flag (async-signal-safe). `agreed()` all-reduces (max) this
/// rank's flag over the world on the given stream and waits for it: one 4-byte collective per
/// call, so a program may call it every step, or every few steps to save its cost. Every rank
/// gets the same answer at the same step, so all of them save the same checkpoint and stop.
/// `cohortrun` forwards a SIGTERM or SIGINT it receives to every rank and waits `--grace` seconds
/// before SIGKILL; a program stopped this way should exit with `kPreemptedExitStatus`, and when
/// every rank does, so does cohortrun.
///
/// Note [Preemption signals]
/// SIGTERM and SIGUSR1 set the flag every time they arrive: a rank blocked in a collective with a
/// dead peer is ended by the launcher's SIGKILL, not by a repeated SIGTERM. SIGINT sets it once:
/// the first is a request to save (a Ctrl-C should not lose the steps since the last checkpoint),
/// the second has SIGINT's default action and ends the process at once (a save that takes too
/// long can still be interrupted). That holds with or without cohortrun; under cohortrun the ranks
/// run in process groups of their own, so a terminal's Ctrl-C reaches each rank once, passed on
/// by cohortrun, and a second Ctrl-C makes cohortrun kill them. A SIGINT that the program was
/// started ignoring (`program &` in a shell script) stays ignored.

#include <cohort/comm/world.hpp>
#include <cohort/core/stream.hpp>
#include <cohort/memory/buffer.hpp>

namespace cohort {

/// The exit status of a rank that saved a checkpoint and stopped because it was asked to
/// (EX_TEMPFAIL: try again later). `cohortrun --max-restarts` restarts such a run like a failed
/// one unless cohortrun itself was asked to stop; when cohortrun passed the signal on and every
/// rank exits with it, cohortrun exits with it too (a job script requeues on 75).
inline constexpr int kPreemptedExitStatus = 75;

/// Installs handlers turning SIGTERM, SIGUSR1 and the first SIGINT into this process's preemption
/// flag; a second SIGINT ends the process (Note [Preemption signals]). Once; later calls do
/// nothing. The previous handlers are not called.
void install_preemption_handlers();

/// Whether this process received SIGTERM, SIGUSR1 or SIGINT since the handlers were installed (or
/// `request_preemption` was called).
bool preemption_requested() noexcept;

/// Sets (tests, or a program's own reasons) or clears this process's flag.
void request_preemption() noexcept;
void clear_preemption() noexcept;

/// Agrees across the ranks of a world whether any of them was asked to stop (Note [Preemption]).
class PreemptionWatch {
 public:
  /// Installs the handlers. `stream` is where the collective runs (the compute stream).
  PreemptionWatch(World& world, Stream stream);

  /// Whether any rank's flag is set. Collective: every rank calls it at the same step.
  /// Waits for `stream`.
  bool agreed();

 private:
  World& world_;
  Stream stream_;
  Buffer flag_;  ///< one i32 on the world's device
};

}  // namespace cohort
