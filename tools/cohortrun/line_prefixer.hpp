#pragma once

/// @file
/// Splits a child's output into lines and puts "[rank R] " before each.

#include <cstddef>
#include <string>
#include <string_view>

namespace cohortrun {

/// Collects bytes as they arrive and hands back only whole lines, each prefixed, so that lines of
/// different ranks never mix. A line longer than `max_line_bytes` is passed on in pieces (the
/// prefix only before the first) rather than held without bound.
class LinePrefixer {
 public:
  explicit LinePrefixer(std::string prefix, std::size_t max_line_bytes = std::size_t{64} << 10)
      : prefix_(std::move(prefix)), max_line_bytes_(max_line_bytes) {}

  /// Takes `bytes`; returns the text ready to write (whole lines, prefixed), possibly empty.
  std::string feed(std::string_view bytes);

  /// At end of input: the unfinished last line, prefixed and ended with a newline, or empty.
  std::string finish();

 private:
  void emit(std::string_view piece, bool ends_line, std::string& out);

  std::string prefix_;
  std::size_t max_line_bytes_;
  std::string pending_;
  bool at_line_start_ = true;
};

}  // namespace cohortrun
