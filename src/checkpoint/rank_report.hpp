#pragma once

// Private to the checkpoint layer: what the ranks of a save or a load tell one another through
// the store (Note [Checkpoint reports] in rank_report.cpp), encoded and decoded in one place.

#include <cohort/launch/store.hpp>

#include <cstdint>
#include <exception>
#include <string>
#include <string_view>
#include <vector>

namespace cohort::detail {

enum class ReportStatus : std::uint8_t {
  ok = 0,
  failed = 1,      ///< `error` says what; a restart may get past it (CheckpointError)
  unloadable = 2,  ///< `error` says what; the checkpoint can never load (UnloadableCheckpoint)
};

/// One rank's (or rank 0's, for the whole save) outcome of a step of a save or a load.
struct RankReport {
  ReportStatus status = ReportStatus::ok;
  std::string error;  ///< what failed: a whole message, "cohort: ..."; empty when ok
  /// A save's report of a written file: its size and its pieces' checksums, in file order.
  std::uint64_t file_bytes = 0;
  std::vector<std::uint64_t> piece_checksums;

  bool ok() const noexcept { return status == ReportStatus::ok; }
  bool operator==(const RankReport&) const = default;

  /// A failed report whose error is `error`'s message, after `context` ("rank 1: "):
  /// `unloadable` for an UnloadableCheckpoint, else `failed`.
  static RankReport failure(const std::exception& error, std::string_view context = {});
  static RankReport failure(std::string message, ReportStatus status = ReportStatus::failed);
};

/// Raises a failed report's error on this rank: an UnloadableCheckpoint or a CheckpointError (as
/// its status says) with its message as it was raised (which names the file and line it was
/// raised at, and the rank when it was another's).
[[noreturn]] void throw_report(const RankReport& report);

/// The report's bytes (Note [Checkpoint reports]).
std::string encode_report(const RankReport& report);

/// Decodes what `encode_report` wrote. @throws CheckpointError naming `from` (who sent it) and
/// what is malformed.
RankReport decode_report(std::string_view bytes, std::string_view from);

/// Sets `key` to `report`'s bytes.
void put_report(Store& store, std::string_view key, const RankReport& report);
/// Waits for `key` and decodes its report; `from` names the sender in a decode error.
RankReport get_report(Store& store, std::string_view key, Milliseconds timeout,
                      std::string_view from);

}  // namespace cohort::detail
