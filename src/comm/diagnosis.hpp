#pragma once

// Which ranks a failed collective waited for: the progress each rank publishes to its
// communicator's store (Note [Watchdog]), and the diagnosis that reads it. Part of the watchdog's
// room: the watchdog publishes and answers, a failing collective diagnoses; this file knows the
// watchdog only as `ProgressRequests`, which it implements.

#include "comm/context.hpp"

#include <chrono>
#include <cstdint>
#include <string>

namespace cohort::detail {

/// How long a diagnosing rank waits for every watchdog to publish fresh progress.
inline constexpr std::chrono::milliseconds kAnswerWait{1500};

/// The requests for fresh progress that a diagnosis makes of every rank (the World's watchdog
/// serves them; Note [Watchdog]).
class ProgressRequests {
 public:
  /// Asks every rank to publish its progress now; returns the request's number (0 when the
  /// store cannot be reached).
  virtual std::int64_t request_progress() noexcept = 0;
  /// Publishes this rank's progress if a request came since the last answer.
  virtual void answer_progress_request() = 0;
  /// The last request this rank answered.
  virtual std::int64_t answered_request() const noexcept = 0;
  /// A request made ahead of a deadline at least kAnswerWait ago, else 0: a member that has not
  /// answered it is silent (Note [Asking ahead of a deadline]).
  virtual std::int64_t settled_request() noexcept = 0;

 protected:
  ~ProgressRequests() = default;
};

/// Publishes this rank's progress on `context` (issued and finished sequence, wall time, and the
/// last request for progress answered, `answered`). Never throws.
void write_progress(CommContext& context, std::int64_t answered) noexcept;

/// Reads each member's published progress, after asking every rank for fresh progress through
/// `requests` (none: what is there), and names the members that had not reached `sequence` and
/// those that did not answer. Never throws; a store that cannot be read is said so in the text.
std::string diagnose_stragglers(CommContext& context, std::uint64_t sequence,
                                ProgressRequests* requests);

}  // namespace cohort::detail
