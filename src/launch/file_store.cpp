#include <cohort/launch/file_store.hpp>

#include <cohort/core/backoff.hpp>
#include <cohort/core/error.hpp>

#include "store_detail.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <functional>
#include <optional>
#include <system_error>
#include <thread>
#include <utility>

// Note [FileStore layout]
// Each key is one file in `<root>/<run_id>/`, named by percent-encoding every byte outside
// [A-Za-z0-9_-]. A key's file name therefore never starts with '.', which leaves that space to
// the store itself: `.lock` (the lock file) and `.tmp-<pid>-<thread>-<n>` (values being
// written). A value is written to a fresh temporary file and renamed over the key's file, so a
// reader sees the old value or the new one, never half of one; rename() is atomic on local file
// systems and on NFS. Values are not fsync'ed: the store lives for one run, and a crashed machine
// ends the run anyway.
//
// Writers (set, add, compare_set, remove) hold an open-file-description lock on `.lock` while
// they read and replace a key, so an add never loses a concurrent set or add. OFD locks belong to
// the open file, not to the process, so two threads of one process exclude each other too, and
// the kernel drops a lock when its holder dies: a crashed rank never leaves a stale lock. The lock
// is taken with F_OFD_SETLK polled against the deadline, not F_OFD_SETLKW, so it cannot hang.

namespace cohort {
namespace {

using detail::Clock;

constexpr std::size_t kMaxFileNameBytes = 200;
constexpr auto kPollInitial = std::chrono::milliseconds(1);
constexpr auto kPollCap = std::chrono::milliseconds(50);
// The lock is held for a few system calls, so contenders retry sooner than pollers of keys.
constexpr auto kLockPollInitial = std::chrono::microseconds(100);
constexpr auto kLockPollCap = std::chrono::milliseconds(5);

[[noreturn]] void fail_system(std::string_view what, const std::filesystem::path& path,
                              int errnum) {
  COHORT_FAIL(Error, "FileStore: " + std::string(what) + " " + path.string() +
                         " failed: " + detail::system_error_text(errnum));
}

std::string encode_key(std::string_view key) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string name;
  name.reserve(key.size());
  for (const char c : key) {
    const auto byte = static_cast<unsigned char>(c);
    const bool plain = (byte >= 'a' && byte <= 'z') || (byte >= 'A' && byte <= 'Z') ||
                       (byte >= '0' && byte <= '9') || byte == '_' || byte == '-';
    if (plain) {
      name.push_back(c);
    } else {
      name.push_back('%');
      name.push_back(kHex[byte >> 4]);
      name.push_back(kHex[byte & 0xf]);
    }
  }
  return name;
}

/// The whole content of `path`, or nullopt when it does not exist.
std::optional<std::string> read_file(const std::filesystem::path& path) {
  detail::UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) {
    if (errno == ENOENT) return std::nullopt;
    fail_system("opening", path, errno);
  }
  std::string content;
  char buffer[64 * 1024];
  for (;;) {
    const ssize_t got = ::read(fd.get(), buffer, sizeof(buffer));
    if (got < 0) {
      if (errno == EINTR) continue;
      fail_system("reading", path, errno);
    }
    if (got == 0) return content;
    content.append(buffer, static_cast<std::size_t>(got));
  }
}

bool file_exists(const std::filesystem::path& path) {
  struct stat info {};
  if (::stat(path.c_str(), &info) == 0) return true;
  if (errno == ENOENT) return false;
  fail_system("checking", path, errno);
}

/// Writes `value` to a new temporary file in `folder` and returns its path.
std::filesystem::path write_temporary(const std::filesystem::path& folder, std::string_view value) {
  // pid + thread + counter is unique among the live writers; a name already taken can only be
  // debris of a crashed earlier process that had the same pid, so skip to the next number.
  thread_local std::uint64_t counter = 0;
  const auto prefix = ".tmp-" + std::to_string(::getpid()) + "-" +
                      std::to_string(std::hash<std::thread::id>{}(std::this_thread::get_id())) +
                      "-";
  std::filesystem::path path;
  detail::UniqueFd fd;
  while (!fd.valid()) {
    path = folder / (prefix + std::to_string(counter++));
    fd.reset(::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
    if (!fd.valid() && errno != EEXIST) fail_system("creating", path, errno);
  }
  const char* data = value.data();
  std::size_t left = value.size();
  while (left > 0) {
    const ssize_t wrote = ::write(fd.get(), data, left);
    if (wrote < 0 && errno == EINTR) continue;
    if (wrote < 0) {
      const int errnum = errno;
      ::unlink(path.c_str());
      fail_system("writing", path, errnum);
    }
    data += wrote;
    left -= static_cast<std::size_t>(wrote);
  }
  // On NFS, close() is where a failed write surfaces.
  if (::close(fd.release()) != 0) {
    const int errnum = errno;
    ::unlink(path.c_str());
    fail_system("closing", path, errnum);
  }
  return path;
}

void rename_into(const std::filesystem::path& from, const std::filesystem::path& to) {
  if (::rename(from.c_str(), to.c_str()) != 0) {
    const int errnum = errno;
    ::unlink(from.c_str());
    fail_system("renaming into", to, errnum);
  }
}

/// Holds the folder's OFD write lock; see Note [FileStore layout].
class FolderLock {
 public:
  FolderLock(const std::filesystem::path& path, Milliseconds timeout, std::string_view store) {
    fd_.reset(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
    if (!fd_.valid()) fail_system("opening the lock file", path, errno);
    const auto deadline = detail::deadline_after(timeout);
    Backoff backoff(kLockPollInitial, kLockPollCap);
    for (;;) {
      struct flock request {};
      request.l_type = F_WRLCK;
      request.l_whence = SEEK_SET;  // l_start = l_len = 0: the whole file; l_pid must be 0
      if (::fcntl(fd_.get(), F_OFD_SETLK, &request) == 0) return;
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EACCES) fail_system("locking", path, errno);
      if (Clock::now() >= deadline) {
        COHORT_FAIL(TimeoutError, "timed out after " + std::to_string(timeout.count()) +
                                      " ms waiting for the lock file " + path.string() + " of " +
                                      std::string(store) +
                                      "; another process holds it, check that it is not stuck");
      }
      backoff.sleep(deadline);
    }
  }
  // Closing the only descriptor of the open file description releases the lock.

 private:
  detail::UniqueFd fd_;
};

}  // namespace

FileStore::FileStore(std::filesystem::path root, std::string run_id, Milliseconds timeout)
    : Store(timeout), root_(std::move(root)), run_id_(std::move(run_id)) {
  COHORT_EXPECTS(!run_id_.empty(), "FileStore needs a non-empty run id");
  COHORT_EXPECTS(run_id_ != "." && run_id_ != ".." &&
                     run_id_.find_first_of(std::string_view("/\0", 2)) == std::string::npos,
                 "FileStore run id " + detail::quote_bytes(run_id_) +
                     " is not a plain file name (no '/', not '.' or '..')");
  folder_ = root_ / run_id_;
  std::error_code error;
  std::filesystem::create_directories(folder_, error);
  COHORT_EXPECTS(!error,
                 "cannot create the FileStore folder " + folder_.string() + ": " + error.message());
}

FileStore::~FileStore() = default;

namespace {

std::filesystem::path key_path(const std::filesystem::path& folder, std::string_view key) {
  detail::check_key(key);
  auto name = encode_key(key);
  COHORT_EXPECTS(name.size() <= kMaxFileNameBytes,
                 "FileStore key of " + std::to_string(key.size()) +
                     " bytes is too long: its file " + "name would be " +
                     std::to_string(name.size()) + " characters (at most " +
                     std::to_string(kMaxFileNameBytes) + "; bytes other than letters, digits, " +
                     "'_' and '-' take 3)");
  return folder / name;
}

}  // namespace

void FileStore::set(std::string_view key, std::string_view value) {
  const auto path = key_path(folder_, key);
  const auto temporary = write_temporary(folder_, value);
  try {
    FolderLock lock(folder_ / ".lock", timeout(), describe());
    rename_into(temporary, path);
  } catch (...) {
    ::unlink(temporary.c_str());
    throw;
  }
}

std::string FileStore::get(std::string_view key, Milliseconds timeout) {
  const auto path = key_path(folder_, key);
  const auto deadline = detail::deadline_after(timeout);
  Backoff backoff(kPollInitial, kPollCap);
  for (;;) {
    if (auto value = read_file(path)) return *std::move(value);
    if (Clock::now() >= deadline) {
      COHORT_FAIL(TimeoutError, detail::timeout_message(describe(), {std::string(key)}, timeout));
    }
    backoff.sleep(deadline);
  }
}

void FileStore::wait(const std::vector<std::string>& keys, Milliseconds timeout) {
  std::vector<std::pair<std::string, std::filesystem::path>> missing;
  for (const auto& key : keys) missing.emplace_back(key, key_path(folder_, key));
  const auto deadline = detail::deadline_after(timeout);
  Backoff backoff(kPollInitial, kPollCap);
  for (;;) {
    std::erase_if(missing, [](const auto& entry) { return file_exists(entry.second); });
    if (missing.empty()) return;
    if (Clock::now() >= deadline) {
      std::vector<std::string> names;
      for (const auto& entry : missing) names.push_back(entry.first);
      COHORT_FAIL(TimeoutError, detail::timeout_message(describe(), names, timeout));
    }
    backoff.sleep(deadline);
  }
}

bool FileStore::check(const std::vector<std::string>& keys) {
  std::vector<std::filesystem::path> paths;
  for (const auto& key : keys) paths.push_back(key_path(folder_, key));
  for (const auto& path : paths) {
    if (!file_exists(path)) return false;
  }
  return true;
}

std::int64_t FileStore::add(std::string_view key, std::int64_t delta) {
  const auto path = key_path(folder_, key);
  FolderLock lock(folder_ / ".lock", timeout(), describe());
  const auto current = read_file(path);
  std::string error;
  const auto sum = detail::apply_add(key, current ? &*current : nullptr, delta, error);
  if (!sum) COHORT_FAIL(InvalidArgument, error + " in " + describe());
  rename_into(write_temporary(folder_, std::to_string(*sum)), path);
  return *sum;
}

std::string FileStore::compare_set(std::string_view key, std::string_view expected,
                                   std::string_view desired) {
  const auto path = key_path(folder_, key);
  FolderLock lock(folder_ / ".lock", timeout(), describe());
  auto current = read_file(path);
  if (current ? *current != expected : !expected.empty()) return current.value_or(std::string());
  rename_into(write_temporary(folder_, desired), path);
  return std::string(desired);
}

bool FileStore::remove(std::string_view key) {
  const auto path = key_path(folder_, key);
  FolderLock lock(folder_ / ".lock", timeout(), describe());
  if (::unlink(path.c_str()) == 0) return true;
  if (errno == ENOENT) return false;
  fail_system("deleting", path, errno);
}

std::unique_ptr<Store> FileStore::clone() const {
  return std::make_unique<FileStore>(root_, run_id_, timeout());
}

std::string FileStore::describe() const {
  return "FileStore(" + folder_.string() + ")";
}

}  // namespace cohort
