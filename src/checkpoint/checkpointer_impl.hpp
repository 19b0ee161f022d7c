#pragma once

// Private to the checkpoint layer: what a Checkpointer holds (its Impl), the arrays it saves and
// how they are cut into pieces (Note [Checkpoint arrays] in manifest.hpp), and the host copy of
// one save. Where each part lives:
//   checkpointer.cpp  construction, save, save_async and wait (the writer thread)
//   snapshot.cpp      the host copy of a save, read in place on the host (Note [Checkpoint in
//   place]) publish.cpp       each rank's durable file, and rank 0's manifest, renames and `latest`
//   deletion.cpp      old checkpoints renamed away and deleted on a thread of their own
//   rank_report.cpp   what the ranks tell one another through the store, encoded and checked
//   layout.cpp        pieces, the registry as the manifest lists it, and its fingerprint
//   checkpoint_load.cpp  check, agree, read, agree, then write or put back (Note [Checkpoint load])

#include "rank_report.hpp"

#include <cohort/checkpoint/checkpoint.hpp>

#include <cohort/launch/store.hpp>
#include <cohort/memory/buffer.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace cohort {
namespace detail {

/// One array: its global name, type and length, and this rank's copy of elements
/// [view_offset, view_offset + view.count()) of it.
struct CheckpointArray {
  std::string name;
  DType dtype = DType::f32;
  std::uint64_t count = 0;  ///< global length (the arena's used count)
  TensorView view;
  std::uint64_t view_offset = 0;
};

/// How far the writer has read the pieces it reads in place, in this rank's own memory (Note
/// [Checkpoint in place]), and from where on their bytes have been copied to staging instead.
/// Shared with the optimizer's hook, which may outlive the save.
struct InPlaceReads {
  std::mutex mutex;
  std::condition_variable idle;
  std::uint64_t read_to = 0;      ///< the writer has copied out the file's bytes before this
  std::uint64_t staged_from = 0;  ///< the file's bytes from here on are in staging
  bool reading = false;           ///< the writer is copying a block out of this rank's memory
  bool finished = false;          ///< the writer needs this rank's memory no more
};

/// The host copy of one save and what the writer needs to finish it; its staging memory is also
/// what a load reads into (a load first waits for any save).
struct Snapshot {
  std::shared_ptr<MemoryResource> resource;  ///< host memory; pinned for a CUDA device
  Buffer staging;                            ///< reused; grows only
  std::uint64_t size = 0;       ///< bytes of this rank's file, piece after piece, at the front
  std::optional<Stream> side;   ///< the copy's stream (Note [Checkpoint copy])
  std::optional<Event> copied;  ///< completes when the copy has
  std::vector<std::uint64_t> piece_bytes;  ///< each piece's size, in file order
  /// Where each piece's bytes are: this rank's memory, read in place (a host array, Note
  /// [Checkpoint in place]), or nullptr for `staging`, at the piece's offset in the file.
  std::vector<const unsigned char*> piece_sources;
  std::shared_ptr<InPlaceReads> reads;  ///< null when no piece is read in place
  Buffer bounce;      ///< a chunk copied out of in-place pieces on its way to the disk
  Manifest manifest;  ///< everything but files and pieces (filled by rank 0 at publish)
  std::uint64_t save_index = 0;
  int rank = 0;
  int world_size = 0;
  std::uint64_t shard_count = 0;  ///< the saving world's shard size n
  /// Where the copies of the optimizer's step counter and the loss scaler's state lie in
  /// `staging`, after the file's bytes (Note [Checkpoint counters]); whether each was copied.
  std::uint64_t counters_at = 0;
  bool steps_copied = false;
  bool scaler_copied = false;

  /// The front of `staging`, aligned for O_DIRECT writes (Note [Checkpoint direct I/O]).
  unsigned char* bytes() noexcept;
  /// Makes `staging` hold at least `bytes` bytes (its contents are not kept).
  void reserve(std::uint64_t bytes);
  /// Sees bytes [at, at + count) of the file, at `bytes`, before they are written.
  using ChunkBytes =
      std::function<void(const unsigned char* bytes, std::uint64_t at, std::uint64_t count)>;
  /// The file's bytes [offset, offset + count), for the writer: in staging, or copied out of the
  /// in-place pieces (or staging, once `stage_rest` ran) into `bounce` block by block (`offset`
  /// is where the previous call ended). `see` is shown them all, in order, each block while it is
  /// still in cache after its copy.
  const unsigned char* chunk(std::uint64_t offset, std::uint64_t count, const ChunkBytes& see);
  /// Copies what the writer has not yet copied out of the in-place pieces into staging, where it
  /// goes on from; waits for a block being copied out first (kInPlaceBlock). Only once `copied`
  /// has completed; does nothing when `of` is not this save's `reads` or the writer has finished
  /// reading.
  void stage_rest(InPlaceReads& of);
  /// Copies the file's bytes [begin, end) to `to`, each from where it is: its piece in place
  /// (unless `staged`), or staging (skipped where `to` is that very place).
  void copy_out(std::uint64_t begin, std::uint64_t end, unsigned char* to, bool staged);
  /// The writer reads this rank's memory no more (also when it failed).
  void finish_reading();
  /// Fills the manifest's step counter and loss scaler from their copies; only once `copied`
  /// has completed.
  void decode_counters();
};

/// Elements [begin, end) of an array of `count` elements written by `rank` when shards have
/// `shard_count` elements (Note [Checkpoint arrays]).
struct PieceRange {
  std::uint64_t begin = 0;
  std::uint64_t end = 0;
};
PieceRange piece_range(std::uint64_t count, std::uint64_t shard_count, int rank) noexcept;

/// The arena layout a checkpoint is written in: `dp`'s own in plain data parallel and ZeRO-1, the
/// plain one of the same registry and world size in the sharded modes (Note [Sharded
/// checkpoints] in sharded_state.cpp).
BucketPlan checkpoint_plan(const DataParallel& dp);

/// The registry as the manifest lists it (names, shapes, dtypes, offsets in `checkpoint_plan`),
/// and its fingerprint.
std::vector<ManifestParam> manifest_params(const DataParallel& dp);
std::string registry_fingerprint(const std::vector<ManifestParam>& params);

/// Lowers the calling thread's priority (Note [Checkpoint writer priority] in checkpointer.cpp).
void lower_thread_priority() noexcept;

/// Kills this process (SIGKILL) when `COHORT_CHECKPOINT_CRASH_AT` names `point` (and this rank,
/// or no rank); the points are the SavePoints' names and "load_read" (a load has read its slices,
/// straight into the arenas at start-up, and not yet agreed).
void reach_crash_point(std::string_view point, int rank);
/// Acts on `COHORT_CHECKPOINT_CRASH_AT` and the test hook at `point`.
void reach_save_point(const CheckpointOptions& options, SavePoint point, int rank);
void reach_load_point(std::string_view point, int rank);

/// How a start-up load puts an array back when no checkpoint loads (Note [Putting back] in
/// checkpoint_load.cpp); `none`: it cannot without a copy, so it is read through staging.
enum class PutBack : std::uint8_t { none, from_peers, zeros, from_params };

/// One run of this rank's elements in the sharded modes: checkpoint elements [checkpoint, +
/// count) are arena elements [arena, + count) and shard elements [shard, + count).
struct ShardedRun {
  std::uint64_t checkpoint = 0;
  std::uint64_t arena = 0;
  std::uint64_t shard = 0;
  std::uint64_t count = 0;
};

/// What a Checkpointer of ZeRO-2 or ZeRO-3 state keeps (Note [Sharded checkpoints]): each array
/// in checkpoint order, this rank's slice of it, in a buffer of its own.
struct ShardedState {
  std::uint64_t slice_count = 0;   ///< elements of each rank's slice (the plain shard size)
  std::uint64_t used_count = 0;    ///< the plain arena's used count
  std::vector<ShardedRun> runs;    ///< this rank's elements, in checkpoint order
  std::vector<Buffer> slices;      ///< per array, its slice in checkpoint order
  std::vector<TensorView> states;  ///< per array, the state itself
  std::vector<bool> by_arena;      ///< per array, indexed by arena (ZeRO-2's parameters)
};

/// This rank's runs of `layout` in `plain`'s order (the elements of its pieces that belong to a
/// parameter).
std::vector<ShardedRun> sharded_runs(const ShardLayout& layout, const BucketPlan& plain, int rank);

struct ArrayLoad;  // checkpoint_load.cpp: one array's part in one attempt to load
struct Attempt;    // and the attempt

}  // namespace detail

/// Everything a Checkpointer holds; its methods live in the files listed at the top.
struct Checkpointer::Impl {
  /// `optimizer` null only `without_optimizer`.
  Impl(DataParallel& dp, Optimizer* optimizer, bool without_optimizer, CheckpointOptions options,
       LossScaler* scaler);

  /// Without an optimizer, throws InvalidArgument when one steps the parameters now (Note
  /// [Checkpoint optimizer state]); `doing` names the call.
  void check_no_optimizer_left_out(const std::string& doing) const;

  /// The store keys of this Checkpointer's saves and loads (Note [Checkpointer keys]).
  std::string key_prefix() const;

  // checkpointer.cpp
  void wait();

  // snapshot.cpp: starts the copy of the arenas and counters (Note [Checkpoint copy]).
  void take_snapshot(const TrainingState& state, detail::Snapshot& into);

  // publish.cpp: the writer's part, on every rank (Note [Checkpoint publish]).
  void write_and_publish(detail::Snapshot& snapshot);
  /// Rank 0, once every rank reported success: the manifest, the renames, `latest`.
  void publish(detail::Snapshot& snapshot, const std::vector<detail::RankReport>& reports);

  // deletion.cpp
  /// Hides the folders `names` under `root` and deletes them on a thread (Note [Checkpoint
  /// deletion]); waits for the previous deletion first.
  void delete_in_background(const std::filesystem::path& root,
                            const std::vector<std::string>& names);
  void finish_deleting() noexcept;

  // checkpoint_load.cpp
  /// Whether a load now is a start-up load (Note [Start-up load]).
  bool at_startup() const;
  /// Tries one checkpoint on every rank; returns the state (and fills `report`), or nothing with
  /// `failure` set to the first rank's error (the same on every rank). `wrote_arenas` is set once
  /// a start-up attempt has written into the arenas (the same on every rank).
  std::optional<TrainingState> try_load(const std::filesystem::path& folder, bool startup,
                                        LoadReport& report, detail::RankReport& failure,
                                        bool& wrote_arenas);
  /// The checks that read no data (Note [Checkpoint load]); the manifest.
  Manifest check_candidate(const std::filesystem::path& folder) const;
  /// What each array of `attempt` reads where; reserves the staging memory.
  void plan_attempt(detail::Attempt& attempt, bool startup, bool whole_in_staging);
  /// Where element `element` of `load`'s array goes: the arena, or staging.
  unsigned char* target_of(const detail::ArrayLoad& load, std::uint64_t element);
  /// Reads elements `range` of `load`'s array into its target, checking every piece.
  void read_range(const std::filesystem::path& folder, const detail::Attempt& attempt,
                  const detail::ArrayLoad& load, detail::PieceRange range,
                  std::vector<unsigned char>& scratch);
  detail::PutBack put_back_of(const detail::CheckpointArray& array) const;
  /// Puts `mine` under `key` and reads every rank's; false, with the first failure (in rank
  /// order), unless every rank succeeded. `reports` gets them all, in rank order.
  bool agree(const std::string& key, const detail::RankReport& mine, detail::RankReport& failure,
             std::vector<detail::RankReport>* reports = nullptr);
  /// After start-up attempts that wrote into the arenas and failed: puts them back (Note
  /// [Putting back]). Collective.
  void put_back();
  void finish_load(LoadReport& report, std::chrono::steady_clock::time_point start);
  std::optional<TrainingState> load_latest();

  // sharded_state.cpp (Note [Sharded checkpoints]); collective, on the compute stream.
  /// Sets up `sharded` and points `arrays` at its slices.
  void set_up_sharded();
  /// The state into the slices, before a save.
  void to_checkpoint_order();
  /// The slices into the state, after a load (which wrote the slices only).
  void from_checkpoint_order();
  TrainingState load_folder(const std::filesystem::path& folder);

  DataParallel& dp;
  Optimizer* optimizer;    ///< null with `without_optimizer`
  bool without_optimizer;  ///< built with cohort::without_optimizer
  LossScaler* scaler;
  CheckpointOptions options;
  std::vector<detail::CheckpointArray> arrays;
  std::unique_ptr<detail::ShardedState> sharded;  ///< ZeRO-2 and ZeRO-3 only
  std::unique_ptr<Store> store;  ///< this rank's own connection (the writer uses it)
  std::string keys;  ///< key_prefix(): the directory's and this Checkpointer's (its n-th)
  std::unique_ptr<detail::Snapshot> host_copy;  ///< the one staging area, reused
  std::thread writer;
  std::atomic<bool> writing{false};  ///< the writer has not finished yet
  std::exception_ptr writer_error;
  std::thread deleter;  ///< rank 0: deletes old checkpoints (Note [Checkpoint deletion])
  std::uint64_t saves = 0;
  std::uint64_t loads = 0;
  /// Saved, or loaded successfully: a load is no longer a start-up load (Note [Start-up load]).
  bool saved_or_loaded = false;
  std::optional<LoadReport> last_load;
};

}  // namespace cohort
