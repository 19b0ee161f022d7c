#include "file_io.hpp"

#include <cohort/checkpoint/checksum.hpp>

#include <cohort/checkpoint/manifest.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

namespace cohort::detail {
namespace {

/// Throws "checkpoint file <path>: <what>: <the system's reason>", with the caller's file and line.
[[noreturn]] void fail(const std::filesystem::path& path, const std::string& what, int error,
                       const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  detail::throw_error<CheckpointError>(
      "checkpoint file " + path.string() + ": " + what + ": " + std::strerror(error), file, line);
}

/// Closes a file descriptor when it goes out of scope.
class FileDescriptor {
 public:
  explicit FileDescriptor(int fd) : fd_(fd) {}
  ~FileDescriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  int get() const noexcept { return fd_; }
  /// Closes now, reporting the error close(2) may give (a delayed write error).
  int close() noexcept {
    const int result = ::close(fd_);
    fd_ = -1;
    return result;
  }

 private:
  int fd_;
};

constexpr const char* kNamePrefix = "step-";

}  // namespace

// Note [Checkpoint direct I/O]
// A rank's file is written in chunks of kWriteChunk, each checksummed by the writer while it is
// in cache (Note [Checkpoint in place] in snapshot.cpp), so its bytes are read from memory once.
// With `around_cache` the file is opened with O_DIRECT and each aligned chunk goes straight from
// the writer's memory (a bounce buffer, or staging) to the disk: the kernel does not copy the
// bytes into the page cache first, which was the largest CPU cost of a save (more than the
// staging copy and the checksum together), and CPU taken by a background save is CPU taken from
// training. The tail that is not a multiple of kDirectAlignment, and everything when the file
// system refuses O_DIRECT (tmpfs) or a chunk is not aligned, goes through the page cache. The
// fsync afterwards is still needed: it persists the size and the block map, and flushes the
// disk's own cache. A load right after a save then reads from the disk, not from the page cache.

namespace {

/// write(2) of all `bytes` at the file's position; EINTR is retried; returns 0 or the errno.
int write_all(int fd, const unsigned char* next, std::size_t bytes) {
  while (bytes > 0) {
    const ssize_t written = ::write(fd, next, std::min<std::size_t>(bytes, std::size_t{1} << 30));
    if (written < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    next += written;
    bytes -= static_cast<std::size_t>(written);
  }
  return 0;
}

/// Turns O_DIRECT off on `fd` (the remaining writes go through the page cache).
void stop_direct(int fd, const std::filesystem::path& path) {
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags & ~O_DIRECT) != 0)
    fail(path, "cannot clear O_DIRECT", errno);
}

}  // namespace

void write_file_durably(const std::filesystem::path& path, std::size_t bytes, bool around_cache,
                        const ChunkSource& source) {
  constexpr int kFlags = O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC;
  bool direct = around_cache && bytes >= kDirectAlignment;
  int opened = direct ? ::open(path.c_str(), kFlags | O_DIRECT, 0644) : -1;
  if (opened < 0) {
    direct = false;  // EINVAL: this file system has no O_DIRECT
    opened = ::open(path.c_str(), kFlags, 0644);
  }
  FileDescriptor fd(opened);
  if (fd.get() < 0) fail(path, "cannot create", errno);
  const std::size_t direct_end = direct ? bytes / kDirectAlignment * kDirectAlignment : 0;
  for (std::size_t offset = 0; offset < bytes;) {
    const bool in_direct = direct && offset < direct_end;
    const std::size_t size = std::min(kWriteChunk, (in_direct ? direct_end : bytes) - offset);
    const unsigned char* chunk = source(offset, size);
    if (direct && (!in_direct || reinterpret_cast<std::uintptr_t>(chunk) % kDirectAlignment != 0)) {
      stop_direct(fd.get(), path);
      direct = false;
    }
    int error = write_all(fd.get(), chunk, size);
    if (error == EINVAL && direct) {
      // The file system takes O_DIRECT at open but not these alignments: go on through the cache
      // from this chunk (a failed direct write leaves the position where it was).
      stop_direct(fd.get(), path);
      direct = false;
      if (::lseek(fd.get(), static_cast<off_t>(offset), SEEK_SET) < 0)
        fail(path, "cannot seek", errno);
      error = write_all(fd.get(), chunk, size);
    }
    if (error != 0) fail(path, "cannot write", error);
    offset += size;
  }
  if (::fsync(fd.get()) != 0) fail(path, "cannot fsync", errno);
  if (fd.close() != 0) fail(path, "cannot close", errno);
}

void write_file_durably(const std::filesystem::path& path, const void* data, std::size_t bytes,
                        bool around_cache) {
  const auto* begin = static_cast<const unsigned char*>(data);
  write_file_durably(path, bytes, around_cache,
                     [begin](std::size_t offset, std::size_t) { return begin + offset; });
}

void fsync_directory(const std::filesystem::path& path) {
  FileDescriptor fd(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd.get() < 0) fail(path, "cannot open the folder", errno);
  if (::fsync(fd.get()) != 0) fail(path, "cannot fsync the folder", errno);
}

void rename_path(const std::filesystem::path& from, const std::filesystem::path& to) {
  if (::rename(from.c_str(), to.c_str()) != 0) fail(from, "cannot rename to " + to.string(), errno);
}

std::string read_whole_file(const std::filesystem::path& path) {
  FileDescriptor fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) fail(path, "cannot open", errno);
  std::string text;
  char chunk[65536];
  for (;;) {
    const ssize_t count = ::read(fd.get(), chunk, sizeof(chunk));
    if (count < 0) {
      if (errno == EINTR) continue;
      fail(path, "cannot read", errno);
    }
    if (count == 0) break;
    text.append(chunk, static_cast<std::size_t>(count));
  }
  return text;
}

std::uint64_t read_file_range(const std::filesystem::path& path, std::uint64_t offset, void* data,
                              std::size_t bytes) {
  FileDescriptor fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) fail(path, "cannot open", errno);
  // Chunks small enough to stay in cache between the read and the checksum: one pass over memory.
  constexpr std::size_t kChunk = std::size_t{256} << 10;
  Checksum checksum;
  auto* next = static_cast<unsigned char*>(data);
  while (bytes > 0) {
    const ssize_t count =
        ::pread(fd.get(), next, std::min(bytes, kChunk), static_cast<off_t>(offset));
    if (count < 0) {
      if (errno == EINTR) continue;
      fail(path, "cannot read", errno);
    }
    if (count == 0) {
      COHORT_FAIL(CheckpointError, "checkpoint file " + path.string() + " ends at byte " +
                                       std::to_string(offset) +
                                       ", before the data the manifest lists: it is truncated");
    }
    checksum.update(next, static_cast<std::size_t>(count));
    next += count;
    offset += static_cast<std::uint64_t>(count);
    bytes -= static_cast<std::size_t>(count);
  }
  return checksum.digest();
}

namespace {

std::filesystem::path latest_temporary(const std::filesystem::path& root) {
  return root / (".latest.tmp-" + std::to_string(::getpid()));
}

}  // namespace

void prepare_latest(const std::filesystem::path& root, const std::string& name) {
  const std::string text = name + "\n";
  write_file_durably(latest_temporary(root), text.data(), text.size());
}

void move_latest(const std::filesystem::path& root) {
  rename_path(latest_temporary(root), root / "latest");
  fsync_directory(root);
}

std::optional<std::string> read_latest(const std::filesystem::path& root) {
  std::error_code error;
  if (!std::filesystem::exists(root / "latest", error)) return std::nullopt;
  std::string text = read_whole_file(root / "latest");
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  return text;
}

std::string checkpoint_name(std::int64_t step) {
  char name[40];
  std::snprintf(name, sizeof(name), "%s%012lld", kNamePrefix, static_cast<long long>(step));
  return name;
}

std::optional<std::int64_t> step_of_name(const std::string& name) {
  const std::string prefix = kNamePrefix;
  if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) {
    return std::nullopt;
  }
  std::int64_t step = 0;
  for (std::size_t i = prefix.size(); i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9' || step > (INT64_MAX - 9) / 10) return std::nullopt;
    step = step * 10 + (name[i] - '0');
  }
  return step;
}

std::vector<std::string> list_checkpoints(const std::filesystem::path& root) {
  std::vector<std::pair<std::int64_t, std::string>> found;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(root, error)) {
    const std::string name = entry.path().filename().string();
    if (const auto step = step_of_name(name); step && entry.is_directory(error)) {
      found.emplace_back(*step, name);
    }
  }
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a > b; });
  std::vector<std::string> names;
  for (auto& [step, name] : found) names.push_back(std::move(name));
  return names;
}

}  // namespace cohort::detail
