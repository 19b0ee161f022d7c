// Loading checkpoints: check everything, agree across ranks, then write (Note [Checkpoint load]
// in checkpoint.hpp).

#include "checkpoint_parts.hpp"
#include "file_io.hpp"

#include <cohort/memory/detail/stream_copy.hpp>

#include <cohort/checkpoint/checksum.hpp>
#include <cohort/core/logging.hpp>

#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <sstream>

namespace cohort {
namespace {

/// What a rank has read and checked, ready to be written: per Checkpointer array, the elements
/// it reads (`ranges`) at `offsets` of the staging memory.
struct Staged {
  Manifest manifest;
  std::vector<detail::PieceRange> ranges;
  std::vector<std::uint64_t> offsets;
  std::vector<bool> gathered;  ///< read in slices and all-gathered (Note [Checkpoint load])
  std::string user_blob;
};

[[noreturn]] void fail(const std::filesystem::path& where, const std::string& what) {
  throw CheckpointError("cohort: checkpoint " + where.string() + ": " + what);
}

/// Elements of array `array` this rank writes: [begin, end) within the used count.
detail::PieceRange target_range(const Checkpointer::Array& array) {
  const std::uint64_t begin = std::min(array.count, array.view_offset);
  const std::uint64_t end = std::min(array.count, array.view_offset + array.view.count());
  return {begin, end};
}

void check_layout(const std::filesystem::path& folder, const Manifest& manifest,
                  const DataParallel& dp) {
  const std::vector<ManifestParam> mine = detail::manifest_params(dp);
  const std::size_t common = std::min(mine.size(), manifest.params.size());
  auto describe = [](const ManifestParam& param) {
    std::string text = param.name + " [";
    for (std::size_t i = 0; i < param.shape.size(); ++i) {
      text += (i ? ", " : "") + std::to_string(param.shape[i]);
    }
    return text + "] " + std::string(to_string(param.dtype)) + " at " + std::to_string(param.offset);
  };
  for (std::size_t i = 0; i < common; ++i) {
    const ManifestParam& a = manifest.params[i];
    const ManifestParam& b = mine[i];
    if (a.name != b.name || a.shape != b.shape || a.dtype != b.dtype || a.offset != b.offset) {
      fail(folder, "it was saved from another model: parameter " + std::to_string(i) + " is " +
                       describe(a) + " there and " + describe(b) + " here");
    }
  }
  if (mine.size() != manifest.params.size()) {
    fail(folder, "it was saved from another model: " + std::to_string(manifest.params.size()) +
                     " parameters there, " + std::to_string(mine.size()) + " here");
  }
  if (manifest.registry_fingerprint != detail::registry_fingerprint(mine)) {
    fail(folder, "its registry fingerprint " + manifest.registry_fingerprint +
                     " differs from this model's " + detail::registry_fingerprint(mine));
  }
  if (manifest.arena_dtype != dp.dtype() || manifest.used_count != dp.plan().used_count) {
    fail(folder, "its arena is " + std::string(to_string(manifest.arena_dtype)) + " x " +
                     std::to_string(manifest.used_count) + ", this model's " +
                     std::string(to_string(dp.dtype())) + " x " +
                     std::to_string(dp.plan().used_count));
  }
}

/// Reads the pieces of `array` that overlap `range` and copies the overlap into `out` (room for
/// the range), checking each piece's checksum.
void read_array(const std::filesystem::path& folder, const Manifest& manifest,
                const ManifestArray& array, detail::PieceRange range, unsigned char* out) {
  const std::size_t element = size_of(array.dtype);
  std::vector<unsigned char> piece_bytes;
  for (std::size_t index = 0; index < array.pieces.size(); ++index) {
    const ManifestPiece& piece = array.pieces[index];
    const std::uint64_t begin = std::max(range.begin, piece.element_offset);
    const std::uint64_t end = std::min(range.end, piece.element_offset + piece.count);
    if (begin >= end) continue;
    const std::filesystem::path file = folder / manifest.files[piece.file].name;
    // A piece wholly inside the range is read in place; one that overhangs it goes through a
    // scratch buffer, since its checksum covers all of it.
    const bool inside = begin == piece.element_offset && end == piece.element_offset + piece.count;
    unsigned char* target = out + (begin - range.begin) * element;
    if (!inside) piece_bytes.resize(piece.count * element);
    unsigned char* bytes = inside ? target : piece_bytes.data();
    const std::size_t size = piece.count * element;
    if (detail::read_file_range(file, piece.byte_offset, bytes, size) != piece.checksum) {
      fail(folder, manifest.files[piece.file].name + ": bytes " + std::to_string(piece.byte_offset) +
                       " to " + std::to_string(piece.byte_offset + size) + " (\"" +
                       array.name + "\" piece " + std::to_string(index) +
                       ") fail their checksum: the file is damaged");
    }
    if (!inside) {
      std::memcpy(target, piece_bytes.data() + (begin - piece.element_offset) * element,
                  (end - begin) * element);
    }
  }
}

}  // namespace

std::optional<TrainingState> Checkpointer::try_load(const std::filesystem::path& folder,
                                                    std::string& error) {
  World& world = dp_.world();
  Staged staged;
  std::string status = "ok";
  try {
    const std::filesystem::path manifest_path = folder / "manifest.json";
    std::error_code exists_error;
    if (!std::filesystem::exists(manifest_path, exists_error)) {
      fail(folder, "manifest.json is missing: the save did not finish, or the folder is not a checkpoint");
    }
    try {
      staged.manifest = parse_manifest(detail::read_whole_file(manifest_path));
    } catch (const CheckpointError& parse_error) {
      std::string what = parse_error.what();
      if (what.starts_with("cohort: ")) what.erase(0, 8);
      fail(folder, "manifest.json: " + what);
    }
    const Manifest& manifest = staged.manifest;
    check_layout(folder, manifest, dp_);
    if (manifest.world_size != world.size() && !options_.allow_resharding) {
      fail(folder, "it was saved on " + std::to_string(manifest.world_size) + " ranks and this world has " +
                       std::to_string(world.size()) + "; set allow_resharding to re-split it");
    }
    if (optimizer_ != nullptr && manifest.optimizer_rule != optimizer_->rule_name()) {
      fail(folder, "it holds " + (manifest.optimizer_rule.empty() ? std::string("no optimizer")
                                                                  : manifest.optimizer_rule) +
                       " state and the optimizer here is " + optimizer_->rule_name());
    }
    if (scaler_ != nullptr && !manifest.loss_scaler) {
      fail(folder, "it holds no loss scaler state and a loss scaler was given");
    }
    for (const ManifestFile& file : manifest.files) {
      struct stat info {};
      const std::filesystem::path path = folder / file.name;
      if (::stat(path.c_str(), &info) != 0) fail(folder, file.name + " is missing");
      if (static_cast<std::uint64_t>(info.st_size) != file.bytes) {
        fail(folder, file.name + " has " + std::to_string(info.st_size) + " bytes, the manifest says " +
                         std::to_string(file.bytes) + (static_cast<std::uint64_t>(info.st_size) < file.bytes
                                                           ? " (truncated)" : ""));
      }
    }
    // A replicated array on several ranks: each rank reads all of it, or (gather_replicated) its
    // slice, as if it were sharded, and the slices are all-gathered after the agreement, so that
    // the files are read once in all (Note [Checkpoint load]).
    const int ranks = world.size();
    const bool gather = gathers_replicated();
    const std::uint64_t shard = dp_.shard_count();
    std::uint64_t total = 0;
    for (const Array& array : arrays_) {
      const ManifestArray* saved = manifest.find_array(array.name);
      if (saved == nullptr) fail(folder, "it has no array \"" + array.name + "\"");
      if (saved->dtype != array.dtype || saved->count != array.count) {
        fail(folder, "array \"" + array.name + "\" is " + std::string(to_string(saved->dtype)) + " x " +
                         std::to_string(saved->count) + ", expected " +
                         std::string(to_string(array.dtype)) + " x " + std::to_string(array.count));
      }
      const bool gathered = ranks > 1 && gather && array.view_offset == 0 &&
                            array.view.count() == shard * static_cast<std::uint64_t>(ranks);
      staged.gathered.push_back(gathered);
      staged.ranges.push_back(gathered ? detail::piece_range(array.count, shard, world.rank())
                                       : target_range(array));
      staged.offsets.push_back(total);
      // A gathered slice is always `shard` elements: past the used count it is padding (zero).
      const std::uint64_t elements =
          gathered ? shard : staged.ranges.back().end - staged.ranges.back().begin;
      total += elements * size_of(array.dtype);
    }
    snapshot_->reserve(total);
    for (std::size_t index = 0; index < arrays_.size(); ++index) {
      const Array& array = arrays_[index];
      unsigned char* out = snapshot_->bytes() + staged.offsets[index];
      const detail::PieceRange range = staged.ranges[index];
      if (staged.gathered[index]) {
        const std::size_t element = size_of(array.dtype);
        std::memset(out + (range.end - range.begin) * element, 0,
                    (shard - (range.end - range.begin)) * element);
      }
      read_array(folder, manifest, *manifest.find_array(array.name), range, out);
    }
    if (const ManifestArray* blob = manifest.find_array("user_blob"); blob != nullptr) {
      std::vector<unsigned char> bytes(blob->count);
      read_array(folder, manifest, *blob, {0, blob->count}, bytes.data());
      staged.user_blob.assign(bytes.begin(), bytes.end());
    }
  } catch (const std::exception& failure) {
    status = std::string("error ") + failure.what();
  }

  // Agree: nothing is written unless every rank has checked its part.
  const std::string prefix = key_prefix() + "/load/" + std::to_string(loads_++);
  store_->set(prefix + "/rank/" + std::to_string(world.rank()), status);
  for (int rank = 0; rank < world.size(); ++rank) {
    const std::string other = store_->get(prefix + "/rank/" + std::to_string(rank), world.timeout());
    if (other != "ok") {
      error = other.substr(other.find(' ') + 1);
      if (rank != world.rank()) error = "rank " + std::to_string(rank) + ": " + error;
      return std::nullopt;
    }
  }

  const Manifest& manifest = staged.manifest;
  const Stream& stream = dp_.compute_stream();
  for (std::size_t index = 0; index < arrays_.size(); ++index) {
    const Array& array = arrays_[index];
    const detail::PieceRange range = staged.ranges[index];
    const std::size_t element = size_of(array.dtype);
    unsigned char* source = snapshot_->bytes() + staged.offsets[index];
    auto* view = static_cast<unsigned char*>(array.view.data());
    if (staged.gathered[index]) {
      const std::uint64_t shard = dp_.shard_count();
      const TensorView slice(view + range.begin * element, shard, array.dtype, array.view.device());
      if (array.view.device().is_host()) {
        // The staging memory is the collective's input: no copy into the arena first.
        const TensorView input(source, shard, array.dtype, Device::host());
        dp_.comm().all_gather(input, array.view, stream).wait();
      } else {
        detail::write_now(slice.data(), source, shard * element, stream);
        dp_.comm().all_gather(slice, array.view, stream).wait();
      }
      continue;
    }
    if (range.end == range.begin) continue;
    detail::write_now(view + (range.begin - array.view_offset) * element, source,
                      (range.end - range.begin) * element, stream);
  }
  stream.synchronize();
  if (optimizer_ != nullptr) {
    optimizer_->restore_steps_taken(manifest.optimizer_steps);
    optimizer_->set_learning_rate(manifest.learning_rate);
  }
  if (scaler_ != nullptr) {
    const ManifestLossScaler& saved = *manifest.loss_scaler;
    scaler_->restore({saved.scale, saved.growth_tracker, saved.skipped_steps, saved.last_step_skipped},
                     stream);
  }
  return TrainingState{manifest.step, manifest.epoch, manifest.data_position, staged.user_blob};
}

bool Checkpointer::gathers_replicated() const noexcept {
  return options_.gather_replicated.value_or(dp_.comm().backend() != Backend::gloo);
}

TrainingState Checkpointer::load(const std::filesystem::path& folder) {
  wait();
  std::string error;
  if (std::optional<TrainingState> state = try_load(folder, error)) return *state;
  throw CheckpointError(error);
}

std::optional<TrainingState> Checkpointer::load() {
  wait();
  const std::filesystem::path& root = options_.directory;
  std::vector<std::string> candidates;
  std::optional<std::string> latest;
  try {
    latest = detail::read_latest(root);
  } catch (const CheckpointError& unreadable) {
    if (!options_.fallback) throw;
    COHORT_LOG(warn) << unreadable.what();
  }
  if (latest) candidates.push_back(*latest);
  if (options_.fallback) {
    // Older than `latest` only: a newer folder was never published (Note [Checkpoint publish]).
    const std::optional<std::int64_t> latest_step = latest ? detail::step_of_name(*latest) : std::nullopt;
    for (const std::string& name : detail::list_checkpoints(root)) {
      if (name != latest.value_or("") && (!latest_step || *detail::step_of_name(name) < *latest_step)) {
        candidates.push_back(name);
      }
    }
  }
  if (candidates.empty()) return std::nullopt;
  std::vector<std::string> errors;
  for (const std::string& name : candidates) {
    std::string error;
    if (std::optional<TrainingState> state = try_load(root / name, error)) {
      if (!errors.empty()) {
        COHORT_LOG(warn) << "loaded the older checkpoint " << (root / name).string();
      }
      return state;
    }
    if (!options_.fallback) throw CheckpointError(error);
    if (dp_.world().rank() == 0) {
      COHORT_LOG(warn) << error << "; trying an older checkpoint";
    }
    errors.push_back(error);
  }
  std::string text = "cohort: no valid checkpoint under " + root.string() + ":";
  for (const std::string& error : errors) text += "\n  " + error;
  throw CheckpointError(text);
}

}  // namespace cohort
