// The write and the publish of a save (Note [Checkpoint publish] in checkpoint.hpp): each rank
// writes its file durably and reports; rank 0 writes the manifest, renames the folder into place
// and moves `latest`. The ranks' reports are in rank_report.cpp.

#include "checkpointer_impl.hpp"
#include "file_io.hpp"

#include <cohort/checkpoint/checksum.hpp>
#include <cohort/core/env.hpp>
#include <cohort/core/logging.hpp>

#include <signal.h>

#include <algorithm>
#include <utility>

namespace cohort {
namespace detail {

void reach_save_point(const CheckpointOptions& options, SavePoint point, int rank) {
  static constexpr const char* kNames[] = {"shard_started", "shard_written", "before_rename",
                                           "before_latest"};
  const char* name = kNames[static_cast<int>(point)];
  // The one variable of this layer; read at each point, as tests set it per process.
  if (const auto crash = env::text(env::kCheckpointCrashAt)) {
    const std::string& value = *crash;
    const std::size_t colon = value.find(':');
    const std::string at = value.substr(0, colon);
    COHORT_EXPECTS(std::find(std::begin(kNames), std::end(kNames), at) != std::end(kNames),
                   "COHORT_CHECKPOINT_CRASH_AT=" + value +
                       ": use shard_started, shard_written, before_rename or before_latest, "
                       "optionally followed by :<rank>");
    const bool this_rank =
        colon == std::string::npos || value.substr(colon + 1) == std::to_string(rank);
    if (at == name && this_rank) {
      COHORT_LOG(warn) << "COHORT_CHECKPOINT_CRASH_AT=" << value << ": killing this process";
      ::raise(SIGKILL);
    }
  }
  if (options.test_hook) options.test_hook(point);
}

}  // namespace detail

namespace {

std::string rank_text(int rank) {
  return "rank " + std::to_string(rank);
}

/// The checksums of a file's pieces, fed chunk by chunk in file order as the chunks are written.
struct PieceChecksums {
  explicit PieceChecksums(const std::vector<std::uint64_t>& sizes)
      : piece_bytes(sizes), pieces(sizes.size()), piece_end(sizes.empty() ? 0 : sizes[0]) {}

  /// The file's bytes [offset, offset + size), at `chunk`; `offset` is where the previous call
  /// ended.
  void update(const unsigned char* chunk, std::uint64_t offset, std::uint64_t size) {
    const std::uint64_t start = offset;
    const std::uint64_t end = offset + size;
    while (offset < end) {
      while (offset >= piece_end) piece_end += piece_bytes[++piece];  // past empty pieces too
      const std::uint64_t take = std::min(end, piece_end) - offset;
      pieces[piece].update(chunk + (offset - start), take);
      offset += take;
    }
  }

  const std::vector<std::uint64_t>& piece_bytes;
  std::vector<Checksum> pieces;
  std::size_t piece = 0;
  std::uint64_t piece_end;
};

}  // namespace

void Checkpointer::Impl::write_and_publish(detail::Snapshot& snapshot) {
  snapshot.decode_counters();  // the copy has completed (Note [Checkpoint counters])
  const std::string prefix = key_prefix() + "/save/" + std::to_string(snapshot.save_index);
  const std::string name = detail::checkpoint_name(snapshot.manifest.step);
  const std::filesystem::path incomplete = options.directory / (".incomplete-" + name);
  const auto timeout = dp.world().timeout();
  auto report_key = [&](int rank) { return prefix + "/rank/" + std::to_string(rank); };
  if (snapshot.rank == 0) {
    detail::RankReport prepared;
    try {
      std::filesystem::create_directories(options.directory);
      std::filesystem::remove_all(incomplete);  // a crashed save's leftovers
      std::filesystem::create_directories(incomplete);
    } catch (const std::exception& error) {
      prepared = detail::RankReport::failure("cannot prepare " + incomplete.string() + ": " +
                                             error.what());
    }
    detail::put_report(*store, prefix + "/prepared", prepared);
  }
  detail::RankReport report;
  const detail::RankReport prepared =
      detail::get_report(*store, prefix + "/prepared", timeout, rank_text(0));
  if (!prepared.ok()) {
    report = prepared;
  } else {
    try {
      const std::filesystem::path file =
          incomplete / ("rank-" + std::to_string(snapshot.rank) + ".bin");
      detail::reach_save_point(options, SavePoint::shard_started, snapshot.rank);
      PieceChecksums checksums(snapshot.piece_bytes);
      detail::write_file_durably(
          file, snapshot.size, options.direct_io, [&](std::size_t offset, std::size_t size) {
            return snapshot.chunk(offset, size,
                                  [&](const unsigned char* bytes, std::uint64_t at,
                                      std::uint64_t count) { checksums.update(bytes, at, count); });
          });
      detail::reach_save_point(options, SavePoint::shard_written, snapshot.rank);
      report.file_bytes = snapshot.size;
      for (const Checksum& checksum : checksums.pieces)
        report.piece_checksums.push_back(checksum.digest());
    } catch (const std::exception& error) {
      report = detail::RankReport::failure(error, rank_text(snapshot.rank) + ": ");
    }
  }
  snapshot.finish_reading();  // also when the file was not written
  detail::put_report(*store, report_key(snapshot.rank), report);

  if (snapshot.rank == 0) {
    detail::RankReport outcome;
    try {
      // While the other ranks finish their files: the fsync of `latest`'s new content is then
      // not on the path from the data to the publish.
      if (prepared.ok()) detail::prepare_latest(options.directory, name);
    } catch (const std::exception& error) {
      outcome = detail::RankReport::failure(error);
    }
    // Every rank's report, also after a failed one: once all are in, no rank writes any more.
    std::vector<detail::RankReport> reports;
    for (int rank = 0; rank < snapshot.world_size; ++rank) {
      try {
        reports.push_back(detail::get_report(*store, report_key(rank), timeout, rank_text(rank)));
      } catch (const CheckpointError& malformed) {
        reports.push_back(detail::RankReport::failure(malformed));
      }
      if (outcome.ok() && !reports.back().ok()) outcome = reports.back();
    }
    try {
      if (outcome.ok()) publish(snapshot, reports);
    } catch (const std::exception& error) {
      outcome = detail::RankReport::failure(error);
    }
    if (!outcome.ok()) {
      // Every rank has reported, so none writes here any more: what the failed save wrote goes
      // now, not at the next good save (on a full disk there would be none).
      std::error_code ignored;
      std::filesystem::remove_all(incomplete, ignored);
    }
    detail::put_report(*store, prefix + "/done", outcome);
  }
  const detail::RankReport outcome =
      detail::get_report(*store, prefix + "/done", timeout, rank_text(0));
  if (!outcome.ok()) {
    COHORT_FAIL(CheckpointError, "checkpoint " + (options.directory / name).string() +
                                     " was not saved: " + outcome.error);
  }
}

void Checkpointer::Impl::publish(detail::Snapshot& snapshot,
                                 const std::vector<detail::RankReport>& reports) {
  Manifest& manifest = snapshot.manifest;
  const std::string name = detail::checkpoint_name(manifest.step);
  for (std::size_t rank = 0; rank < reports.size(); ++rank) {
    const std::vector<std::uint64_t>& checksums = reports[rank].piece_checksums;
    COHORT_CHECK(
        checksums.size() == snapshot.piece_bytes.size() - (rank == 0 ? 0 : 1), CheckpointError,
        rank_text(static_cast<int>(rank)) + " reported " + std::to_string(checksums.size()) +
            " pieces, not one per array" + (rank == 0 ? " and the user blob" : ""));
    ManifestFile file{"rank-" + std::to_string(rank) + ".bin", reports[rank].file_bytes, 0};
    // The file's checksum is the checksum of its pieces' checksums (they cover it exactly).
    file.checksum = Checksum::of(checksums.data(), checksums.size() * sizeof(std::uint64_t));
    manifest.files.push_back(std::move(file));
  }
  std::vector<std::uint64_t> file_offsets(reports.size(), 0);
  for (std::size_t index = 0; index < arrays.size(); ++index) {
    const detail::CheckpointArray& local = arrays[index];
    ManifestArray array{local.name, local.dtype, local.count, {}};
    for (std::size_t rank = 0; rank < reports.size(); ++rank) {
      const detail::PieceRange range =
          detail::piece_range(local.count, snapshot.shard_count, static_cast<int>(rank));
      array.pieces.push_back(ManifestPiece{static_cast<std::uint32_t>(rank), range.begin,
                                           range.end - range.begin, file_offsets[rank],
                                           reports[rank].piece_checksums[index]});
      file_offsets[rank] += (range.end - range.begin) * size_of(local.dtype);
    }
    manifest.arrays.push_back(std::move(array));
  }
  const std::uint64_t blob = snapshot.piece_bytes.back();
  manifest.arrays.push_back(ManifestArray{
      "user_blob",
      DType::u8,
      blob,
      {ManifestPiece{0, 0, blob, file_offsets[0], reports[0].piece_checksums.back()}}});

  const std::filesystem::path root = options.directory;
  const std::filesystem::path incomplete = root / (".incomplete-" + name);
  const std::string text = to_json(manifest);
  detail::write_file_durably(incomplete / "manifest.json", text.data(), text.size());
  detail::fsync_directory(incomplete);
  detail::reach_save_point(options, SavePoint::before_rename, 0);

  // A folder of this name exists when an earlier run saved this step but crashed before moving
  // `latest` (stale: delete it), or when this step is saved again (keep it until `latest` moves).
  const std::filesystem::path final_path = root / name;
  const std::filesystem::path replaced = root / (".replaced-" + name);
  const bool exists = std::filesystem::exists(final_path);
  const bool is_latest = exists && detail::read_latest(root) == name;
  if (exists && !is_latest) std::filesystem::remove_all(final_path);
  if (is_latest) {
    std::filesystem::remove_all(replaced);
    detail::rename_path(final_path, replaced);
  }
  detail::rename_path(incomplete, final_path);
  detail::fsync_directory(root);
  detail::reach_save_point(options, SavePoint::before_latest, 0);
  detail::move_latest(root);  // prepared by write_and_publish
  if (is_latest) std::filesystem::remove_all(replaced);

  // Keep the newest `keep_last` up to this one; delete older ones and any newer, unpublished one,
  // and what saves that crashed left (this save's own folder was renamed).
  std::vector<std::string> doomed;
  int kept = 0;
  for (const std::string& other : detail::list_checkpoints(root)) {
    const bool newer = *detail::step_of_name(other) > manifest.step;
    const bool keep = !newer && (options.keep_last == 0 || kept < options.keep_last);
    if (!newer) ++kept;
    if (!keep) doomed.push_back(other);
  }
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(root, error)) {
    const std::string other = entry.path().filename().string();
    // `latest`'s temporary files of saves that crashed before moving it (this one's has moved).
    if (other.starts_with(".incomplete-") || other.starts_with(".latest.tmp-"))
      doomed.push_back(other);
  }
  delete_in_background(root, doomed);
}

}  // namespace cohort
