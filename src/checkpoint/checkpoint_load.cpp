// Loading checkpoints: check everything, agree across ranks, then write (Note [Checkpoint load]
// in checkpoint.hpp).

#include "checkpointer_impl.hpp"
#include "file_io.hpp"

#include <cohort/checkpoint/checksum.hpp>
#include <cohort/core/logging.hpp>
#include <cohort/memory/detail/stream_copy.hpp>

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

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

/// Throws "checkpoint <where>: <what>", with the caller's file and line, as an
/// UnloadableCheckpoint: what the checkpoint holds does not fit this program, and never will.
[[noreturn]] void fail(const std::filesystem::path& where, const std::string& what,
                       const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  detail::throw_error<UnloadableCheckpoint>("checkpoint " + where.string() + ": " + what,
                                            file, line);
}

/// What to do about the checkpoint `latest` that can never load, where `fallback` is off and
/// `older` are the checkpoints before it.
std::string what_to_do(const std::filesystem::path& root, const std::string& latest,
                       const std::vector<std::string>& older) {
  std::string text = "\n  A restart cannot fix this: every start loads " + latest + " first. ";
  if (!older.empty()) {
    std::string names;
    for (const std::string& name : older) names += (names.empty() ? "" : ", ") + name;
    text +=
        "To resume from an older checkpoint, set CheckpointOptions::fallback (it loads the "
        "newest one that passes its checks; here: " +
        names + "); to";
  } else {
    text += "To";
  }
  return text + " start over, use a new checkpoint directory (or move " + root.string() +
         " away); to resume from it, run the program as it was when it saved it.";
}

/// Elements of array `array` this rank writes: [begin, end) within the used count.
detail::PieceRange target_range(const detail::CheckpointArray& array) {
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
    return text + "] " + std::string(to_string(param.dtype)) + " at " +
           std::to_string(param.offset);
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
      fail(folder,
           manifest.files[piece.file].name + ": bytes " + std::to_string(piece.byte_offset) +
               " to " + std::to_string(piece.byte_offset + size) + " (\"" + array.name +
               "\" piece " + std::to_string(index) + ") fail their checksum: the file is damaged");
    }
    if (!inside) {
      std::memcpy(target, piece_bytes.data() + (begin - piece.element_offset) * element,
                  (end - begin) * element);
    }
  }
}

}  // namespace

std::optional<TrainingState> Checkpointer::Impl::try_load(const std::filesystem::path& folder,
                                                          detail::RankReport& failure) {
  World& world = dp.world();
  Staged staged;
  detail::RankReport mine;
  try {
    const std::filesystem::path manifest_path = folder / "manifest.json";
    std::error_code exists_error;
    if (!std::filesystem::exists(manifest_path, exists_error)) {
      fail(folder,
           "manifest.json is missing: the save did not finish, or the folder is not a checkpoint");
    }
    const std::string manifest_text = detail::read_whole_file(manifest_path);  // an I/O error
    try {
      staged.manifest = parse_manifest(manifest_text);
    } catch (const CheckpointError& parse_error) {
      std::string what = parse_error.what();
      if (what.starts_with("cohort: ")) what.erase(0, 8);
      fail(folder, "manifest.json: " + what);
    }
    const Manifest& manifest = staged.manifest;
    check_layout(folder, manifest, dp);
    if (manifest.world_size != world.size() && !options.allow_resharding) {
      fail(folder, "it was saved on " + std::to_string(manifest.world_size) +
                       " ranks and this world has " + std::to_string(world.size()) +
                       "; set allow_resharding to re-split it");
    }
    if (optimizer != nullptr && manifest.optimizer_rule.empty()) {
      fail(folder, std::string("it holds no optimizer state (it was saved with "
                               "cohort::without_optimizer, or before the program had an "
                               "optimizer), and the optimizer here is ") +
                       optimizer->rule_name() +
                       ": resuming it would restart that optimizer's "
                       "state from zero");
    }
    if (optimizer != nullptr && manifest.optimizer_rule != optimizer->rule_name()) {
      fail(folder, "it holds " + manifest.optimizer_rule + " state and the optimizer here is " +
                       optimizer->rule_name());
    }
    if (scaler != nullptr && !manifest.loss_scaler) {
      fail(folder, "it holds no loss scaler state and a loss scaler was given");
    }
    for (const ManifestFile& file : manifest.files) {
      struct stat info {};
      const std::filesystem::path path = folder / file.name;
      if (::stat(path.c_str(), &info) != 0) {
        if (errno == ENOENT) fail(folder, file.name + " is missing");
        COHORT_FAIL(CheckpointError, "checkpoint " + folder.string() + ": cannot look at " +
                                         file.name + ": " + std::strerror(errno));
      }
      if (static_cast<std::uint64_t>(info.st_size) != file.bytes) {
        fail(folder,
             file.name + " has " + std::to_string(info.st_size) + " bytes, the manifest says " +
                 std::to_string(file.bytes) +
                 (static_cast<std::uint64_t>(info.st_size) < file.bytes ? " (truncated)" : ""));
      }
    }
    // A replicated array on several ranks: each rank reads all of it, or (gather_replicated) its
    // slice, as if it were sharded, and the slices are all-gathered after the agreement, so that
    // the files are read once in all (Note [Checkpoint load]).
    const int ranks = world.size();
    const bool gather = gathers_replicated();
    const std::uint64_t shard = dp.shard_count();
    std::uint64_t total = 0;
    for (const detail::CheckpointArray& array : arrays) {
      const ManifestArray* saved = manifest.find_array(array.name);
      if (saved == nullptr) fail(folder, "it has no array \"" + array.name + "\"");
      if (saved->dtype != array.dtype || saved->count != array.count) {
        fail(folder, "array \"" + array.name + "\" is " + std::string(to_string(saved->dtype)) +
                         " x " + std::to_string(saved->count) + ", expected " +
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
    host_copy->reserve(total);
    for (std::size_t index = 0; index < arrays.size(); ++index) {
      const detail::CheckpointArray& array = arrays[index];
      unsigned char* out = host_copy->bytes() + staged.offsets[index];
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
  } catch (const std::exception& error) {
    mine = detail::RankReport::failure(error);
  }

  // Agree: nothing is written unless every rank has checked its part.
  const std::string prefix = key_prefix() + "/load/" + std::to_string(loads++);
  detail::put_report(*store, prefix + "/rank/" + std::to_string(world.rank()), mine);
  for (int rank = 0; rank < world.size(); ++rank) {
    const std::string sender = "rank " + std::to_string(rank);
    detail::RankReport other = detail::get_report(*store, prefix + "/rank/" + std::to_string(rank),
                                                  world.timeout(), sender);
    if (!other.ok()) {
      if (rank != world.rank()) other.error = sender + ": " + other.error;
      failure = std::move(other);
      return std::nullopt;
    }
  }

  const Manifest& manifest = staged.manifest;
  const Stream& stream = dp.compute_stream();
  for (std::size_t index = 0; index < arrays.size(); ++index) {
    const detail::CheckpointArray& array = arrays[index];
    const detail::PieceRange range = staged.ranges[index];
    const std::size_t element = size_of(array.dtype);
    unsigned char* source = host_copy->bytes() + staged.offsets[index];
    auto* view = static_cast<unsigned char*>(array.view.data());
    if (staged.gathered[index]) {
      const std::uint64_t shard = dp.shard_count();
      const TensorView slice(view + range.begin * element, shard, array.dtype, array.view.device());
      if (array.view.device().is_host()) {
        // The staging memory is the collective's input: no copy into the arena first.
        const TensorView input(source, shard, array.dtype, Device::host());
        dp.comm().all_gather(input, array.view, stream).wait();
      } else {
        detail::write_now(slice.data(), source, shard * element, stream);
        dp.comm().all_gather(slice, array.view, stream).wait();
      }
      continue;
    }
    if (range.end == range.begin) continue;
    detail::write_now(view + (range.begin - array.view_offset) * element, source,
                      (range.end - range.begin) * element, stream);
  }
  stream.synchronize();
  if (optimizer != nullptr) {
    optimizer->restore_steps_taken(manifest.optimizer_steps);
    optimizer->set_learning_rate(manifest.learning_rate);
  }
  if (scaler != nullptr) {
    const ManifestLossScaler& saved = *manifest.loss_scaler;
    scaler->restore(
        {saved.scale, saved.growth_tracker, saved.skipped_steps, saved.last_step_skipped}, stream);
  }
  if (manifest.world_size != world.size() && world.rank() == 0) {
    // Note [Resharding exactness] in checkpoint.hpp.
    COHORT_LOG(warn) << "resumed step " << manifest.step << " from " << folder.string()
                     << ", saved on " << manifest.world_size << " ranks, on " << world.size()
                     << " ranks: the parameters and optimizer state are exact, but the steps from "
                        "here are within rounding of a "
                     << manifest.world_size << "-rank run, not bitwise equal to it";
  }
  return TrainingState{manifest.step, manifest.epoch, manifest.data_position, staged.user_blob};
}

bool Checkpointer::Impl::gathers_replicated() const noexcept {
  return options.gather_replicated.value_or(dp.comm().backend() != Backend::gloo);
}

TrainingState Checkpointer::Impl::load_folder(const std::filesystem::path& folder) {
  check_no_optimizer_left_out("loading " + folder.string());
  wait();
  detail::RankReport failure;
  if (std::optional<TrainingState> state = try_load(folder, failure)) return *state;
  detail::throw_report(failure);
}

std::optional<TrainingState> Checkpointer::Impl::load_latest() {
  check_no_optimizer_left_out("loading a checkpoint of " + options.directory.string());
  wait();
  const std::filesystem::path& root = options.directory;
  std::vector<std::string> candidates;
  std::optional<std::string> latest;
  try {
    latest = detail::read_latest(root);
  } catch (const CheckpointError& unreadable) {
    if (!options.fallback) throw;
    COHORT_LOG(warn) << unreadable.what();
  }
  if (latest) candidates.push_back(*latest);
  if (options.fallback) {
    // Older than `latest` only: a newer folder was never published (Note [Checkpoint publish]).
    const std::optional<std::int64_t> latest_step =
        latest ? detail::step_of_name(*latest) : std::nullopt;
    for (const std::string& name : detail::list_checkpoints(root)) {
      if (name != latest.value_or("") &&
          (!latest_step || *detail::step_of_name(name) < *latest_step)) {
        candidates.push_back(name);
      }
    }
  }
  if (candidates.empty()) return std::nullopt;
  std::vector<std::string> errors;
  bool unloadable = true;  // every candidate can never load: a restart cannot fix it
  for (const std::string& name : candidates) {
    detail::RankReport failure;
    if (std::optional<TrainingState> state = try_load(root / name, failure)) {
      if (!errors.empty()) {
        COHORT_LOG(warn) << "loaded the older checkpoint " << (root / name).string();
      }
      return state;
    }
    if (!options.fallback) {
      if (failure.status == detail::ReportStatus::unloadable) {
        std::vector<std::string> older;
        for (const std::string& other : detail::list_checkpoints(root)) {
          if (detail::step_of_name(other) < detail::step_of_name(name)) older.push_back(other);
        }
        failure.error += what_to_do(root, name, older);
      }
      detail::throw_report(failure);
    }
    if (dp.world().rank() == 0) {
      COHORT_LOG(warn) << failure.error << "; trying an older checkpoint";
    }
    errors.push_back(failure.error);
    unloadable = unloadable && failure.status == detail::ReportStatus::unloadable;
  }
  if (!unloadable) {
    std::string text = "no valid checkpoint under " + root.string() + ":";
    for (const std::string& error : errors) text += "\n  " + error;
    COHORT_FAIL(CheckpointError, text);
  }
  std::string text = "no checkpoint under " + root.string() +
                     " can load into this program, and a restart cannot fix this:";
  for (const std::string& error : errors) text += "\n  " + error;
  text += "\n  What to do: start with a new checkpoint directory (or move " + root.string() +
          " away), or run the program as it was when it saved them (the same model, optimizer, "
          "loss scaler and, without allow_resharding, number of ranks)";
  COHORT_FAIL(UnloadableCheckpoint, text);
}

}  // namespace cohort
