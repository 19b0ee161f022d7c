#pragma once

/// @file
/// The manifest of a checkpoint (`manifest.json`, written by rank 0 last): what the checkpoint
/// holds and where, and how to check it. `parse_manifest` is a pure function from bytes to a
/// `Manifest` or a `CheckpointError`, so that it can be fuzzed and tested alone.
///
/// Note [Checkpoint arrays]
/// A checkpoint is a set of named flat arrays ("params", "optimizer/exp_avg", ...), each a
/// global array of `count` elements in arena order, over the parameters' slots (the arena without
/// its tail padding, so its length does not depend on the world size). Each array is cut into
/// pieces; piece r (elements [r x n, (r + 1) x n) of the saving world's shard size n) is written
/// by rank r into its own file `rank-<r>.bin`, at `byte_offset`. A rank of a world of any size
/// reads the element ranges it needs from whichever pieces hold them: this is how ZeRO-1 state is
/// re-split over a new number of ranks.

#include <cohort/core/dtype.hpp>
#include <cohort/core/error.hpp>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace cohort {

/// A checkpoint cannot be saved or loaded: a file is missing, truncated or damaged, the manifest
/// is malformed or from a newer format, or the checkpoint does not fit the model. The message
/// names the checkpoint, the file and what is wrong.
class CheckpointError : public Error {
 public:
  using Error::Error;
};

/// A checkpoint that can never load into this program, however often it restarts: saved from
/// another model, without the optimizer state or the loss scaler this program has, on another
/// number of ranks without `allow_resharding`, in a newer format, or damaged (with no older one to
/// fall back to). The message says what to do. `exit_status_for` maps it to
/// `kConfigErrorExitStatus` (exit_status.hpp): do not restart.
/// A failure to read (an I/O error) is a plain CheckpointError: a restart may get past it.
class UnloadableCheckpoint : public CheckpointError {
 public:
  using CheckpointError::CheckpointError;
};

/// The format this version of cohort writes; it reads this one and older ones.
inline constexpr int kCheckpointFormatVersion = 1;

struct ManifestFile {
  std::string name;  ///< relative to the checkpoint's folder
  std::uint64_t bytes = 0;
  std::uint64_t checksum = 0;  ///< `Checksum` of the whole file
};

struct ManifestPiece {
  std::uint32_t file = 0;            ///< index into `Manifest::files`
  std::uint64_t element_offset = 0;  ///< where the piece starts in its array
  std::uint64_t count = 0;           ///< elements
  std::uint64_t byte_offset = 0;     ///< where it starts in its file
  std::uint64_t checksum = 0;        ///< `Checksum` of its bytes
};

struct ManifestArray {
  std::string name;
  DType dtype = DType::f32;
  std::uint64_t count = 0;
  std::vector<ManifestPiece> pieces;  ///< in element order, covering [0, count) exactly
};

/// One parameter of the registry the checkpoint was saved from.
struct ManifestParam {
  std::string name;
  std::vector<std::uint64_t> shape;
  DType dtype = DType::f32;
  std::uint64_t offset = 0;  ///< first element in the arena
};

struct ManifestLossScaler {
  float scale = 0.0f;
  std::int32_t growth_tracker = 0;
  std::int64_t skipped_steps = 0;
  bool last_step_skipped = false;
};

struct Manifest {
  int format_version = kCheckpointFormatVersion;
  std::string cohort_version;
  int world_size = 0;
  /// `Checksum` of the registry's parameters (names, shapes, dtypes, arena offsets), as hex.
  std::string registry_fingerprint;
  std::vector<ManifestParam> params;
  DType arena_dtype = DType::f32;
  std::uint64_t used_count = 0;  ///< the arrays' length: the arena without its tail padding

  std::string optimizer_rule;  ///< "sgd", "adamw", or empty when none was saved
  bool optimizer_sharded = false;
  std::int64_t optimizer_steps = 0;
  float learning_rate = 0.0f;
  std::optional<ManifestLossScaler> loss_scaler;

  std::int64_t step = 0;
  std::uint64_t epoch = 0;
  std::uint64_t data_position = 0;  ///< samples consumed in `epoch`, over all ranks

  std::vector<ManifestFile> files;
  std::vector<ManifestArray> arrays;

  /// The array called `name`, or null.
  const ManifestArray* find_array(std::string_view name) const noexcept;
};

/// The manifest as JSON text.
std::string to_json(const Manifest& manifest);

/// Parses and checks a manifest: every field present with the right type, a format no newer than
/// `kCheckpointFormatVersion`, pieces that cover their arrays exactly and lie inside their files.
/// @throws CheckpointError naming the first problem.
Manifest parse_manifest(std::string_view text);

}  // namespace cohort
