#include "rank_report.hpp"

#include <cohort/checkpoint/manifest.hpp>
#include <cohort/core/error.hpp>

#include <cstddef>
#include <utility>

// Note [Checkpoint reports]
// The ranks of a save or a load coordinate through the store, never a collective (a background
// save must not interleave with training's collectives). Every value they exchange is a report:
// rank 0's "the folder is prepared", each rank's "my file is written: its size and its pieces'
// checksums" or "my part is read and checked", and rank 0's outcome of the whole save. A report
// is explicit fields, little-endian:
//   u8   format (kReportFormat)
//   u8   status: 0 ok, 1 failed (a restart may get past it), 2 the checkpoint can never load
//   u32  length, then that many bytes: the error message (empty when ok, never empty otherwise)
//   u64  the file's bytes (a save's written file; 0 otherwise)
//   u32  count, then count u64: the checksums of the file's pieces, in file order
// and nothing after. Decoding checks every length against what is left and refuses anything
// else (a wrong format, an unknown status, an error text where none belongs, trailing bytes) with
// a CheckpointError naming the rank that sent it, so a rank of another cohort version, or a key
// written by something else, is a clear error instead of a misread checksum.

namespace cohort::detail {
namespace {

constexpr std::uint8_t kReportFormat = 1;

void put_u8(std::string& out, std::uint8_t value) {
  out.push_back(static_cast<char>(value));
}

void put_u32(std::string& out, std::uint32_t value) {
  for (int shift = 0; shift < 32; shift += 8)
    put_u8(out, static_cast<std::uint8_t>(value >> shift));
}

void put_u64(std::string& out, std::uint64_t value) {
  for (int shift = 0; shift < 64; shift += 8)
    put_u8(out, static_cast<std::uint8_t>(value >> shift));
}

/// Reads fields off the front of a report; every read checks that the field is there.
class Reader {
 public:
  Reader(std::string_view bytes, std::string_view from) : rest_(bytes), from_(from) {}

  [[noreturn]] void malformed(const std::string& what) const {
    COHORT_FAIL(CheckpointError, std::string(from_) + " sent a malformed checkpoint report (" +
                                     what + "): are all ranks running the same cohort?");
  }

  std::string_view take(std::size_t count, const char* field) {
    if (count > rest_.size()) {
      malformed(std::string(field) + " needs " + std::to_string(count) + " bytes, " +
                std::to_string(rest_.size()) + " are left");
    }
    const std::string_view taken = rest_.substr(0, count);
    rest_.remove_prefix(count);
    return taken;
  }

  std::uint64_t unsigned_field(std::size_t bytes, const char* field) {
    const std::string_view raw = take(bytes, field);
    std::uint64_t value = 0;
    for (std::size_t i = 0; i < bytes; ++i) {
      value |= std::uint64_t{static_cast<unsigned char>(raw[i])} << (8 * i);
    }
    return value;
  }

  std::size_t left() const noexcept { return rest_.size(); }

 private:
  std::string_view rest_;
  std::string_view from_;
};

}  // namespace

RankReport RankReport::failure(const std::exception& error, std::string_view context) {
  const bool unloadable = dynamic_cast<const UnloadableCheckpoint*>(&error) != nullptr;
  return failure(std::string(context) + error.what(),
                 unloadable ? ReportStatus::unloadable : ReportStatus::failed);
}

RankReport RankReport::failure(std::string message, ReportStatus status) {
  COHORT_EXPECTS(status != ReportStatus::ok, "a failure's report cannot be ok");
  RankReport report;
  report.status = status;
  report.error = message.empty() ? std::string("an unnamed error") : std::move(message);
  return report;
}

void throw_report(const RankReport& report) {
  COHORT_EXPECTS(!report.ok(), "a report of success is not an error");
  if (report.status == ReportStatus::unloadable) throw UnloadableCheckpoint(report.error);
  throw CheckpointError(report.error);
}

std::string encode_report(const RankReport& report) {
  COHORT_EXPECTS(report.ok() == report.error.empty(),
                 "a checkpoint report has an error exactly when it is not ok");
  COHORT_EXPECTS(report.error.size() <= UINT32_MAX && report.piece_checksums.size() <= UINT32_MAX,
                 "a checkpoint report is limited to 4 GiB of text and 2^32 pieces");
  std::string out;
  out.reserve(18 + report.error.size() + 8 * report.piece_checksums.size());
  put_u8(out, kReportFormat);
  put_u8(out, static_cast<std::uint8_t>(report.status));
  put_u32(out, static_cast<std::uint32_t>(report.error.size()));
  out.append(report.error);
  put_u64(out, report.file_bytes);
  put_u32(out, static_cast<std::uint32_t>(report.piece_checksums.size()));
  for (const std::uint64_t checksum : report.piece_checksums) put_u64(out, checksum);
  return out;
}

RankReport decode_report(std::string_view bytes, std::string_view from) {
  Reader reader(bytes, from);
  const std::uint64_t format = reader.unsigned_field(1, "the format");
  if (format != kReportFormat) {
    reader.malformed("format " + std::to_string(format) + ", this cohort reads " +
                     std::to_string(kReportFormat));
  }
  RankReport report;
  const std::uint64_t status = reader.unsigned_field(1, "the status");
  if (status > static_cast<std::uint8_t>(ReportStatus::unloadable)) {
    reader.malformed("status " + std::to_string(status));
  }
  report.status = static_cast<ReportStatus>(status);
  const std::uint64_t error_bytes = reader.unsigned_field(4, "the error's length");
  report.error = std::string(reader.take(error_bytes, "the error"));
  if (report.ok() != report.error.empty()) {
    reader.malformed(report.ok() ? "an error text in a report of success"
                                 : "a failure without an error text");
  }
  report.file_bytes = reader.unsigned_field(8, "the file's size");
  const std::uint64_t count = reader.unsigned_field(4, "the count of pieces");
  // Each checksum takes 8 bytes: never reserve more than the report holds.
  if (count > reader.left() / 8) {
    reader.malformed(std::to_string(count) + " piece checksums in " +
                     std::to_string(reader.left()) + " bytes");
  }
  report.piece_checksums.reserve(count);
  for (std::uint64_t i = 0; i < count; ++i) {
    report.piece_checksums.push_back(reader.unsigned_field(8, "a piece's checksum"));
  }
  if (reader.left() != 0) reader.malformed(std::to_string(reader.left()) + " trailing bytes");
  return report;
}

void put_report(Store& store, std::string_view key, const RankReport& report) {
  store.set(key, encode_report(report));
}

RankReport get_report(Store& store, std::string_view key, Milliseconds timeout,
                      std::string_view from) {
  return decode_report(store.get(key, timeout), from);
}

}  // namespace cohort::detail
