#pragma once

/// @file
/// What a training program's exit status tells whoever restarts it (`cohortrun --max-restarts`,
/// torchrun, a job script): 0 done; `kPreemptedExitStatus` (75, preemption.hpp) saved and stopped
/// when asked, run me again; 1 failed, a restart may help (a lost peer, a timeout); and
/// `kConfigErrorExitStatus` (78) failed in a way no restart fixes. A program's catch block asks
/// `exit_status_for`:
///
///     try {
///       step();
///     } catch (const std::exception& error) {
///       std::cerr << "train: " << error.what() << '\n';
///       return cohort::exit_status_for(error);   // 78 when a restart cannot fix it, else 1
///     }
///
/// Note [Exit statuses]
/// A restart repeats what the program did, with the same arguments, environment and files. So
/// an error a restart cannot fix is one that depends only on those: cohort's `InvalidArgument`
/// (something the caller passed or configured: an argument, an option, an environment variable,
/// registries that differ across ranks) and `UnloadableCheckpoint` (a checkpoint folder that can
/// never load into this program: every start would fail the same way). Restarting such an error
/// only repeats it, quickly and forever, and hides it in the log. Everything else (a peer that
/// died, a timeout, an I/O error, CUDA, NCCL, memory) may be gone after a restart and maps to 1.
/// Where in doubt, 1: a wrong 78 ends a run a restart would have saved, while a wrong 1 costs
/// one more restart.

#include <exception>

namespace cohort {

/// The exit status of a program that failed in a way a restart may fix.
inline constexpr int kFailedExitStatus = 1;

/// The exit status of a program that failed in a way no restart fixes (EX_CONFIG): a
/// configuration or checkpoint to correct first. It tells `cohortrun --max-restarts` (or a job
/// script) not to start the program again.
inline constexpr int kConfigErrorExitStatus = 78;

/// Whether a restart of the program may get past `error` (Note [Exit statuses]): false for
/// `InvalidArgument` and `UnloadableCheckpoint`, true for every other exception.
bool restart_can_fix(const std::exception& error) noexcept;

/// `kConfigErrorExitStatus` when no restart fixes `error`, else `kFailedExitStatus`.
int exit_status_for(const std::exception& error) noexcept;

}  // namespace cohort
