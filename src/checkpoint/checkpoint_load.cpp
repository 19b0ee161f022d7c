// Loading checkpoints: check what costs no reading, agree, read and check, agree, then write or
// put back (Note [Checkpoint load] and Note [Start-up load] in checkpoint.hpp).

#include "checkpointer_impl.hpp"
#include "file_io.hpp"

#include <cohort/checkpoint/checksum.hpp>
#include <cohort/core/format.hpp>
#include <cohort/core/logging.hpp>
#include <cohort/memory/buffer.hpp>
#include <cohort/memory/detail/stream_copy.hpp>
#include <cohort/memory/device_pool.hpp>

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <utility>

namespace cohort {
namespace {

/// Throws "checkpoint <where>: <what>", with the caller's file and line, as an
/// UnloadableCheckpoint: what the checkpoint holds does not fit this program, and never will.
[[noreturn]] void fail(const std::filesystem::path& where, const std::string& what,
                       const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  detail::throw_error<UnloadableCheckpoint>("checkpoint " + where.string() + ": " + what, file,
                                            line);
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
  const std::uint64_t used = detail::checkpoint_plan(dp).used_count;
  if (manifest.arena_dtype != dp.dtype() || manifest.used_count != used) {
    fail(folder, "its arena is " + std::string(to_string(manifest.arena_dtype)) + " x " +
                     std::to_string(manifest.used_count) + ", this model's " +
                     std::string(to_string(dp.dtype())) + " x " + std::to_string(used));
  }
}

/// Reads the pieces of `array` that overlap `range` and copies the overlap into `out` (room for
/// the range), checking each piece's checksum. A piece wholly inside the range is read in place;
/// one that overhangs it goes through `scratch`, since its checksum covers all of it.
void read_array(const std::filesystem::path& folder, const Manifest& manifest,
                const ManifestArray& array, detail::PieceRange range, unsigned char* out,
                std::vector<unsigned char>& scratch) {
  const std::size_t element = size_of(array.dtype);
  for (std::size_t index = 0; index < array.pieces.size(); ++index) {
    const ManifestPiece& piece = array.pieces[index];
    const std::uint64_t begin = std::max(range.begin, piece.element_offset);
    const std::uint64_t end = std::min(range.end, piece.element_offset + piece.count);
    if (begin >= end) continue;
    const std::filesystem::path file = folder / manifest.files[piece.file].name;
    const bool inside = begin == piece.element_offset && end == piece.element_offset + piece.count;
    unsigned char* target = out + (begin - range.begin) * element;
    if (!inside) scratch.resize(piece.count * element);
    unsigned char* bytes = inside ? target : scratch.data();
    const std::size_t size = piece.count * element;
    if (detail::read_file_range(file, piece.byte_offset, bytes, size) != piece.checksum) {
      fail(folder,
           manifest.files[piece.file].name + ": bytes " + std::to_string(piece.byte_offset) +
               " to " + std::to_string(piece.byte_offset + size) + " (\"" + array.name +
               "\" piece " + std::to_string(index) + ") fail their checksum: the file is damaged");
    }
    if (!inside) {
      std::memcpy(target, scratch.data() + (begin - piece.element_offset) * element,
                  (end - begin) * element);
    }
  }
}

using Clock = std::chrono::steady_clock;

std::uint64_t nanoseconds_since(Clock::time_point start) {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count());
}

}  // namespace

namespace detail {

/// One array's part in one attempt to load a checkpoint.
struct ArrayLoad {
  const CheckpointArray* array = nullptr;
  const ManifestArray* saved = nullptr;
  std::size_t element = 0;  ///< bytes per element
  /// Needed whole on every rank (ranks > 1): this rank reads its slice first, then the rest or
  /// the ranks all-gather the slices (Note [Replicated reads]).
  bool replicated = false;
  /// What this rank reads first: its slice of a replicated array (clipped to the used count),
  /// else the range it holds.
  PieceRange first;
  std::uint64_t slice_begin = 0;  ///< a replicated array's slice: [slice_begin, + shard)
  bool direct = false;            ///< read straight into the arena (Note [Start-up load])
  /// Through staging: the element at `staging_offset` bytes, and the room after it.
  std::uint64_t staging_origin = 0;
  std::uint64_t staging_offset = 0;
};

/// One attempt: the manifest and what each array reads where.
struct Attempt {
  Manifest manifest;
  std::vector<ArrayLoad> arrays;
  std::uint64_t replicated_bytes = 0;  ///< of the replicated arrays, whole
  std::uint64_t slice_bytes = 0;       ///< this rank's slices of them (padding excluded)
  std::uint64_t direct_bytes = 0;
  std::uint64_t staged_bytes = 0;
  std::string user_blob;
};

}  // namespace detail

// Note [Replicated reads]
// Every rank needs all of a replicated array (the parameters; an unsharded optimizer's state).
// Reading all of it on every rank reads the storage N times over; a rank that reads only its
// slice reads it once in all, and then the ranks all-gather the slices (as Megatron's load does;
// PyTorch DCP reads every byte on every rank). Which is faster depends on the storage, on how
// many ranks share it, and on the communicator: an all-gather through shared memory or NCCL runs
// near memory speed, Gloo's over TCP at the network's, and a file system shared by many nodes
// gives each rank a fraction of its bandwidth. So a load measures both at once and chooses:
//   1. when the choice is open (`gather_replicated` unset, two ranks or more, something
//      replicated), every rank times two all-gathers of a probe (up to 256 KiB each) before it
//      reads anything;
//   2. every rank reads and checks its slice of every replicated array (and the ranges it alone
//      holds), timing the slices: its read speed while all the ranks read at once;
//   3. the ranks' reports carry those times, so every rank computes the same choice from the
//      same numbers (`choose_replicated_read`): the slowest rank's read speed against the
//      slowest rank's all-gather speed, for the bytes still missing;
//   4. they read the rest, or all-gather the slices.
// The slices read in step 2 are already checked, so when a rank fails to read the rest (a file
// that changed under it) the ranks all-gather the slices instead: that load still succeeds.
// On one host the rest may come from the page cache that the other ranks' reads of their slices
// just filled, which the read speed measured in step 2 does not foresee, and the probe's small
// all-gathers are dominated by their fixed cost: on 4 ranks of a 2-core machine the probe said
// 1.8 GB/s and the choice was read-all in 14 of 21 loads, 1.3x slower than the all-gather
// (checkpoint_bench, docs/performance.md). So where the communicator is one host's shared memory
// (`Backend::shm`), the all-gather is chosen without a probe: it is a copy between the ranks'
// memory, no slower than a copy out of the page cache. The probe decides elsewhere (Gloo across
// hosts, hierarchical, NCCL).

ReplicatedReadChoice choose_replicated_read(const ReplicatedReadSpeeds& speeds) {
  COHORT_EXPECTS(speeds.ranks >= 1, "choose_replicated_read needs at least one rank, not " +
                                        std::to_string(speeds.ranks));
  if (speeds.ranks == 1) return {ReplicatedRead::read_all, "one rank: nothing to gather"};
  if (speeds.replicated_bytes == 0) {
    return {ReplicatedRead::read_all, "nothing replicated: nothing to gather"};
  }
  auto valid = [](double speed) { return std::isfinite(speed) && speed > 0; };
  COHORT_EXPECTS(valid(speeds.read_bytes_per_second) && valid(speeds.gather_bytes_per_second),
                 "choose_replicated_read needs finite, positive speeds (read " +
                     std::to_string(speeds.read_bytes_per_second) + " B/s, all-gather " +
                     std::to_string(speeds.gather_bytes_per_second) + " B/s)");
  const double missing = static_cast<double>(speeds.replicated_bytes) *
                         static_cast<double>(speeds.ranks - 1) / static_cast<double>(speeds.ranks);
  const double read_seconds = missing / speeds.read_bytes_per_second;
  const double gather_seconds = missing / speeds.gather_bytes_per_second;
  auto rate = [](double bytes_per_second) {
    char text[32];
    std::snprintf(text, sizeof(text), "%.2f GB/s", bytes_per_second * 1e-9);
    return std::string(text);
  };
  auto ms = [](double seconds) {
    char text[32];
    std::snprintf(text, sizeof(text), "%.3g ms", seconds * 1e3);
    return std::string(text);
  };
  const std::string numbers = "for the other ranks' " +
                              format_bytes(static_cast<std::size_t>(missing)) + ", read at " +
                              rate(speeds.read_bytes_per_second) + " (" + ms(read_seconds) +
                              "), all-gather at " + rate(speeds.gather_bytes_per_second) + " (" +
                              ms(gather_seconds) + "), " + std::to_string(speeds.ranks) + " ranks";
  if (gather_seconds <= read_seconds) {
    return {ReplicatedRead::slice_then_gather, "measured " + numbers};
  }
  return {ReplicatedRead::read_all, "measured " + numbers};
}

std::string LoadReport::describe() const {
  std::string text = folder.filename().string() + (at_startup ? " at start-up (" : " live (") +
                     format_bytes(direct_bytes) + " straight into the arenas, " +
                     format_bytes(staged_bytes) + " through staging): ";
  text += replicated.read == ReplicatedRead::slice_then_gather
              ? "every rank read its slice of the replicated arrays, then the ranks all-gathered "
                "them"
              : "every rank read all of the replicated arrays";
  text += " (" + replicated.why + ")";
  if (candidates_failed > 0) {
    text += "; after " + std::to_string(candidates_failed) + " newer checkpoint" +
            (candidates_failed > 1 ? "s" : "") + " failed";
  }
  return text;
}

namespace detail {

void reach_load_point(std::string_view point, int rank) {
  reach_crash_point(point, rank);
}

}  // namespace detail

detail::PutBack Checkpointer::Impl::put_back_of(const detail::CheckpointArray& array) const {
  using detail::PutBack;
  if (array.name == "params") {
    const bool replicated = dp.world().size() > 1 && array.view_offset == 0 &&
                            array.view.count() == dp.plan().arena_count;
    return replicated && dp.options().broadcast_parameters ? PutBack::from_peers : PutBack::none;
  }
  if (array.name == "optimizer/master") return PutBack::from_params;
  if (array.name == "optimizer/momentum_buffer" || array.name == "optimizer/exp_avg" ||
      array.name == "optimizer/exp_avg_sq") {
    return PutBack::zeros;
  }
  return PutBack::none;
}

/// The cheap checks of Note [Checkpoint load]: manifest, layout, optimizer, files and sizes.
Manifest Checkpointer::Impl::check_candidate(const std::filesystem::path& folder) const {
  const std::filesystem::path manifest_path = folder / "manifest.json";
  std::error_code exists_error;
  if (!std::filesystem::exists(manifest_path, exists_error)) {
    fail(folder,
         "manifest.json is missing: the save did not finish, or the folder is not a checkpoint");
  }
  const std::string manifest_text = detail::read_whole_file(manifest_path);  // an I/O error
  Manifest manifest;
  try {
    manifest = parse_manifest(manifest_text);
  } catch (const CheckpointError& parse_error) {
    std::string what = parse_error.what();
    if (what.starts_with("cohort: ")) what.erase(0, 8);
    fail(folder, "manifest.json: " + what);
  }
  check_layout(folder, manifest, dp);
  const int ranks = dp.world().size();
  if (manifest.world_size != ranks && !options.allow_resharding) {
    fail(folder, "it was saved on " + std::to_string(manifest.world_size) +
                     " ranks and this world has " + std::to_string(ranks) +
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
  for (const detail::CheckpointArray& array : arrays) {
    const ManifestArray* saved = manifest.find_array(array.name);
    if (saved == nullptr) fail(folder, "it has no array \"" + array.name + "\"");
    if (saved->dtype != array.dtype || saved->count != array.count) {
      fail(folder, "array \"" + array.name + "\" is " + std::string(to_string(saved->dtype)) +
                       " x " + std::to_string(saved->count) + ", expected " +
                       std::string(to_string(array.dtype)) + " x " + std::to_string(array.count));
    }
  }
  return manifest;
}

/// What each array reads where, and the staging memory for what does not go straight into the
/// arenas. `whole_in_staging`: a replicated array read through staging gets room for all of it
/// (the rest may be read), else for its slice (the slices are all-gathered).
void Checkpointer::Impl::plan_attempt(detail::Attempt& attempt, bool startup,
                                      bool whole_in_staging) {
  const int ranks = dp.world().size();
  const int rank = dp.world().rank();
  const std::uint64_t shard = dp.shard_count();
  std::uint64_t staging = 0;
  for (const detail::CheckpointArray& array : arrays) {
    detail::ArrayLoad load;
    load.array = &array;
    load.saved = attempt.manifest.find_array(array.name);
    load.element = size_of(array.dtype);
    load.replicated = !sharded && ranks > 1 && array.view_offset == 0 &&
                      array.view.count() == shard * static_cast<std::uint64_t>(ranks);
    load.first =
        load.replicated ? detail::piece_range(array.count, shard, rank) : target_range(array);
    load.slice_begin = shard * static_cast<std::uint64_t>(rank);
    // The sharded modes read into their slices, never the state itself (Note [Sharded
    // checkpoints]): straight in, at any load.
    load.direct = array.view.device().is_host() &&
                  (sharded || (startup && put_back_of(array) != detail::PutBack::none));
    std::uint64_t room = 0;
    if (!load.direct) {
      if (load.replicated && whole_in_staging) {
        load.staging_origin = 0;
        room = array.view.count();
      } else if (load.replicated) {
        load.staging_origin = load.slice_begin;
        room = shard;
      } else {
        load.staging_origin = load.first.begin;
        room = load.first.end - load.first.begin;
      }
      load.staging_offset = staging;
      staging += (room * load.element + 63) / 64 * 64;
    }
    if (load.replicated) {
      attempt.replicated_bytes += array.count * load.element;
      attempt.slice_bytes += (load.first.end - load.first.begin) * load.element;
    }
    attempt.arrays.push_back(load);
  }
  host_copy->reserve(staging);
}

/// Where element `element` of `load`'s array goes: its place in the arena, or in staging.
unsigned char* Checkpointer::Impl::target_of(const detail::ArrayLoad& load, std::uint64_t element) {
  if (load.direct) {
    return static_cast<unsigned char*>(load.array->view.data()) +
           (element - load.array->view_offset) * load.element;
  }
  return host_copy->bytes() + load.staging_offset + (element - load.staging_origin) * load.element;
}

/// Reads elements [range) of `load`'s array into its target, checking every piece.
void Checkpointer::Impl::read_range(const std::filesystem::path& folder,
                                    const detail::Attempt& attempt, const detail::ArrayLoad& load,
                                    detail::PieceRange range, std::vector<unsigned char>& scratch) {
  if (range.begin >= range.end) return;
  read_array(folder, attempt.manifest, *load.saved, range, target_of(load, range.begin), scratch);
}

namespace {

/// Seconds of the faster of two all-gathers of `bytes` per rank on `dp`'s communicator, in
/// memory on its device (Note [Replicated reads], step 1).
double probe_all_gather(DataParallel& dp, std::uint64_t bytes) {
  const int ranks = dp.world().size();
  const std::uint64_t count = std::max<std::uint64_t>(1, bytes / sizeof(float));
  const Device device = dp.compute_stream().device();
  const Stream& stream = dp.compute_stream();
  std::vector<float> host;
  Buffer on_device;
  float* input = nullptr;
  if (device.is_host()) {
    host.assign(count * static_cast<std::uint64_t>(ranks + 1), 1.0f);  // touched: no page faults
    input = host.data();
  } else {
    on_device = Buffer(make_device_pool_resource({.device = device.index()}),
                       count * static_cast<std::uint64_t>(ranks + 1) * sizeof(float));
    input = static_cast<float*>(on_device.data());
    detail::zero_async(input, count * static_cast<std::uint64_t>(ranks + 1) * sizeof(float),
                       stream);
    stream.synchronize();
  }
  const TensorView in(input, count, DType::f32, device);
  const TensorView out(input + count, count * static_cast<std::uint64_t>(ranks), DType::f32,
                       device);
  double best = 0;
  for (int attempt = 0; attempt < 2; ++attempt) {
    const auto start = Clock::now();
    dp.comm().all_gather(in, out, stream).wait();
    stream.synchronize();
    const double seconds = static_cast<double>(nanoseconds_since(start)) * 1e-9;
    best = attempt == 0 ? seconds : std::min(best, seconds);
  }
  return best;
}

constexpr std::uint64_t kProbeBytes = std::uint64_t{256} << 10;

}  // namespace

bool Checkpointer::Impl::at_startup() const {
  return !saved_or_loaded && (optimizer == nullptr || optimizer->steps_taken() == 0);
}

bool Checkpointer::Impl::agree(const std::string& key, const detail::RankReport& mine,
                               detail::RankReport& failure,
                               std::vector<detail::RankReport>* reports) {
  World& world = dp.world();
  detail::put_report(*store, key + "/rank/" + std::to_string(world.rank()), mine);
  std::optional<detail::RankReport> first_failure;
  for (int rank = 0; rank < world.size(); ++rank) {
    const std::string sender = "rank " + std::to_string(rank);
    detail::RankReport other =
        detail::get_report(*store, key + "/rank/" + std::to_string(rank), world.timeout(), sender);
    if (!other.ok() && !first_failure) {
      if (rank != world.rank()) other.error = sender + ": " + other.error;
      first_failure = other;
    }
    if (reports != nullptr) reports->push_back(std::move(other));
  }
  if (first_failure) {
    failure = std::move(*first_failure);
    return false;
  }
  return true;
}

std::optional<TrainingState> Checkpointer::Impl::try_load(const std::filesystem::path& folder,
                                                          bool startup, LoadReport& report,
                                                          detail::RankReport& failure,
                                                          bool& wrote_arenas) {
  World& world = dp.world();
  const int ranks = world.size();
  const int rank = world.rank();
  const Stream& stream = dp.compute_stream();
  const std::string prefix = key_prefix() + "/load/" + std::to_string(loads++);
  const std::optional<bool> forced = options.gather_replicated;

  // 1. What costs no reading; nothing is read or written unless every rank passed.
  detail::Attempt attempt;
  detail::RankReport mine;
  try {
    attempt.manifest = check_candidate(folder);
    plan_attempt(attempt, startup, forced != std::optional<bool>(true));
  } catch (const std::exception& error) {
    mine = detail::RankReport::failure(error);
  }
  if (!agree(prefix + "/checked", mine, failure)) return std::nullopt;

  // 2. The probe, then this rank's slices and ranges (Note [Replicated reads]). On one host's
  // shared memory the all-gather is chosen without one.
  const bool shared_memory = dp.comm().backend() == Backend::shm;
  const bool measure = !forced && !shared_memory && ranks > 1 && attempt.replicated_bytes > 0;
  mine = {};
  try {
    if (measure) {
      // The same size on every rank (an all-gather's counts must match): a rank's own slices
      // differ where the arrays do not divide evenly (the last rank's is clipped).
      const std::uint64_t per_rank = std::clamp<std::uint64_t>(
          attempt.replicated_bytes / static_cast<std::uint64_t>(ranks), 4096, kProbeBytes);
      mine.probe_nanoseconds = static_cast<std::uint64_t>(probe_all_gather(dp, per_rank) * 1e9) + 1;
      mine.probe_bytes = per_rank / sizeof(float) * sizeof(float);
    }
    std::vector<unsigned char> scratch;
    for (const detail::ArrayLoad& load : attempt.arrays) {
      if (load.direct && !sharded) wrote_arenas = true;
      const auto start = Clock::now();
      read_range(folder, attempt, load, load.first, scratch);
      if (load.replicated) {
        mine.read_nanoseconds += nanoseconds_since(start);
        mine.read_bytes += (load.first.end - load.first.begin) * load.element;
        // A slice past the used count is the arena's padding: zero.
        const std::uint64_t slice_end = load.slice_begin + dp.shard_count();
        const std::uint64_t padding_from = std::max(load.first.end, load.slice_begin);
        if (padding_from < slice_end) {
          std::memset(target_of(load, padding_from), 0, (slice_end - padding_from) * load.element);
        }
      }
      const std::uint64_t bytes = (load.first.end - load.first.begin) * load.element;
      (load.direct ? attempt.direct_bytes : attempt.staged_bytes) += bytes;
    }
    if (const ManifestArray* blob = attempt.manifest.find_array("user_blob"); blob != nullptr) {
      std::vector<unsigned char> bytes(blob->count);
      read_array(folder, attempt.manifest, *blob, {0, blob->count}, bytes.data(), scratch);
      attempt.user_blob.assign(bytes.begin(), bytes.end());
    }
    detail::reach_load_point("load_read", rank);
  } catch (const std::exception& error) {
    mine = detail::RankReport::failure(error);
  }
  std::vector<detail::RankReport> reports;
  if (!agree(prefix + "/read", mine, failure, &reports)) return std::nullopt;

  // 3. The same choice on every rank, from the same reports.
  const bool any_replicated = attempt.replicated_bytes > 0;
  ReplicatedReadChoice choice;
  ReplicatedReadSpeeds speeds{.ranks = ranks, .replicated_bytes = attempt.replicated_bytes};
  if (forced) {
    choice = {*forced && ranks > 1 ? ReplicatedRead::slice_then_gather : ReplicatedRead::read_all,
              *forced ? "gather_replicated is set" : "gather_replicated is false"};
    if (ranks == 1) choice.why = "one rank: nothing to gather";
  } else if (shared_memory && ranks > 1 && any_replicated) {
    choice = {ReplicatedRead::slice_then_gather,
              "one host's shared memory: the all-gather copies between the ranks' memory, no "
              "slower than reading the page cache again"};
  } else if (!measure) {
    choice = choose_replicated_read(speeds);
  } else {
    double read = 0, gather = 0;
    for (const detail::RankReport& other : reports) {
      if (other.read_bytes > 0 && other.read_nanoseconds > 0) {
        const double speed = static_cast<double>(other.read_bytes) * 1e9 /
                             static_cast<double>(other.read_nanoseconds);
        read = read == 0 ? speed : std::min(read, speed);
      }
      const std::uint64_t probe_nanoseconds = std::max<std::uint64_t>(1, other.probe_nanoseconds);
      const double delivered = static_cast<double>(other.probe_bytes) * (ranks - 1) * 1e9 /
                               static_cast<double>(probe_nanoseconds);
      gather = gather == 0 ? delivered : std::min(gather, delivered);
    }
    // A rank with no slice of its own (more ranks than elements) measured no read: the others'
    // speed stands for it.
    speeds.read_bytes_per_second = read > 0 ? read : gather;
    speeds.gather_bytes_per_second = gather;
    choice = choose_replicated_read(speeds);
  }

  // 4. The rest: read it, or all-gather the checked slices.
  if (any_replicated && choice.read == ReplicatedRead::read_all && ranks > 1) {
    mine = {};
    try {
      std::vector<unsigned char> scratch;
      for (const detail::ArrayLoad& load : attempt.arrays) {
        if (!load.replicated) continue;
        read_range(folder, attempt, load, {0, load.first.begin}, scratch);
        read_range(folder, attempt, load, {load.first.end, load.array->count}, scratch);
        const std::uint64_t bytes =
            (load.array->count - (load.first.end - load.first.begin)) * load.element;
        (load.direct ? attempt.direct_bytes : attempt.staged_bytes) += bytes;
      }
    } catch (const std::exception& error) {
      mine = detail::RankReport::failure(error);
    }
    detail::RankReport rest_failure;
    if (!agree(prefix + "/rest", mine, rest_failure)) {
      // Every slice was checked by its reader in step 2: gather them instead.
      if (rank == 0) {
        COHORT_LOG(warn) << rest_failure.error
                         << "; the ranks all-gather the slices each checked instead";
      }
      choice.read = ReplicatedRead::slice_then_gather;
      choice.why += "; reading the rest failed, so the checked slices were all-gathered";
    }
  }

  // 5. Write what is not in the arenas yet, and gather.
  const Manifest& manifest = attempt.manifest;
  const std::uint64_t shard = dp.shard_count();
  for (const detail::ArrayLoad& load : attempt.arrays) {
    const detail::CheckpointArray& array = *load.array;
    auto* view = static_cast<unsigned char*>(array.view.data());
    if (load.replicated && choice.read == ReplicatedRead::slice_then_gather) {
      const TensorView slice(view + load.slice_begin * load.element, shard, array.dtype,
                             array.view.device());
      if (load.direct) {
        dp.comm().all_gather(slice, array.view, stream).wait();
      } else if (array.view.device().is_host()) {
        // The staging memory is the collective's input: no copy into the arena first.
        const TensorView input(target_of(load, load.slice_begin), shard, array.dtype,
                               Device::host());
        dp.comm().all_gather(input, array.view, stream).wait();
      } else {
        detail::write_now(slice.data(), target_of(load, load.slice_begin), shard * load.element,
                          stream);
        dp.comm().all_gather(slice, array.view, stream).wait();
      }
      continue;
    }
    if (load.direct) continue;
    const detail::PieceRange range =
        load.replicated ? detail::PieceRange{0, array.count} : load.first;
    if (range.end == range.begin) continue;
    detail::write_now(view + (range.begin - array.view_offset) * load.element,
                      target_of(load, range.begin), (range.end - range.begin) * load.element,
                      stream);
  }
  stream.synchronize();
  if (sharded) from_checkpoint_order();
  if (optimizer != nullptr) {
    optimizer->restore_steps_taken(manifest.optimizer_steps);
    optimizer->set_learning_rate(manifest.learning_rate);
  }
  if (scaler != nullptr) {
    const ManifestLossScaler& saved = *manifest.loss_scaler;
    scaler->restore(
        {saved.scale, saved.growth_tracker, saved.skipped_steps, saved.last_step_skipped}, stream);
  }
  if (manifest.world_size != ranks && rank == 0) {
    // Note [Resharding exactness] in checkpoint.hpp.
    COHORT_LOG(warn) << "resumed step " << manifest.step << " from " << folder.string()
                     << ", saved on " << manifest.world_size << " ranks, on " << ranks
                     << " ranks: the parameters and optimizer state are exact, but the steps from "
                        "here are within rounding of a "
                     << manifest.world_size << "-rank run, not bitwise equal to it";
  }
  report.folder = folder;
  report.step = manifest.step;
  report.at_startup = startup;
  report.direct_bytes = attempt.direct_bytes;
  report.staged_bytes = attempt.staged_bytes;
  report.replicated = choice;
  report.speeds = measure ? speeds : ReplicatedReadSpeeds{};
  return TrainingState{manifest.step, manifest.epoch, manifest.data_position, attempt.user_blob};
}

// Note [Putting back]
// A start-up load that found no checkpoint to load has written only arrays it can put back
// (Note [Start-up load]), and of those only its own slice of a replicated array, or the range it
// alone holds: the second reads of a replicated array, into the other slices, come after every
// slice has been checked, and succeed or fall back to the all-gather. So:
//   - the parameters' slice r of rank r is intact on every other rank: rank 0 broadcasts slices
//     1 to N-1 and rank 1 slice 0, whole (padding included);
//   - moments are zero in a new optimizer, and master weights the parameters in f32 (widening
//     is exact), which are back by then.
void Checkpointer::Impl::put_back() {
  const Stream& stream = dp.compute_stream();
  const std::uint64_t shard = dp.shard_count();
  const int ranks = dp.world().size();
  for (const detail::CheckpointArray& array : arrays) {
    if (put_back_of(array) != detail::PutBack::from_peers) continue;
    dp.comm()
        .broadcast(array.view.slice(shard, shard * static_cast<std::uint64_t>(ranks - 1)), 0,
                   stream)
        .wait();
    dp.comm().broadcast(array.view.slice(0, shard), 1, stream).wait();
  }
  stream.synchronize();
  const TensorView params = dp.param_arena();
  for (const detail::CheckpointArray& array : arrays) {
    if (!array.view.device().is_host()) continue;
    const detail::PutBack how = put_back_of(array);
    if (how == detail::PutBack::zeros) {
      std::memset(array.view.data(), 0, array.view.count() * size_of(array.view.dtype()));
    } else if (how == detail::PutBack::from_params) {
      auto* master = static_cast<float*>(array.view.data());
      visit_dtype(params.dtype(), [&]<typename T>(T) {
        const T* from = static_cast<const T*>(params.data()) + array.view_offset;
        for (std::size_t i = 0; i < array.view.count(); ++i) {
          master[i] = static_cast<float>(to_double(from[i]));
        }
      });
    }
  }
}

TrainingState Checkpointer::Impl::load_folder(const std::filesystem::path& folder) {
  check_no_optimizer_left_out("loading " + folder.string());
  wait();
  const auto start = Clock::now();
  dp.compute_stream().synchronize();  // nothing enqueued may write the arenas after the reads
  const bool startup = at_startup();
  LoadReport report;
  detail::RankReport failure;
  bool wrote = false;
  if (std::optional<TrainingState> state = try_load(folder, startup, report, failure, wrote)) {
    finish_load(report, start);
    return *state;
  }
  if (wrote) put_back();
  detail::throw_report(failure);
}

void Checkpointer::Impl::finish_load(LoadReport& report,
                                     std::chrono::steady_clock::time_point start) {
  report.seconds = static_cast<double>(nanoseconds_since(start)) * 1e-9;
  saved_or_loaded = true;
  if (dp.world().rank() == 0) {
    COHORT_LOG(info) << "loaded " << report.describe();
  }
  last_load = std::move(report);
}

std::optional<TrainingState> Checkpointer::Impl::load_latest() {
  check_no_optimizer_left_out("loading a checkpoint of " + options.directory.string());
  wait();
  const auto start = Clock::now();
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
  dp.compute_stream().synchronize();  // nothing enqueued may write the arenas after the reads
  const bool startup = at_startup();
  std::vector<std::string> errors;
  bool unloadable = true;  // every candidate can never load: a restart cannot fix it
  bool wrote = false;      // a start-up attempt wrote into the arenas (Note [Putting back])
  for (const std::string& name : candidates) {
    detail::RankReport failure;
    LoadReport report;
    if (std::optional<TrainingState> state =
            try_load(root / name, startup, report, failure, wrote)) {
      if (!errors.empty()) {
        COHORT_LOG(warn) << "loaded the older checkpoint " << (root / name).string();
      }
      report.candidates_failed = static_cast<int>(errors.size());
      finish_load(report, start);
      return state;
    }
    if (!options.fallback) {
      if (wrote) put_back();
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
  if (wrote) put_back();
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
