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
/// rank's flag over the world on the given stream: one 4-byte collective per call, so a program
/// may call it every step, or every few steps to save its cost. Every rank gets the same answer
/// at the same call, so all of them save the same checkpoint and stop.
///
/// Note [Agreeing without waiting for the GPU]
/// On the host the collective runs at once and `agreed()` answers for the flags as they are now.
/// On a GPU, waiting for its answer would wait for the whole step enqueued before it, every step,
/// and the host could never run ahead of the GPU. So there `agreed()` enqueues this call's
/// all-reduce and a copy of its answer into pinned memory, and returns the answer of the
/// previous call: the agreement of the flags as they were one call earlier, which it waits for
/// only if the GPU has not yet reached it (the host then runs at most one call ahead). The
/// answer stays identical on every rank, because every rank's call k returns the all-reduce that
/// every rank issued at call k - 1; the first call answers false everywhere. A signal is acted on
/// one call later than on the host, well inside any launcher's grace period. A PreemptionWatch
/// waits for its last all-reduce when destroyed.
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

#include <cstdint>
#include <optional>

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

  /// Waits for the last all-reduce it enqueued (Note [Agreeing without waiting for the GPU]).
  ~PreemptionWatch();
  PreemptionWatch(const PreemptionWatch&) = delete;
  PreemptionWatch& operator=(const PreemptionWatch&) = delete;

  /// Whether any rank's flag is set. Collective: every rank calls it at the same step. On the
  /// host it waits for `stream` and answers for the flags now; on a GPU it waits for nothing
  /// enqueued since its previous call and answers for the flags as they were then (Note
  /// [Agreeing without waiting for the GPU]).
  bool agreed();

 private:
  World& world_;
  Stream stream_;
  Buffer flag_;  ///< one i32 on the world's device
  /// On a GPU: pinned host words, the flag sent by each of the last two calls ([0], [1]) and
  /// the answer each got back ([2], [3]); and the events that say each answer has arrived.
  Buffer pinned_;
  std::optional<Event> answered_[2];
  std::uint64_t calls_ = 0;
};

}  // namespace cohort
