#pragma once

// Note [Watchdog]
// One thread per World watches every collective in flight on the world's communicators:
// - a collective past its deadline is diagnosed (which ranks had not arrived, from the progress
//   each rank publishes to the store), its communicator aborted, and the failure published under
//   the world's "failure" key;
// - a failure another rank published aborts this rank's communicators too, so every rank fails
//   fast instead of waiting for its own deadline;
// - once a second it publishes this rank's progress on each communicator (issued and finished
//   sequence numbers, wall time): the heartbeat that the diagnosis reads;
// - a rank diagnosing a failure asks every rank for fresh progress (a counter in the store); each
//   watchdog answers within a tick, tagging its progress with the request's number, so the
//   diagnosis never blames a rank for progress it had not yet published, and a rank that does not
//   answer at all is named as not responding (asked ahead of the deadline too: Note [Asking
//   ahead of a deadline] in watchdog.cpp).
// The watchdog uses its own store connection, so a thread blocked on the store never stalls it.
// Its room: this file and watchdog.cpp (the thread, and failing a collective), diagnosis.hpp
// (publishing progress and naming the ranks a collective waited for).

#include "comm/context.hpp"
#include "comm/diagnosis.hpp"

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace cohort::detail {

class Watchdog final : public std::enable_shared_from_this<Watchdog>, public ProgressRequests {
 public:
  /// Starts the watchdog's thread. The thread holds the watchdog only while it works, so the
  /// last owner may let go at any time, even from a thread the watchdog is calling into.
  /// `bind_thread`, when given, runs first on the watchdog's thread: on a GPU rank it binds the
  /// rank's device, so that the completion probes the thread calls (cudaEventQuery, and the
  /// cudaEventDestroy of a pooled event) create no context on device 0 (Note [Watchdog device]),
  /// and puts the thread in relaxed graph-capture mode (Note [Watchdog and graph capture]).
  /// `run_id` names the folder of the rank's report of recent collectives (Note [One report per
  /// failure] in watchdog.cpp).
  static std::shared_ptr<Watchdog> start(std::unique_ptr<Store> world_store, int global_rank,
                                         std::function<void()> bind_thread = nullptr,
                                         std::string run_id = "");
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  void add(const std::shared_ptr<CommContext>& context);

  /// Ends the watchdog's thread and waits for it to end its tick, at most `kStopPatience` (a
  /// store call in progress may take that long); unless called on that thread. The World calls
  /// it when it is destroyed, so that no thread of a World outlives it: the thread's own
  /// reference, held while it ticks, would otherwise be the last one about half the time, and the
  /// thread would go on to destroy the watchdog's store after the World, possibly after `main`
  /// (Note [Host worker teardown]). A thread still busy after that is left to end on its own.
  void stop() noexcept;
  static constexpr std::chrono::milliseconds kStopPatience{6000};

  /// Publishes `message` as the world's failure (the first one published wins) and aborts every
  /// communicator of this rank.
  void report_failure(const std::string& message) noexcept;

  /// The failure published by any rank, if any (never blocks on the store for long).
  std::optional<std::string> published_failure() noexcept;

  /// Writes the recent collectives of every communicator of this rank (and of `failing`, if the
  /// watchdog does not watch it) to this rank's report file, as of `now`, the first time it is
  /// called; returns the file's path then and after, or "" when it could not be written (the log
  /// then has them). Note [One report per failure] in watchdog.cpp.
  std::string write_report(const CommContext& failing, std::chrono::steady_clock::time_point now);
  /// Where this rank's report goes: `$TMPDIR/cohort-<run id>/rank<R>-pid<P>.collectives.txt`.
  const std::string& report_path() const noexcept { return report_path_; }

  /// True for the first failure this rank reports, false after: later ones are consequences of
  /// it, logged at debug level only (Note [One report per failure]).
  bool first_report() noexcept;

  /// Asks every rank's watchdog to publish its progress now; returns the request's number, which
  /// their answers carry (see `answered_request`).
  std::int64_t request_progress() noexcept override;
  /// Publishes progress on every communicator if a request came since the last answer. Called
  /// by the watchdog's thread, and by a diagnosis waiting for answers (ranks diagnosing at the
  /// same moment must answer one another).
  void answer_progress_request() override;
  /// The last progress request this rank answered.
  std::int64_t answered_request() const noexcept override { return answered_request_.load(); }
  /// The request this rank made ahead of a deadline (Note [Asking ahead of a deadline]) if it
  /// was made at least kAnswerWait ago, else 0: a member that has not answered it is silent.
  std::int64_t settled_request() noexcept override;

 private:
  Watchdog(std::unique_ptr<Store> world_store, int global_rank, std::string run_id);
  static void run(const std::weak_ptr<Watchdog>& weak, const std::function<void()>& bind_thread);
  /// One round: waits a tick, then checks; false once stopping.
  bool tick();
  void check_deadlines();
  void check_peer_failure();
  void publish_all_progress();
  std::vector<std::shared_ptr<CommContext>> contexts();

  std::unique_ptr<Store> store_;
  std::mutex store_mutex_;
  int global_rank_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  bool ended_ = false;  // the thread left its loop (it holds a reference until it has said so)
  bool failure_handled_ = false;
  std::chrono::steady_clock::time_point next_peer_check_{};
  std::chrono::steady_clock::time_point next_heartbeat_{};
  std::atomic<std::int64_t> answered_request_{0};
  struct Request {
    std::int64_t number = 0;
    std::chrono::steady_clock::time_point at{};
  };
  std::mutex ahead_mutex_;
  Request ahead_[2];  // the last two requests made ahead of a deadline, older first
  std::vector<std::weak_ptr<CommContext>> contexts_;
  std::string report_path_;
  std::mutex report_mutex_;
  bool report_written_ = false;  // guarded by report_mutex_
  std::string report_result_;    // guarded by report_mutex_: the path, or "" when it failed
  std::atomic<bool> reported_{false};
  std::thread thread_;
};

/// Publishes this rank's progress on `context`, tagged with the last request for progress its
/// watchdog answered (Note [Watchdog]). Never throws.
void publish_progress(CommContext& context) noexcept;

/// Fails `work` (and every other collective in flight on `context`) after a timeout
/// (`timed_out`) or a backend error (`cause`): diagnoses the stragglers (unless the communicator
/// was aborted, whose reason says why), aborts the communicator, publishes the failure through
/// the watchdog. The first failure of a work wins.
void fail_collective(CommContext& context, WorkState& work, bool timed_out,
                     const std::string& cause) noexcept;

}  // namespace cohort::detail
