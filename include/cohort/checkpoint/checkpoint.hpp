#pragma once

/// @file
/// `Checkpointer`: saves and restores everything a training step depends on, so that a run
/// interrupted at any instant resumes exactly where its last checkpoint left it.
///
///     cohort::Checkpointer checkpoints(dp, &optimizer, {.directory = "ckpt", .keep_last = 3});
///     cohort::TrainingState state;                         // step 0: a fresh start
///     if (auto loaded = checkpoints.load()) {              // resume from `latest`
///       state = *loaded;
///       state.seek(sampler);                               // the batch after the saved step
///     }
///     while (state.step < steps) {
///       train_one_step(sampler.next_batch());              // forward, backward, optimizer step
///       state = cohort::TrainingState::at(state.step + 1, sampler);  // the state AFTER the step
///       if (state.step % every == 0) checkpoints.save_async(state);
///     }
///
/// The state saved is the one after the step: its count and the sampler's position once the
/// step's batch was taken. A state from before the step would make a resumed run train that step
/// again. docs/checkpoint.md has the whole program, with preemption, compiled and run by the tests.
///
/// What is saved: the parameter arena, every state array of the optimizer (momentum, AdamW
/// moments, fp32 master weights; a ZeRO-1 optimizer's shards), its steps taken (the schedule's
/// position) and base learning rate, the loss scaler, and the program's `TrainingState` (step
/// counter, epoch, data position, and an opaque blob for its own state such as RNG seeds).
///
/// Note [Checkpoint publish]
/// A checkpoint is the folder `<directory>/step-<12 digits>/`: a file `rank-<r>.bin` per rank and
/// `manifest.json` (manifest.hpp). A save (collective):
///   1. each rank copies its pieces (Note [Checkpoint arrays]) to host memory (the stall);
///   2. rank 0 empties `<directory>/.incomplete-step-N/`; each rank then writes its file there
///      and fsyncs it, and reports its size and checksums (or its error) through the store;
///   3. rank 0, once its own file is written, writes and fsyncs a temporary file naming `step-N`;
///      once every rank reported success, it writes the manifest, fsyncs the folder, renames it
///      to `step-N`, fsyncs `<directory>`, then renames the temporary file over `latest`, fsyncs
///      `<directory>`, and deletes all but the newest `keep_last` checkpoints (Note [Checkpoint
///      deletion] in deletion.cpp);
///   4. rank 0 reports the outcome; every rank returns, or throws the first error.
/// A crash before the rename leaves only an `.incomplete-` folder, which no load looks at; a crash
/// between the rename and the move of `latest` leaves a complete folder that `latest` does not name
/// yet, so the next load takes the previous checkpoint (and the next save deletes it). `latest`
/// always names a complete, fsynced checkpoint.
///
/// Note [Checkpoint load]
/// A load reads and checks everything before it changes anything: the manifest (format, registry
/// fingerprint and layout, dtypes, optimizer rule, world size), every file's presence and size,
/// and the checksum of every piece this rank reads. The ranks then agree through the store; only
/// when every rank succeeded do they write parameters and state. A failure is a
/// `CheckpointError` naming the checkpoint, the file and the problem; with `fallback` the ranks try
/// the next older checkpoint instead. A checkpoint saved on N ranks loads on M ranks
/// (`allow_resharding`): each rank reads the element ranges of its own shard from whichever files
/// hold them. A replicated array is read by every rank, or, with `gather_replicated`, in slices,
/// one per rank, that the ranks all-gather once they agree: every byte is still checked (by
/// the rank that reads it) before anything is written.
///
/// Note [Checkpoint copy]
/// On a GPU a save's only stall is its copy to pinned host memory, and even that runs on a CUDA
/// stream of the Checkpointer's after the work already on the compute stream. `save` waits for
/// it; `save_async` does not: it makes the optimizer's next `step()` wait for it
/// (`Optimizer::write_after`), so the copy overlaps the next step's forward and backward, which
/// read the parameters and do not write them. On the host there is no such copy: the writer reads
/// the arrays in place and the optimizer's next `step()` first has it hand over what it has not
/// read (Note [Checkpoint in place] in snapshot.cpp). Without an optimizer nothing marks the
/// next write of the parameters, so `save_async` waits for the copy, or on the host stages
/// everything itself. The background writer waits for the copy before it checksums and writes the
/// file. After `save_async`, nothing but the optimizer's step may write the parameters or the
/// optimizer's state until the save has finished (`wait()`).
///
/// Note [Checkpoint optimizer state]
/// A checkpoint without the optimizer's state resumes with its moments and step count at zero:
/// the run goes on, diverges from the uninterrupted one, and says nothing. So leaving the state
/// out is a choice made by name, `cohort::without_optimizer`, never by a null pointer (an error),
/// and it is checked: the optimizers register the arena they step (`optimizers_stepping`), and a
/// Checkpointer built without one refuses, with an `InvalidArgument` naming the optimizer, to be
/// built, to save or to load while an optimizer steps its parameters. An error, not a warning:
/// what it prevents is a silent, permanent change of the run, and the fix is one argument; the
/// checks at construction and at the load come before the first step of a run, so the error
/// costs no training. A checkpoint saved without optimizer state does not load into a
/// Checkpointer that has an optimizer either (`UnloadableCheckpoint`).
///
/// Note [Resharding exactness]
/// A checkpoint loads exactly on any number of ranks: every element of the parameters and of the
/// optimizer's state comes back bit for bit, re-split over the new ranks. The steps after it are
/// bitwise equal to the uninterrupted run only on the same number of ranks (with the same
/// communicator and global batch): each rank's gradient is its mean over its slice of the global
/// batch, averaged over the ranks, and on another number of ranks those sums are taken in
/// another order: each step's gradient differs from the uninterrupted run's in its last bits, and
/// training carries those differences on. The run stays within rounding of the uninterrupted one;
/// it is not bitwise equal to it (unless every sum happens to round alike, as with gradients that
/// are exact in their dtype). A load on another number of ranks says so in one log line on
/// rank 0.
///
/// Threads: a Checkpointer is used by its rank's thread; the asynchronous writer is its own.

#include <cohort/checkpoint/manifest.hpp>
#include <cohort/ddp/data_parallel.hpp>
#include <cohort/optim/loss_scaler.hpp>
#include <cohort/optim/optimizer.hpp>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>

namespace cohort {

class DistributedSampler;

/// The program's position, saved with the arenas.
struct TrainingState {
  std::int64_t step = 0;  ///< steps completed
  std::uint64_t epoch = 0;
  /// Samples of `epoch` consumed over all ranks. It does not depend on the world size, so a run
  /// resumed on another number of ranks derives its ranks' positions from it.
  std::uint64_t data_position = 0;
  std::string user_blob;  ///< the program's own bytes; rank 0's are saved

  /// The state once `steps` steps are done and `sampler` stands where it hands out the next
  /// batch: call it after the step, with the step counted (`state.step + 1`). Its data position is
  /// the sampler's, in samples over all ranks.
  static TrainingState at(std::int64_t steps, const DistributedSampler& sampler,
                          std::string user_blob = {});

  /// Moves `sampler` to this state's epoch and data position, where the run that saved it would
  /// have taken its next batch; on any number of ranks.
  /// @throws InvalidArgument when the data position is not a whole number of the sampler's global
  ///         batches (the checkpoint was saved with another global batch).
  void seek(DistributedSampler& sampler) const;
};

/// Says that a Checkpointer saves and loads no optimizer state (Note [Checkpoint optimizer
/// state]): `Checkpointer(dp, cohort::without_optimizer, options)`.
struct WithoutOptimizer {
  explicit WithoutOptimizer() = default;
};
inline constexpr WithoutOptimizer without_optimizer{};

/// The instants of a save at which a test can stop it (Note [Checkpoint publish]).
enum class SavePoint : std::uint8_t {
  shard_started,  ///< on every rank: its file is about to be written, nothing of it read yet
  shard_written,  ///< on every rank: its file is written and fsynced, not yet reported
  before_rename,  ///< on rank 0: the manifest is written, the folder not yet renamed
  before_latest,  ///< on rank 0: the folder is renamed, `latest` not yet moved
};

struct CheckpointOptions {
  /// Where checkpoints go: every rank must see the same folder (a shared file system across
  /// nodes). Created when missing.
  std::filesystem::path directory = {};
  /// Checkpoints kept after a save (the newest ones); 0 keeps all.
  int keep_last = 3;
  /// Load: when the checkpoint `latest` names fails its checks, try older ones, newest first.
  bool fallback = false;
  /// Load: accept a checkpoint saved on another number of ranks.
  bool allow_resharding = true;
  /// Load: each rank reads only its slice of the replicated arrays (parameters, unsharded
  /// optimizer state) and the ranks all-gather them, instead of every rank reading all of them.
  /// Unset: unless the communicator is Gloo over TCP (NCCL's and the shared-memory all-gather
  /// were faster than every rank reading all; Gloo's over TCP was slower; docs/checkpoint.md).
  std::optional<bool> gather_replicated = std::nullopt;
  /// Save: write each rank's file around the page cache (O_DIRECT) where the file system allows
  /// it, which saves the CPU time of copying the bytes into the page cache; a load right after
  /// then reads them from the disk. Off: ordinary buffered writes.
  bool direct_io = true;
  /// Called at each `SavePoint` (tests: throw from it to abandon the save there). The variable
  /// `COHORT_CHECKPOINT_CRASH_AT=<point>[:<rank>]` (points: shard_started, shard_written,
  /// before_rename, before_latest) instead kills the process with SIGKILL there, for tests with
  /// processes.
  std::function<void(SavePoint)> test_hook = nullptr;
};

class Checkpointer {
 public:
  /// Saves and loads `dp`'s parameters, `optimizer`'s state (the optimizer stepping them) and,
  /// when given, `scaler`'s state. They must outlive the Checkpointer. Not collective.
  /// @throws InvalidArgument for a null optimizer (Note [Checkpoint optimizer state]), one that
  ///         steps other parameters, an empty directory or a negative `keep_last`.
  Checkpointer(DataParallel& dp, Optimizer* optimizer, CheckpointOptions options,
               LossScaler* scaler = nullptr);
  /// Saves and loads `dp`'s parameters alone, where no optimizer steps them (evaluation,
  /// hand-written updates). Not collective.
  /// @throws InvalidArgument while an optimizer steps `dp`'s parameters (then, and at every save
  ///         and load: Note [Checkpoint optimizer state]), or for bad options.
  Checkpointer(DataParallel& dp, WithoutOptimizer, CheckpointOptions options);
  /// Not a way to leave the optimizer's state out: pass `&optimizer`, or
  /// `cohort::without_optimizer`.
  Checkpointer(DataParallel& dp, std::nullptr_t, CheckpointOptions options,
               LossScaler* scaler = nullptr) = delete;
  /// Waits for an asynchronous save in flight (its error, if any, is logged).
  ~Checkpointer();
  Checkpointer(const Checkpointer&) = delete;
  Checkpointer& operator=(const Checkpointer&) = delete;
  Checkpointer(Checkpointer&&) = delete;
  Checkpointer& operator=(Checkpointer&&) = delete;

  /// Saves `state` and the arenas as checkpoint `state.step` and returns its folder once every
  /// rank's part is durable and `latest` names it. Collective. Waits for the work enqueued on the
  /// compute stream; waits for an asynchronous save in flight first.
  /// @throws CheckpointError naming the rank and file that failed; TimeoutError when a rank never
  ///         reports.
  std::filesystem::path save(const TrainingState& state);

  /// Copies the arenas and state to host memory now (the only stall), then writes and publishes
  /// them on a background thread while training goes on. Collective. One save is in flight at a
  /// time: a call while one is in flight first waits for it to finish (no request is dropped).
  /// @throws the error of the previous asynchronous save, if it failed.
  void save_async(const TrainingState& state);

  /// Waits for the asynchronous save in flight, if any. @throws its error.
  void wait();

  /// Whether a load all-gathers slices of the replicated arrays: `gather_replicated`, or its
  /// default for this Checkpointer's communicator.
  bool gathers_replicated() const noexcept;

  /// Whether an asynchronous save is still being written.
  bool save_in_flight() const noexcept;

  /// Loads the checkpoint `latest` names (Note [Checkpoint load]); nothing when the directory
  /// has none (a fresh start). Collective. On another number of ranks than the checkpoint's,
  /// rank 0 logs what exactness to expect (Note [Resharding exactness]).
  /// @throws UnloadableCheckpoint when it can never load into this program (another model or
  ///         optimizer, damaged, ...; all of them, with `fallback`), saying what to do;
  ///         CheckpointError when reading failed.
  std::optional<TrainingState> load();

  /// Loads the checkpoint in `folder`. Collective. @throws as `load`.
  TrainingState load(const std::filesystem::path& folder);

  const CheckpointOptions& options() const noexcept;

 private:
  struct Impl;  // src/checkpoint/checkpointer_impl.hpp
  std::unique_ptr<Impl> impl_;
};

}  // namespace cohort
