#pragma once

// Private to the checkpoint layer: the few POSIX file operations a durable publish needs, each
// throwing a CheckpointError that names the path and the system's reason.

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace cohort::detail {

/// Writes of a rank's file go out in chunks of this size (Note [Checkpoint direct I/O]).
inline constexpr std::size_t kWriteChunk = std::size_t{4} << 20;
/// The alignment of memory, offsets and lengths that O_DIRECT asks for (the page size covers
/// every logical block size of the disks in use).
inline constexpr std::size_t kDirectAlignment = 4096;

/// The bytes of a file's chunk [offset, offset + size), asked for in file order just before the
/// chunk is written; the pointer stays valid until the next call.
using ChunkSource = std::function<const unsigned char*(std::size_t offset, std::size_t size)>;

/// Writes `bytes` bytes to a new file `path` (replacing any) in chunks of at most kWriteChunk,
/// each at an offset that is a multiple of kWriteChunk until the tail, fsyncs it and closes it.
/// With `around_cache`, every chunk that `source` gives at an address aligned to kDirectAlignment
/// goes straight to the disk (O_DIRECT) where the file system allows it, and only the tail that is
/// not a multiple of kDirectAlignment through the page cache (Note [Checkpoint direct I/O]).
void write_file_durably(const std::filesystem::path& path, std::size_t bytes, bool around_cache,
                        const ChunkSource& source);

/// The same for bytes that lie together in memory at `data`.
void write_file_durably(const std::filesystem::path& path, const void* data, std::size_t bytes,
                        bool around_cache = false);

/// fsyncs a directory, so that the names created or renamed in it survive a power loss.
void fsync_directory(const std::filesystem::path& path);

/// rename(2): atomic replacement of `to` by `from` (both in one file system).
void rename_path(const std::filesystem::path& from, const std::filesystem::path& to);

/// The whole of a small file (a manifest, the `latest` pointer).
std::string read_whole_file(const std::filesystem::path& path);

/// `bytes` bytes at `offset` of `path` into `data`, and their checksum (Checksum::of), computed
/// chunk by chunk while each is still in cache. @throws CheckpointError when the file is shorter
/// than that.
std::uint64_t read_file_range(const std::filesystem::path& path, std::uint64_t offset, void* data,
                              std::size_t bytes);

/// Points `<root>/latest` at `name` atomically in two halves: `prepare_latest` writes and fsyncs
/// a temporary file holding the name (while the ranks write their files: it is not on the path
/// from the last fsync of the data to the publish); `move_latest` renames it over `latest` and
/// fsyncs the root.
void prepare_latest(const std::filesystem::path& root, const std::string& name);
void move_latest(const std::filesystem::path& root);

/// The name `<root>/latest` holds, or nothing when there is no such file.
std::optional<std::string> read_latest(const std::filesystem::path& root);

/// "step-000000000042" for step 42; the step of such a name, or nothing for other names.
std::string checkpoint_name(std::int64_t step);
std::optional<std::int64_t> step_of_name(const std::string& name);

/// The checkpoints (folders named by `checkpoint_name`) under `root`, newest step first.
std::vector<std::string> list_checkpoints(const std::filesystem::path& root);

}  // namespace cohort::detail
