#include "line_prefixer.hpp"

namespace cohortrun {

void LinePrefixer::emit(std::string_view piece, bool ends_line, std::string& out) {
  if (at_line_start_) out += prefix_;
  out += piece;
  if (ends_line) out += '\n';
  at_line_start_ = ends_line;
}

std::string LinePrefixer::feed(std::string_view bytes) {
  std::string out;
  while (!bytes.empty()) {
    const std::size_t newline = bytes.find('\n');
    if (newline == std::string_view::npos) {
      pending_ += bytes;
      break;
    }
    pending_ += bytes.substr(0, newline);
    emit(pending_, true, out);
    pending_.clear();
    bytes.remove_prefix(newline + 1);
  }
  if (pending_.size() >= max_line_bytes_) {
    emit(pending_, false, out);
    pending_.clear();
  }
  return out;
}

std::string LinePrefixer::finish() {
  std::string out;
  if (!pending_.empty() || !at_line_start_) emit(pending_, true, out);
  pending_.clear();
  return out;
}

}  // namespace cohortrun
