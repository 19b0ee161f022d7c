#pragma once

/// @file
/// Preemption: a spot instance's SIGTERM (or a scheduler's SIGUSR1) becomes a flag, and at the next
/// step boundary every rank learns, in one tiny collective, whether any rank got one.
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
/// `cohortrun` forwards SIGTERM to every rank and waits `--grace` seconds before SIGKILL; a
/// program stopped this way should exit with `kPreemptedExitStatus`.

#include <cohort/comm/world.hpp>
#include <cohort/core/stream.hpp>
#include <cohort/memory/buffer.hpp>

namespace cohort {

/// The exit status of a rank that saved a checkpoint and stopped because it was asked to
/// (EX_TEMPFAIL: try again later). `cohortrun --max-restarts` restarts such a run like a failed
/// one unless cohortrun itself was asked to stop.
inline constexpr int kPreemptedExitStatus = 75;

/// Installs handlers turning SIGTERM and SIGUSR1 into this process's preemption flag (once;
/// later calls do nothing). The previous handlers are not called.
void install_preemption_handlers();

/// Whether this process received SIGTERM or SIGUSR1 since the handlers were installed (or
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
