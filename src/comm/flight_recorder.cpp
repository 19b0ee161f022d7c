#include "comm/flight_recorder.hpp"

#include "comm/call_signature.hpp"

#include <algorithm>
#include <sstream>

namespace cohort::detail {

void FlightRecorder::issued(const CollectiveRecord& record, Clock::time_point at) {
  const std::lock_guard<std::mutex> lock(mutex_);
  Entry& entry = entries_[record.sequence % kCapacity];
  entry.record = record;
  entry.record.state = CollectiveRecord::State::issued;
  entry.issued_at = at;
  entry.used = true;
}

void FlightRecorder::finished(std::uint64_t sequence, CollectiveRecord::State state,
                              Clock::time_point at) {
  const std::lock_guard<std::mutex> lock(mutex_);
  Entry& entry = entries_[sequence % kCapacity];
  if (entry.used && entry.record.sequence == sequence) {
    entry.record.state = state;
    entry.finished_at = at;
  }
  if (sequence > last_finished_.load()) {
    last_finished_.store(sequence);
  }
}

std::pair<std::uint64_t, std::uint64_t> FlightRecorder::oldest_unfinished() const {
  std::pair<std::uint64_t, std::uint64_t> oldest{0, 0};
  const std::lock_guard<std::mutex> lock(mutex_);
  for (const Entry& entry : entries_) {
    if (entry.used && entry.record.state == CollectiveRecord::State::issued &&
        (oldest.first == 0 || entry.record.sequence < oldest.first)) {
      oldest = {entry.record.sequence, call_signature(entry.record)};
    }
  }
  return oldest;
}

std::optional<std::uint64_t> FlightRecorder::signature(std::uint64_t sequence) const {
  const std::lock_guard<std::mutex> lock(mutex_);
  const Entry& entry = entries_[sequence % kCapacity];
  if (entry.used && entry.record.sequence == sequence) {
    return call_signature(entry.record);
  }
  return std::nullopt;
}

std::vector<CollectiveRecord> FlightRecorder::snapshot(Clock::time_point now) const {
  std::vector<CollectiveRecord> records;
  const std::lock_guard<std::mutex> lock(mutex_);
  for (const Entry& entry : entries_) {
    if (!entry.used) {
      continue;
    }
    CollectiveRecord record = entry.record;
    record.issued_seconds_ago = std::chrono::duration<double>(now - entry.issued_at).count();
    if (record.state != CollectiveRecord::State::issued) {
      record.duration_ms =
          std::chrono::duration<double, std::milli>(entry.finished_at - entry.issued_at).count();
    }
    records.push_back(record);
  }
  std::sort(records.begin(), records.end(),
            [](const auto& a, const auto& b) { return a.sequence < b.sequence; });
  return records;
}

std::string FlightRecorder::dump(Clock::time_point now, const std::string& indent) const {
  std::string text;
  for (const auto& record : snapshot(now)) {
    text += indent + record.describe() + "\n";
  }
  return text.empty() ? indent + "(none)\n" : text;
}

}  // namespace cohort::detail
