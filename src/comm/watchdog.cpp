#include "comm/watchdog.hpp"

#include "comm/failure_aware_store.hpp"

#include <cohort/core/env.hpp>
#include <cohort/core/error.hpp>
#include <cohort/core/logging.hpp>

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <thread>
#include <utility>
#include <vector>

namespace cohort::detail {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kTick = std::chrono::milliseconds(50);
constexpr auto kPeerCheckEvery = std::chrono::milliseconds(100);
constexpr auto kHeartbeatEvery = std::chrono::milliseconds(1000);
constexpr const char* kProgressRequestKey = "progress_request";

/// Note [One report per failure]: `$TMPDIR/cohort-<run id>/rank<R>-pid<P>.collectives.txt`.
/// The pid tells apart the attempts of one run under restarts, and processes whose ranks are
/// threads (run_local) under one run id.
std::string report_file(const std::string& run_id, int rank) {
  std::string folder = "cohort-";
  for (const char c : run_id.empty() ? std::string("run") : run_id) {
    const bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                       c == '-' || c == '_' || c == '.';
    folder += plain ? c : '_';
  }
  const std::filesystem::path root(env::text(env::kTmpDir).value_or("/tmp"));
  return (root / folder /
          ("rank" + std::to_string(rank) + "-pid" + std::to_string(::getpid()) +
           ".collectives.txt"))
      .string();
}

}  // namespace

void publish_progress(CommContext& context) noexcept {
  const auto watchdog = context.watchdog.lock();
  write_progress(context, watchdog ? watchdog->answered_request() : 0);
}

// Note [One report per failure]
// One rank's failure used to flood every log: a killed rank of four gave 1,265 lines, each
// surviving rank printing the failure about six times (an error, a warning for each communicator
// it aborted, a warning for each block of memory and each stream freed while unwinding) and each
// copy of the error carrying the 64 collectives of the flight recorder. Now each rank reports one
// failure once:
// - the error of a failed collective is a few lines: the rank, the collective and how long it
//   ran, the communicator, the cause and which ranks it waited for (diagnose_stragglers), then
//   where this rank's recent collectives are, then what to check;
// - the recent collectives of every communicator of the rank go to one file, written once, at
//   the rank's first failure, as of the instant of that failure
//   ($TMPDIR/cohort-<run id>/rank<R>-pid<P>.collectives.txt; Watchdog::write_report);
// - the rank's first failure is logged once, as an error where this rank saw it fail and as a
//   warning where it learnt of another rank's; the aborts that follow from it, and later
//   failures, are logged at debug level only (CommContext::abort's `reported`), and so are the
//   stream failures that memory and DataParallel meet while the error unwinds.
// tests/comm/test_comm_failure_report.cpp holds a SIGKILL of one rank of four to 60 lines.

namespace {

/// `cause` without the "cohort: " that begins every cohort error, which inside another error
/// only repeats itself.
std::string without_prefix(const std::string& cause) {
  constexpr std::string_view kPrefix = "cohort: ";
  return cause.starts_with(kPrefix) ? cause.substr(kPrefix.size()) : cause;
}

/// `work` as failed at `now` (Note [One clock for a collective]).
CollectiveRecord failed_at(WorkState& work, Clock::time_point now) {
  CollectiveRecord record = work.record_at(now);
  record.state = CollectiveRecord::State::failed;
  record.duration_ms = std::chrono::duration<double, std::milli>(now - work.issued_at()).count();
  return record;
}

/// `text` as a finished sentence: trailing spaces dropped, a full stop added if it has none.
std::string sentence(std::string text) {
  while (!text.empty() && text.back() == ' ') text.pop_back();
  if (!text.empty() && text.back() != '.') text += '.';
  return text;
}

/// The line of an error that says where the rank's recent collectives are.
std::string report_line(const CommContext& context, const std::string& path) {
  const std::string where = path.empty() ? "in the log, as no file could be written" : path;
  return "Recent collectives of rank " + std::to_string(context.global_rank(context.rank())) +
         " (" + versions_line(context) + "): " + where;
}

constexpr const char* kWhatToCheck =
    "What to check: the logs of the ranks named above; that every rank issues the same "
    "collectives in the same order (COHORT_DEBUG_COLLECTIVES=1 checks it); COHORT_TIMEOUT for "
    "steps that are legitimately slow.";

}  // namespace

void fail_collective(CommContext& context, WorkState& work, bool timed_out,
                     const std::string& cause) noexcept {
  try {
    if (work.finished()) {  // not done(): that would poll a probe, which may be our caller
      return;
    }
    publish_progress(context);
    // Note [One clock for a collective]: the failure's instant, in the error and the recorder.
    const auto now = work.failure_instant(Clock::now());
    const CollectiveRecord record = failed_at(work, now);
    std::string what = "rank " + std::to_string(context.global_rank(context.rank())) + ": " +
                       record.describe() + " on " + context.describe();
    // Past its deadline, a collective that its backend fails (an abort caused by another rank's
    // timeout) timed out too: the caller gets a TimeoutError whichever thread fails it first.
    const bool past_deadline = !timed_out && now >= work.deadline();
    const std::string within =
        ": it did not complete within " + std::to_string(context.timeout().count()) + " ms";
    if (timed_out) {
      what += within + ". ";
    } else if (past_deadline) {
      what += within + ", and then failed: " + without_prefix(cause) + ". ";
    } else {
      what += ": " + without_prefix(cause) + ". ";
    }
    const auto watchdog = context.watchdog.lock();
    std::optional<std::string> earlier;
    if (watchdog) {
      earlier = watchdog->published_failure();
      if (earlier) {
        what += "It follows an earlier failure: " + *earlier + " ";
      }
    }
    // Note [Failing an aborted collective]
    // A collective on a communicator aborted here, or one that fails after another rank
    // published its failure, has its cause said already: in the abort's reason, or in the
    // earlier failure (which names the ranks that had not arrived, if that was it). Asking every
    // rank for its progress again would only wait, up to 1.5 s, for ranks that may be gone or
    // whose communicators were aborted (they no longer answer). Shared memory wakes every rank's
    // waits at once when one rank aborts the segment, so there this was most of a failure's time.
    // (Across nodes, the parts of a hierarchical collective: Note [Failing expired collectives
    // in order].)
    if (context.aborted()) {
      const std::string reason = context.abort_reason();
      if (cause.find(reason) == std::string::npos) {
        what += "The communicator was aborted: " + reason + " ";
      }
    } else if (!earlier) {
      what += diagnose_stragglers(context, record.sequence, watchdog.get());
    }
    // The recorder says the collective failed at `now` before the report is written from it
    // (WorkState::fail says it again, with the same instant).
    context.recorder->finished(record.sequence, CollectiveRecord::State::failed, now);
    const std::string path = watchdog ? watchdog->write_report(context, now) : "";
    const std::string details = what + "\n" + report_line(context, path) + "\n" + kWhatToCheck;
    std::exception_ptr error;
    try {
      if (timed_out || past_deadline) {
        COHORT_FAIL(TimeoutError, details);
      } else {
        COHORT_FAIL(Error, details);
      }
    } catch (...) {
      error = std::current_exception();
    }
    // Note [Aborted before the waiter wakes]
    // The caller that this failure wakes must find the communicator aborted already: a check of
    // aborted(), or its next collective, must not see a communicator that is still usable while
    // ncclCommAbort runs (it takes the backend's lock, for seconds on NCCL: a collective issued
    // then waited for it, 3.3 s on an H200, before failing). So the communicator is marked
    // aborted first, the work failed next, and the backend's abort runs after. Marked, it is
    // aborted to the end even if the work finished meanwhile (at its very deadline).
    const bool marked = context.mark_aborted(what, /*reported=*/true);
    const bool failed_here = work.fail(error, now);
    if (failed_here) {
      // Note [One report per failure]: the rank's first failure is its error; the rest follow.
      if (!watchdog || watchdog->first_report()) {
        COHORT_LOG(error) << sentence(what) << " Recent collectives: "
                          << (path.empty() ? std::string("in the log") : path);
      } else {
        COHORT_LOG(debug) << what;
      }
      if (watchdog) {
        watchdog->report_failure(what);  // publishes, then aborts this rank's other communicators
      }
    }
    if (marked || failed_here) {
      context.finish_abort();
      context.fail_in_flight(error);
    }
  } catch (...) {
    work.fail(std::current_exception());
  }
}

Watchdog::Watchdog(std::unique_ptr<Store> world_store, int global_rank, std::string run_id)
    : store_(std::move(world_store)),
      global_rank_(global_rank),
      report_path_(report_file(run_id, global_rank)) {}

std::shared_ptr<Watchdog> Watchdog::start(std::unique_ptr<Store> world_store, int global_rank,
                                          std::function<void()> bind_thread, std::string run_id) {
  auto watchdog = std::shared_ptr<Watchdog>(
      new Watchdog(std::move(world_store), global_rank, std::move(run_id)));
  watchdog->thread_ =
      std::thread(&Watchdog::run, std::weak_ptr<Watchdog>(watchdog), std::move(bind_thread));
  return watchdog;
}

Watchdog::~Watchdog() {
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (!thread_.joinable()) {
    return;  // stopped by stop()
  }
  if (thread_.get_id() == std::this_thread::get_id()) {
    thread_.detach();  // the last reference went away on the watchdog's own thread
  } else {
    thread_.join();  // it holds no reference now, so it ends at its next look
  }
}

void Watchdog::stop() noexcept {
  std::unique_lock<std::mutex> lock(mutex_);
  stopping_ = true;
  wake_.notify_all();
  if (!thread_.joinable()) {
    return;  // stopped before
  }
  if (thread_.get_id() == std::this_thread::get_id()) {
    thread_.detach();  // the last reference went away on the watchdog's own thread
    return;
  }
  const bool ended = wake_.wait_for(lock, kStopPatience, [&] { return ended_; });
  lock.unlock();
  if (ended) {
    thread_.join();
  } else {
    thread_.detach();  // stuck in a store call: it holds the watchdog until it returns
  }
}

void Watchdog::add(const std::shared_ptr<CommContext>& context) {
  const std::lock_guard<std::mutex> lock(mutex_);
  contexts_.push_back(context);
}

std::vector<std::shared_ptr<CommContext>> Watchdog::contexts() {
  const std::lock_guard<std::mutex> lock(mutex_);
  std::vector<std::shared_ptr<CommContext>> alive;
  std::erase_if(contexts_, [&](const std::weak_ptr<CommContext>& weak) {
    auto context = weak.lock();
    const bool expired = context == nullptr;
    if (!expired) {
      alive.push_back(std::move(context));
    }
    return expired;
  });
  return alive;
}

void Watchdog::report_failure(const std::string& message) noexcept {
  {
    const std::lock_guard<std::mutex> lock(store_mutex_);
    if (!publish_world_failure(*store_, message)) {
      COHORT_LOG(warn) << "could not publish a failure to the other ranks";
    }
  }
  for (const auto& context : contexts()) {
    context->abort("another communicator of this rank failed: " + message, /*reported=*/true);
  }
}

bool Watchdog::first_report() noexcept {
  return !reported_.exchange(true);
}

std::string Watchdog::write_report(const CommContext& failing, Clock::time_point now) {
  const std::lock_guard<std::mutex> lock(report_mutex_);
  if (report_written_) {
    return report_result_;
  }
  report_written_ = true;
  std::vector<std::shared_ptr<CommContext>> watched = contexts();
  std::string text = "Recent collectives of rank " + std::to_string(global_rank_) + " (pid " +
                     std::to_string(::getpid()) +
                     "), as of its first failure, oldest first; each communicator numbers its "
                     "own.\n";
  const auto add = [&](const CommContext& context) {
    text.append("\n").append(context.describe()).append(", ").append(versions_line(context));
    text.append(":\n").append(context.recorder->dump(now));
  };
  add(failing);
  for (const auto& context : watched) {
    if (context.get() != &failing) add(*context);
  }
  std::error_code error;
  const std::filesystem::path path(report_path_);
  std::filesystem::create_directories(path.parent_path(), error);
  std::ofstream out(path, std::ios::trunc);
  out << text;
  out.close();
  if (!error && out) {
    report_result_ = report_path_;
  } else {
    COHORT_LOG(error) << "could not write " << report_path_ << " ("
                      << (error ? error.message() : std::string(std::strerror(errno))) << "); "
                      << text;
  }
  return report_result_;
}

std::optional<std::string> Watchdog::published_failure() noexcept {
  try {
    const std::lock_guard<std::mutex> lock(store_mutex_);
    if (store_->check({kWorldFailureKey})) {
      return store_->get(kWorldFailureKey, std::chrono::seconds(5));
    }
  } catch (const std::exception& error) {
    COHORT_LOG(debug) << "watchdog could not read the failure key: " << error.what();
  }
  return std::nullopt;
}

std::int64_t Watchdog::request_progress() noexcept {
  try {
    const std::lock_guard<std::mutex> lock(store_mutex_);
    const std::int64_t request = store_->add(kProgressRequestKey, 1);
    answered_request_.store(std::max(answered_request_.load(), request));
    return request;
  } catch (const std::exception& error) {
    COHORT_LOG(debug) << "could not ask the other ranks for progress: " << error.what();
    return 0;
  }
}

void Watchdog::answer_progress_request() {
  std::int64_t request = 0;
  {
    const std::lock_guard<std::mutex> lock(store_mutex_);
    if (!store_->check({kProgressRequestKey})) {
      return;
    }
    request = std::stoll(store_->get(kProgressRequestKey, std::chrono::seconds(5)));
  }
  if (request > answered_request_.load()) {
    answered_request_.store(request);
    publish_all_progress();
  }
}

// Note [Failing expired collectives in order]
// A collective of a composite communicator (the hierarchical all-reduce) runs collectives of its
// parts, issued a little later and so due a little later; all may pass their deadlines within
// one tick. The earliest is failed first: it is the outer one, whose members are every rank, so
// its diagnosis names whole nodes ("node 1 (ranks 2, 3)") where a part would name one rank of
// each. The ones failed after it quote it instead of diagnosing again (fail_collective): when a
// node is cut off, each diagnosis waits 1.5 s for progress that never comes, and a second one
// pushed the store's side of a link cut from 7.6 to 9.2 s after the cut with a 6 s deadline.
//
// Note [Asking ahead of a deadline]
// A diagnosis waits up to kAnswerWait for every member to answer its request for progress, and a
// member on a node cut off from the store never answers: every such diagnosis added 1.5 s to the
// error. So once a collective is within kAnswerWait (and two ticks) of its deadline, the watchdog
// asks every rank for progress ahead, at most once per kAnswerWait. Live ranks answer within a
// tick and are asked again at the deadline, so the diagnosis still reads fresh progress; a
// member that left the early request unanswered for kAnswerWait is not waited for again. The
// cost is one store counter increment and one round of progress per kAnswerWait while a
// collective nears its deadline, which with the default deadline means only a stuck one.
std::int64_t Watchdog::settled_request() noexcept {
  const std::lock_guard<std::mutex> lock(ahead_mutex_);
  const auto now = Clock::now();
  if (now - ahead_[1].at >= kAnswerWait) return ahead_[1].number;
  return now - ahead_[0].at >= kAnswerWait ? ahead_[0].number : 0;
}

void Watchdog::check_deadlines() {
  const auto now = Clock::now();
  const auto ahead = kAnswerWait + 2 * kTick;
  std::vector<std::pair<std::shared_ptr<CommContext>, std::shared_ptr<WorkState>>> expired;
  bool due_soon = false;
  for (const auto& context : contexts()) {
    // A probe that cannot tell (a sticky CUDA error) will never tell: fail the work now, publish
    // it and abort, instead of logging the same error every tick until the deadline.
    const auto probe_failed = [&context](WorkState& work, const std::exception& error) {
      fail_collective(*context, work, /*timed_out=*/false,
                      std::string("its completion could not be checked: ") + error.what());
    };
    for (const auto& work : context->in_flight(probe_failed)) {
      if (work->done()) {
        continue;
      }
      if (now >= work->deadline()) {
        expired.emplace_back(context, work);
      } else if (now + ahead >= work->deadline()) {
        due_soon = true;
      }
    }
  }
  bool ask = false;
  {
    const std::lock_guard<std::mutex> lock(ahead_mutex_);
    ask = due_soon && now - ahead_[1].at >= kAnswerWait;
  }
  if (ask) {
    const std::int64_t request = request_progress();
    const std::lock_guard<std::mutex> lock(ahead_mutex_);
    ahead_[0] = ahead_[1];  // still settled when the newer one is not yet
    ahead_[1] = {request, now};
  }
  std::stable_sort(expired.begin(), expired.end(), [](const auto& a, const auto& b) {
    return a.second->deadline() < b.second->deadline();
  });
  for (const auto& [context, work] : expired) {
    fail_collective(*context, *work, /*timed_out=*/true, "");
  }
}

void Watchdog::check_peer_failure() {
  if (failure_handled_) {
    return;
  }
  const auto failure = published_failure();
  if (!failure) {
    return;
  }
  failure_handled_ = true;
  // Note [One report per failure]: every communicator aborted first, the collectives in flight
  // marked failed at one instant, the report written from that, then each work failed with an
  // error that names it.
  const auto now = Clock::now();
  std::vector<std::pair<std::shared_ptr<CommContext>, std::vector<std::shared_ptr<WorkState>>>>
      aborted;
  for (const auto& context : contexts()) {
    if (context->abort("a rank failed: " + *failure, /*reported=*/true)) {
      aborted.emplace_back(context, context->in_flight());
      for (const auto& work : aborted.back().second) {
        context->recorder->finished(work->record().sequence, CollectiveRecord::State::failed,
                                    work->failure_instant(now));
      }
    }
  }
  if (aborted.empty()) {
    return;
  }
  const std::string path = write_report(*aborted.front().first, now);
  if (first_report()) {
    COHORT_LOG(warn) << "rank " << global_rank_ << " aborted its communicators because a rank "
                     << "failed: " << sentence(*failure) << " Recent collectives: "
                     << (path.empty() ? std::string("in the log") : path);
  }
  for (const auto& [context, works] : aborted) {
    for (const auto& work : works) {
      const auto at = work->failure_instant(now);
      std::exception_ptr error;
      try {
        COHORT_FAIL(Error, "rank " + std::to_string(global_rank_) + ": " +
                               failed_at(*work, at).describe() + " on " + context->describe() +
                               ": it was aborted because a rank failed: " + sentence(*failure) +
                               "\n" + report_line(*context, path) + "\n" + kWhatToCheck);
      } catch (...) {
        error = std::current_exception();
      }
      work->fail(error, at);
    }
  }
}

void Watchdog::publish_all_progress() {
  for (const auto& context : contexts()) {
    if (!context->aborted()) {
      publish_progress(*context);
    }
  }
}

// Note [Watchdog device]
// A thread's CUDA device is 0 until it sets one, and since CUDA 12 setting a device creates its
// primary context. The watchdog's thread polls completion events of its rank's device; each
// call binds the event's device for its duration (CudaDeviceScope) and then restores the
// thread's device, 0, which would create a context on GPU 0 in every rank's process (hundreds of
// MiB each, on the GPU of rank 0). So the thread binds its rank's device once, before anything
// else: the scopes then find it current and change nothing. NCCL's own threads bind their
// device themselves. test_comm_gpu's EachRankCreatesAContextOnItsOwnGpuOnly checks it where two
// GPUs are present.
//
// Note [Watchdog and graph capture]
// The watchdog polls the completion of collectives in flight every tick (cudaEventQuery, and
// NCCL's own event queries inside ncclCommGetAsyncError). While another thread records a CUDA
// graph in cudaStreamCaptureModeGlobal, the default of most frameworks, such a query from a
// thread in the default mode fails with cudaErrorStreamCaptureUnsupported and invalidates that
// capture; read as a sticky fault, it failed the collective, published the failure and aborted
// every rank, the first time a program captured its forward and backward as cohort's own refusal
// message advises (Note [Graph capture]). So the thread, once its device is bound, switches
// itself to cudaStreamCaptureModeRelaxed for good (prepare_watchdog_thread, nccl/communicator.cpp):
// its queries touch nothing a capture records, and in relaxed mode CUDA allows them. Every query
// cohort makes on other threads does the same for its duration, and a capture status that comes
// back all the same is read as "not ready" (Note [Queries during a capture] in
// cohort/core/detail/query_status.hpp). test_comm_gpu's AGlobalCaptureBesideACollectiveInFlight
// checks it: a capture spanning several ticks instantiates, the collective completes, nothing
// is aborted. PyTorch's watchdog does the same for the same reason (pytorch#104555).
void Watchdog::run(const std::weak_ptr<Watchdog>& weak, const std::function<void()>& bind_thread) {
  if (bind_thread) {
    try {
      bind_thread();
    } catch (const std::exception& error) {
      COHORT_LOG(error) << "watchdog: cannot bind its thread to the rank's device: "
                        << error.what();
    }
  }
  while (true) {
    const std::shared_ptr<Watchdog> self = weak.lock();
    if (!self) {
      return;  // touches nothing of the watchdog after this: it is gone
    }
    if (!self->tick()) {
      const std::lock_guard<std::mutex> lock(self->mutex_);
      self->ended_ = true;
      self->wake_.notify_all();
      return;
    }
  }
}

bool Watchdog::tick() {
  {
    std::unique_lock<std::mutex> lock(mutex_);
    wake_.wait_for(lock, kTick, [&] { return stopping_; });
    if (stopping_) {
      return false;
    }
  }
  try {
    check_deadlines();
    const auto now = Clock::now();
    if (now >= next_peer_check_) {
      check_peer_failure();
      answer_progress_request();
      next_peer_check_ = now + kPeerCheckEvery;
    }
    if (now >= next_heartbeat_) {
      publish_all_progress();
      next_heartbeat_ = now + kHeartbeatEvery;
    }
  } catch (const std::exception& error) {
    // With nothing in flight no one depends on the store: it going away is how a run ends when
    // the rank that hosts it (rank 0) exits first, and no reason to print an error.
    bool busy = false;
    for (const auto& context : contexts()) {
      try {
        busy = busy || !context->in_flight().empty();
      } catch (const std::exception&) {
        busy = true;
      }
    }
    if (busy) {
      COHORT_LOG(error) << "watchdog: " << error.what();
    } else {
      COHORT_LOG(debug) << "watchdog, with nothing in flight: " << error.what();
    }
  }
  return true;
}

}  // namespace cohort::detail
