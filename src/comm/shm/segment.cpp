#include "comm/shm/segment.hpp"

#include "comm/call_signature.hpp"

#include <cohort/core/error.hpp>
#include <cohort/core/logging.hpp>

#include <dirent.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

namespace cohort::detail {
namespace {

constexpr std::uint64_t kMagic = 0x636f686f72747368ULL;  // "cohortsh"
constexpr std::size_t kLine = 128;
constexpr std::size_t kHeaderLines = 4;   // header | abort | futex word | sleepers
constexpr std::size_t kLinesPerRank = 4;  // pid | arrived | reduced | done
constexpr std::size_t kAbortLine = 1;
constexpr std::size_t kFutexLine = 2;
constexpr std::size_t kSleepersLine = 3;
constexpr auto kYieldFor = std::chrono::microseconds(300);
constexpr auto kSleepSlice = std::chrono::milliseconds(2);
constexpr auto kHealthEvery = std::chrono::milliseconds(20);
constexpr auto kGrace = std::chrono::seconds(2);  // the watchdog, which diagnoses, goes first

std::string prefix() {
  return "cohort-shm." + std::to_string(getuid()) + ".";
}

std::size_t data_offset(int ranks) {
  const std::size_t lines =
      (kHeaderLines + kLinesPerRank * static_cast<std::size_t>(ranks)) * kLine;
  return (lines + 4095) / 4096 * 4096;
}

void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

long futex(std::uint32_t* address, int op, std::uint32_t value, const timespec* timeout) {
  return syscall(SYS_futex, address, op, value, timeout, nullptr, 0);
}

/// Whether process `pid` has ended (gone, or a zombie nobody has reaped yet).
bool process_ended(pid_t pid) {
  if (pid <= 0) {
    return false;
  }
  if (kill(pid, 0) != 0) {
    return errno == ESRCH;
  }
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  std::getline(stat, text);
  const auto paren = text.rfind(')');
  return paren != std::string::npos && paren + 2 < text.size() &&
         (text[paren + 2] == 'Z' || text[paren + 2] == 'X');
}

/// Pause iterations before yielding: none when the ranks outnumber the cores this process may
/// run on, since a spinning rank then holds the core the awaited rank needs. Even 50 pauses
/// (a few microseconds) made a 1 KiB all-reduce of 4 processes on 2 cores 45% slower (10.3
/// against 7.0 us), 400 pauses 4x slower.
int spin_budget(int ranks) {
  cpu_set_t set;
  CPU_ZERO(&set);
  int cores = static_cast<int>(std::thread::hardware_concurrency());
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    cores = CPU_COUNT(&set);
  }
  return ranks <= cores ? 20000 : 0;
}

/// How long a waiter yields before it sleeps on the futex. Not at all in a process that leads
/// its own session (torchrun starts each worker so): its peers are then in other sessions, and
/// with the kernel's autogroup scheduling (sched_autogroup_enabled, on by default) in other
/// scheduling groups, to which sched_yield gives nothing: a yielding rank kept its core for
/// the whole 300 us while the rank it waited for could not run, and a 1 KiB all-reduce of 4
/// torchrun workers on 2 cores took 0.5 to 2.9 ms instead of 15 us. A futex sleep gives the
/// core away whatever the group.
std::chrono::microseconds yield_time() {
  return getsid(0) == getpid() ? std::chrono::microseconds(0) : kYieldFor;
}

/// "rank 3" or "every rank", for messages.
std::string waited_for(int rank, const CommContext& context) {
  return rank >= 0 ? "rank " + std::to_string(context.global_rank(rank)) : "every rank";
}

std::string new_segment_name() {
  static std::atomic<std::uint64_t> created{0};
  std::ostringstream name;
  name << '/' << prefix() << getpid() << '.' << created.fetch_add(1);
  return name.str();
}

}  // namespace

int remove_stale_shm_segments() noexcept {
  int removed = 0;
  DIR* dir = opendir("/dev/shm");
  if (dir == nullptr) {
    return 0;
  }
  const std::string mine = prefix();
  while (const dirent* entry = readdir(dir)) {
    const std::string name = entry->d_name;
    if (name.rfind(mine, 0) != 0) {
      continue;
    }
    const pid_t pid = static_cast<pid_t>(std::atol(name.c_str() + mine.size()));
    if (pid > 0 && pid != getpid() && process_ended(pid) && shm_unlink(("/" + name).c_str()) == 0) {
      ++removed;
    }
  }
  closedir(dir);
  return removed;
}

ShmSegment::ShmSegment(CommContext& context, std::size_t slot_bytes)
    : ranks_(context.size()), rank_(context.rank()), slot_bytes_(slot_bytes) {
  bytes_ = data_offset(ranks_) + 2 * static_cast<std::size_t>(ranks_) * slot_bytes_;
  spin_ = spin_budget(ranks_);
  yield_for_ = yield_time();
  const std::string who = "rank " + std::to_string(context.global_rank(context.rank())) + ": ";
  int fd = -1;
  if (rank_ == 0) {
    if (const int removed = remove_stale_shm_segments(); removed > 0) {
      COHORT_LOG(warn) << "removed " << removed
                       << " shared-memory segment(s) left in /dev/shm by cohort processes "
                          "that ended before cleaning up";
    }
    name_ = new_segment_name();
    fd = shm_open(name_.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    COHORT_CHECK(fd >= 0, Error,
                 who + "cannot create the shared-memory segment /dev/shm" + name_ + ": " +
                     std::strerror(errno) +
                     ". Check that /dev/shm is mounted and writable, or "
                     "set COHORT_HOST_TRANSPORT=gloo.");
    // posix_fallocate returns the error rather than setting errno.
    if (const int error = posix_fallocate(fd, 0, static_cast<off_t>(bytes_)); error != 0) {
      close(fd);
      shm_unlink(name_.c_str());
      COHORT_FAIL(Error, who + "cannot reserve " + std::to_string(bytes_ >> 20) +
                             " MiB in /dev/shm for " + context.describe() + ": " +
                             std::strerror(error) +
                             ". /dev/shm is too small (containers default to 64 MB): give it "
                             "more (docker --shm-size=1g or --ipc=host), or set "
                             "COHORT_HOST_TRANSPORT=gloo.");
    }
  } else {
    name_ = context.store()->get("shm/name", context.timeout());
    fd = shm_open(name_.c_str(), O_RDWR, 0600);
    COHORT_CHECK(fd >= 0, Error,
                 who + "cannot open rank 0's shared-memory segment /dev/shm" + name_ + ": " +
                     std::strerror(errno) +
                     ". The ranks must share /dev/shm (same host, same "
                     "IPC namespace); otherwise set COHORT_HOST_TRANSPORT=gloo.");
    struct stat info {};
    if (fstat(fd, &info) != 0 || static_cast<std::size_t>(info.st_size) != bytes_) {
      close(fd);
      COHORT_FAIL(Error, who + "the shared-memory segment /dev/shm" + name_ +
                             " does not have the expected size; its ranks disagree about the "
                             "communicator");
    }
  }
  void* mapping = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int map_error = errno;
  close(fd);
  if (mapping == MAP_FAILED) {
    if (rank_ == 0) {
      shm_unlink(name_.c_str());
    }
    COHORT_FAIL(Error, who + "cannot map the shared-memory segment /dev/shm" + name_ + ": " +
                           std::strerror(map_error));
  }
  base_ = static_cast<std::byte*>(mapping);
  auto header_u64 = [&](std::size_t offset) {
    return std::atomic_ref<std::uint64_t>(*reinterpret_cast<std::uint64_t*>(base_ + offset));
  };
  if (rank_ == 0) {
    header_u64(8).store(static_cast<std::uint64_t>(ranks_));
    header_u64(16).store(slot_bytes_);
    header_u64(0).store(kMagic, std::memory_order_release);
    context.store()->set("shm/name", name_);
  } else if (header_u64(0).load(std::memory_order_acquire) != kMagic ||
             header_u64(8).load() != static_cast<std::uint64_t>(ranks_) ||
             header_u64(16).load() != slot_bytes_) {
    munmap(base_, bytes_);
    COHORT_FAIL(Error, who + "the shared-memory segment /dev/shm" + name_ +
                           " was made for another communicator");
  }
  flag(rank_, Flag{0}).store(static_cast<std::uint64_t>(getpid()), std::memory_order_release);
  word(0, 24).fetch_add(1);
  if (rank_ == 0) {
    // Unlink as soon as everyone has attached: from then on no exit path can leak the segment.
    const auto deadline = Clock::now() + context.timeout();
    while (word(0, 24).load() < static_cast<std::uint32_t>(ranks_)) {
      if (Clock::now() > deadline || context.aborted()) {
        shm_unlink(name_.c_str());
        munmap(base_, bytes_);
        COHORT_FAIL(TimeoutError, who + "not every rank of " + context.describe() +
                                      " attached to its shared-memory segment within " +
                                      std::to_string(context.timeout().count()) + " ms");
      }
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    shm_unlink(name_.c_str());
  }
}

ShmSegment::~ShmSegment() {
  if (base_ != nullptr) {
    munmap(base_, bytes_);
  }
}

std::byte* ShmSegment::slot(int buffer, int rank) const noexcept {
  return base_ + data_offset(ranks_) +
         (static_cast<std::size_t>(buffer) * static_cast<std::size_t>(ranks_) +
          static_cast<std::size_t>(rank)) *
             slot_bytes_;
}

std::atomic_ref<std::uint64_t> ShmSegment::flag(int rank, Flag which) const noexcept {
  const std::size_t line = kHeaderLines + kLinesPerRank * static_cast<std::size_t>(rank) +
                           static_cast<std::size_t>(which);
  return std::atomic_ref<std::uint64_t>(*reinterpret_cast<std::uint64_t*>(base_ + line * kLine));
}

std::atomic_ref<std::uint32_t> ShmSegment::word(std::size_t line,
                                                std::size_t offset) const noexcept {
  return std::atomic_ref<std::uint32_t>(
      *reinterpret_cast<std::uint32_t*>(base_ + line * kLine + offset));
}

std::atomic_ref<std::uint64_t> ShmSegment::signature_word(int rank,
                                                          std::uint64_t seq) const noexcept {
  // The second and third words of the rank's pid line, by the round's buffer.
  const std::size_t line = kHeaderLines + kLinesPerRank * static_cast<std::size_t>(rank);
  const std::size_t offset = sizeof(std::uint64_t) * (1 + seq % 2);
  return std::atomic_ref<std::uint64_t>(
      *reinterpret_cast<std::uint64_t*>(base_ + line * kLine + offset));
}

void ShmSegment::set_signature(std::uint64_t seq, std::uint64_t signature) noexcept {
  signature_word(rank_, seq).store(signature, std::memory_order_relaxed);  // `post` releases it
}

std::uint64_t ShmSegment::signature(int rank, std::uint64_t seq) const noexcept {
  return signature_word(rank, seq).load(std::memory_order_relaxed);  // after an acquiring wait
}

bool ShmSegment::reached(Flag which, int rank, std::uint64_t seq) const noexcept {
  if (rank >= 0) {
    return flag(rank, which).load(std::memory_order_acquire) >= seq;
  }
  for (int r = 0; r < ranks_; ++r) {
    if (flag(r, which).load(std::memory_order_acquire) < seq) {
      return false;
    }
  }
  return true;
}

void ShmSegment::wake_all() const noexcept {
  auto futex_word = word(kFutexLine, 0);
  futex_word.fetch_add(1);
  futex(reinterpret_cast<std::uint32_t*>(base_ + kFutexLine * kLine), FUTEX_WAKE, INT_MAX, nullptr);
}

void ShmSegment::post(Flag which, std::uint64_t seq) noexcept {
  flag(rank_, which).store(seq, std::memory_order_release);
  // Note [Posting to sleepers]: a read-modify-write of the sleeper count, not a fence and a load.
  if (word(kSleepersLine, 0).fetch_add(0, std::memory_order_acq_rel) != 0) {
    wake_all();
  }
}

void ShmSegment::abort(int by_rank) noexcept {
  std::uint32_t expected = 0;
  word(kAbortLine, 0).compare_exchange_strong(expected, static_cast<std::uint32_t>(by_rank + 1));
  wake_all();
}

void ShmSegment::check_health(Flag which, int rank, std::uint64_t seq, Clock::time_point deadline,
                              const CommContext& context) const {
  if (const std::uint32_t by = word(kAbortLine, 0).load(); by != 0) {
    // A rank that aborts at its deadline wakes the others at theirs: past it, this rank timed
    // out as well, and says so as its own watchdog would have (Note [Failing an aborted
    // collective]).
    COHORT_CHECK(context.aborted() || Clock::now() < deadline, TimeoutError,
                 "waited past the deadline for " + waited_for(rank, context) + " on " +
                     context.describe() + ", which its rank " + std::to_string(by - 1) +
                     " then aborted");
    // The rank that aborted may have found a mismatch (it then stopped at this round, its
    // signature posted): say what it called, since its own report may never be readable here
    // (the store's host can be gone by then).
    const int aborter = static_cast<int>(by) - 1;
    std::string mismatch;
    if (aborter != rank_ && aborter < ranks_ &&
        flag(aborter, Flag::arrived).load(std::memory_order_acquire) >= seq) {
      const std::uint64_t theirs = signature(aborter, seq);
      const std::uint64_t mine = signature(rank_, seq);
      if (theirs != mine) {
        mismatch = ", which had called " + describe_signature(theirs) + " where rank " +
                   std::to_string(context.global_rank(rank_)) + " called " +
                   describe_signature(mine);
      }
    }
    COHORT_FAIL(Error,
                context.describe() + " was aborted" +
                    (context.aborted() ? ": " + context.abort_reason()
                                       : " by its rank " + std::to_string(aborter) + mismatch));
  }
  COHORT_CHECK(!context.aborted(), Error,
               context.describe() + " was aborted: " + context.abort_reason());
  const pid_t self = getpid();
  for (int r = rank >= 0 ? rank : 0; r < (rank >= 0 ? rank + 1 : ranks_); ++r) {
    const auto pid = static_cast<pid_t>(flag(r, Flag{0}).load(std::memory_order_relaxed));
    if (pid != self && flag(r, which).load(std::memory_order_acquire) < seq && process_ended(pid)) {
      COHORT_FAIL(Error, "rank " + std::to_string(context.global_rank(r)) + " (process " +
                             std::to_string(pid) +
                             " on this host) exited in the middle of a "
                             "collective");
    }
  }
}

void ShmSegment::wait(Flag which, int rank, std::uint64_t seq, Clock::time_point deadline,
                      const CommContext& context) const {
  if (reached(which, rank, seq)) {
    return;
  }
  for (int i = 0; i < spin_; ++i) {
    cpu_relax();
    if (reached(which, rank, seq)) {
      return;
    }
  }
  const auto yield_until = Clock::now() + yield_for_;
  while (Clock::now() < yield_until) {
    sched_yield();
    if (reached(which, rank, seq)) {
      return;
    }
  }
  auto sleepers = word(kSleepersLine, 0);
  auto futex_word = word(kFutexLine, 0);
  auto* futex_address = reinterpret_cast<std::uint32_t*>(base_ + kFutexLine * kLine);
  auto next_health = Clock::now();
  while (true) {
    const auto now = Clock::now();
    if (now >= next_health) {
      check_health(which, rank, seq, deadline, context);
      COHORT_CHECK(now < deadline + kGrace, TimeoutError,
                   "waited past the deadline for " + waited_for(rank, context) + " on " +
                       context.describe());
      next_health = now + kHealthEvery;
    }
    // Note [Posting to sleepers]
    // A poster stores its flag and then updates the sleeper count; a waiter updates the count and
    // then reads the flags. Both are read-modify-writes of one word, so one of them comes first in
    // that word's order: if the waiter's, the poster reads a non-zero count and wakes it; if the
    // poster's, the waiter's update reads from it (acquire after release) and so sees the flag.
    // (Fences would do the same, but ThreadSanitizer cannot follow fences.)
    sleepers.fetch_add(1, std::memory_order_acq_rel);
    const std::uint32_t seen = futex_word.load();
    if (reached(which, rank, seq)) {
      sleepers.fetch_sub(1);
      return;
    }
    const timespec slice{0, std::chrono::nanoseconds(kSleepSlice).count()};
    futex(futex_address, FUTEX_WAIT, seen, &slice);
    sleepers.fetch_sub(1);
    if (reached(which, rank, seq)) {
      return;
    }
  }
}

}  // namespace cohort::detail
