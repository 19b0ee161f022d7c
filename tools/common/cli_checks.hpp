#pragma once

/// @file
/// Checks of numeric flags shared by cohort's programs (cohortrun, cohort-store, cohort-doctor,
/// the benchmarks, train_mlp): every value is parsed as a finite number and refused outside its
/// range, with the range in words ("--lr: 0 is out of range: it must be above 0").
/// CLI11's own `Range` and `PositiveNumber` accept NaN and print bounds with `std::to_string`, a
/// 309-digit number for the largest double.

#include <CLI/CLI.hpp>

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <stdexcept>
#include <string>
#include <string_view>

namespace cohort::cli {

/// "65536", "0.5", "1e+12": a bound as a person writes it.
inline std::string words(double value) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.10g", value);
  return text;
}

/// What the bounds allow, in words: "from 1 to 65536", "at least 0", "above 0".
inline std::string range_words(double min, bool min_included, double max) {
  const bool bounded = max < std::numeric_limits<double>::max();
  if (!min_included) {
    return "above " + words(min) + (bounded ? " and at most " + words(max) : "");
  }
  return bounded ? "from " + words(min) + " to " + words(max) : "at least " + words(min);
}

/// A finite number within the bounds; `integer` also refuses fractions. The message names the
/// value and the range; CLI11 puts the flag's name in front.
inline CLI::Validator number_in(double min, bool min_included, double max, bool integer) {
  const std::string allowed = range_words(min, min_included, max);
  return CLI::Validator(
      [=](const std::string& text) -> std::string {
        const char* begin = text.c_str();
        char* end = nullptr;
        const double value = std::strtod(begin, &end);
        if (end == begin || *end != '\0' || !std::isfinite(value)) {
          return "'" + text + "' is not " + (integer ? "a whole number" : "a finite number") +
                 ": it must be " + allowed;
        }
        if (integer && value != std::floor(value)) {
          return "'" + text + "' is not a whole number: it must be " + allowed;
        }
        if (value < min || (!min_included && value == min) || value > max) {
          return text + " is out of range: it must be " + allowed;
        }
        return {};
      },
      (integer ? "INT " : "NUMBER ") + allowed);
}

/// A whole number from `min` to `max` (both included; `max` defaults to no bound).
inline CLI::Validator whole(double min, double max = std::numeric_limits<double>::max()) {
  return number_in(min, true, max, true);
}
/// A finite number from `min` to `max`, both included.
inline CLI::Validator number(double min, double max = std::numeric_limits<double>::max()) {
  return number_in(min, true, max, false);
}
/// A finite number above zero, at most `max`.
inline CLI::Validator positive(double max = std::numeric_limits<double>::max()) {
  return number_in(0.0, false, max, false);
}

/// A file the program may create or replace: not a folder, in a folder that exists and that this
/// process may write. Checked when the flags are parsed, so that a run does not end without its
/// report; the write itself is checked too (`write_file`).
inline CLI::Validator writable_file() {
  return CLI::Validator(
      [](const std::string& text) -> std::string {
        namespace fs = std::filesystem;
        if (text.empty()) {
          return "an empty path: give the file to write";
        }
        std::error_code error;
        const fs::path path(text);
        if (fs::is_directory(path, error)) {
          return "'" + text + "' is a folder: give the path of a file to write";
        }
        const fs::path parent = path.has_parent_path() ? path.parent_path() : fs::path(".");
        if (!fs::is_directory(parent, error)) {
          return "the folder '" + parent.string() + "' of '" + text + "' does not exist";
        }
        if (access(parent.c_str(), W_OK) != 0 ||
            (fs::exists(path, error) && access(path.c_str(), W_OK) != 0)) {
          return "'" + text + "' cannot be written (permission denied)";
        }
        return {};
      },
      "FILE");
}

/// Writes `bytes` to `path` and checks that every byte got there.
/// @throws std::runtime_error naming `flag` and `path` otherwise (a full disk, a folder).
inline void write_file(std::string_view flag, const std::string& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) {
    throw std::runtime_error(std::string(flag) + ": could not write '" + path +
                             "' (a folder, no permission or a full disk?)");
  }
}

}  // namespace cohort::cli
