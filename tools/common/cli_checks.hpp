#pragma once

/// @file
/// The command-line convention of cohort's programs (cohortrun, cohort-store, cohort-doctor, the
/// benchmarks, train_mlp), in one place:
///
/// - `cli::conventions(app)` before adding options: `--help` shows each option's default;
/// - `cli::parse(app, argc, argv)`: `--help` and `--version` exit 0; a usage error prints
///   "<program>: <what was wrong>", a "did you mean" for a misspelt flag, and where to read
///   more, and exits 2 (never CLI11's 105-109);
/// - `cli::usage_error` for what the program itself refuses after parsing (a flag that does not
///   apply, two that contradict), also exit 2;
/// - validators that refuse a value with the range in words ("--lr: 0 is out of range: it must
///   be above 0"): CLI11's own `Range` and `PositiveNumber` accept NaN and print bounds with
///   `std::to_string`, a 309-digit number for the largest double; `one_of` names the nearest
///   allowed value; `writable_file` checks an output path before the run.

#include <CLI/CLI.hpp>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <iostream>
#include <limits>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

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

/// Levenshtein distance between two names, for "did you mean".
inline std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

/// The candidate nearest to `text` when it is close enough to be a slip (at most a third of its
/// letters off, 3 at most), else "".
inline std::string nearest(std::string_view text, const std::vector<std::string>& candidates) {
  std::string best;
  std::size_t best_distance = std::min<std::size_t>(3, std::max<std::size_t>(1, text.size() / 3));
  for (const std::string& candidate : candidates) {
    const std::size_t distance = edit_distance(text, candidate);
    if (distance <= best_distance && (best.empty() || distance < edit_distance(text, best))) {
      best = candidate;
      best_distance = distance;
    }
  }
  return best;
}

/// One of `allowed`; the message lists them and names the nearest ("did you mean resnet50?").
inline CLI::Validator one_of(std::vector<std::string> allowed) {
  std::string list;
  for (const std::string& value : allowed) list += (list.empty() ? "" : ", ") + value;
  return CLI::Validator(
      [allowed, list](const std::string& text) -> std::string {
        if (std::find(allowed.begin(), allowed.end(), text) != allowed.end()) return {};
        const std::string guess = nearest(text, allowed);
        return "'" + text + "' is not one of " + list +
               (guess.empty() ? std::string() : " (did you mean " + guess + "?)");
      },
      "{" + list + "}");
}

/// Bytes in `text`: a whole number of bytes from 1 to 64 GiB, written plainly or with K, M or G
/// (binary: 1K is 1024) or B; nullopt otherwise.
inline std::optional<std::size_t> size_bytes(const std::string& text) {
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || !std::isfinite(value)) return std::nullopt;
  const std::string unit(end);
  double scale = 1.0;
  if (unit == "K" || unit == "k")
    scale = 1024.0;
  else if (unit == "M" || unit == "m")
    scale = 1024.0 * 1024.0;
  else if (unit == "G" || unit == "g")
    scale = 1024.0 * 1024.0 * 1024.0;
  else if (!unit.empty() && unit != "B")
    return std::nullopt;
  const double bytes = value * scale;
  if (bytes < 1.0 || bytes > 64.0 * 1024 * 1024 * 1024 || bytes != std::floor(bytes)) {
    return std::nullopt;
  }
  return static_cast<std::size_t>(bytes);
}

/// A size as `size_bytes` reads it.
inline CLI::Validator size_text() {
  return CLI::Validator(
      [](const std::string& text) -> std::string {
        return size_bytes(text) ? std::string()
                                : "'" + text +
                                      "' is not a size from 1 byte to 64G: use a whole "
                                      "number of bytes, or a number with K, M or G";
      },
      "SIZE");
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

/// `writable_file`, whose name ends in one of `extensions` (".png", ".pdf", ".svg"): the format
/// follows from it, so a name without one is refused before the run.
inline CLI::Validator writable_file_ending(std::vector<std::string> extensions) {
  std::string list;
  for (const std::string& e : extensions) list += (list.empty() ? "" : ", ") + e;
  const CLI::Validator writable = writable_file();
  return CLI::Validator(
      [extensions, list, writable](std::string& text) -> std::string {
        const std::string extension = std::filesystem::path(text).extension().string();
        if (std::find(extensions.begin(), extensions.end(), extension) == extensions.end()) {
          return "'" + text + "' does not end in " + list + " (the file's format follows from it)";
        }
        return writable(text);
      },
      "FILE(" + list + ")");
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

// ---- Parsing --------------------------------------------------------------------------------

/// CLI11's help, with each option's default at the end of its description ("[default: 20]")
/// rather than glued to the type ("INT=20").
class Formatter : public CLI::Formatter {
 public:
  std::string make_option_opts(const CLI::Option* option) const override {
    if (!option->get_option_text().empty()) return " " + option->get_option_text();
    std::string text;
    if (option->get_type_size() != 0 && !option->get_type_name().empty()) {
      text += " " + get_label(option->get_type_name());
    }
    if (option->get_required()) text += " " + get_label("REQUIRED");
    for (const CLI::Option* other : option->get_excludes()) {
      text += " (not with " + other->get_name() + ")";
    }
    return text;
  }
  std::string make_option_desc(const CLI::Option* option) const override {
    std::string text = option->get_description();
    if (option->get_type_size() != 0 && !option->get_default_str().empty()) {
      text += " [default: " + option->get_default_str() + "]";
    }
    return text;
  }
};

/// Every program's settings: `--help` shows each option's default and the type of its value.
/// Call before adding options.
inline void conventions(CLI::App& app) {
  app.option_defaults()->always_capture_default();
  app.formatter(std::make_shared<Formatter>());
  app.get_formatter()->column_width(34);
}

/// The program's name as it calls itself.
inline std::string program_name(const CLI::App& app) {
  return app.get_name().empty() ? std::string("program") : app.get_name();
}

/// "<program>: <message>" and where to read more, on stderr. Returns 2, the exit status of
/// every usage error.
inline int usage_error(const CLI::App& app, const std::string& message) {
  const std::string name = program_name(app);
  std::cerr << name << ": " << message << "\nRun '" << name << " --help' for the options.\n";
  return 2;
}

/// The flags `app` knows ("--steps", "-n"), for "did you mean".
inline std::vector<std::string> flag_names(const CLI::App& app) {
  std::vector<std::string> names;
  for (const CLI::Option* option : app.get_options()) {
    for (const std::string& name : option->get_lnames()) names.push_back("--" + name);
    for (const std::string& name : option->get_snames()) names.push_back("-" + name);
  }
  return names;
}

/// Parses `argv`. Returns nullopt when the program should go on; otherwise the exit status:
/// 0 after `--help` or `--version` (printed on stdout), 2 after a usage error (printed on stderr
/// with a "did you mean" for a flag that is a slip away from a real one).
inline std::optional<int> parse(CLI::App& app, int argc, char** argv) {
  if (app.get_name().empty() && argc > 0) {
    app.name(std::filesystem::path(argv[0]).filename().string());
  }
  try {
    app.parse(argc, argv);
    return std::nullopt;
  } catch (const CLI::CallForHelp& help) {
    return app.exit(help);
  } catch (const CLI::CallForAllHelp& help) {
    return app.exit(help);
  } catch (const CLI::CallForVersion& version) {
    return app.exit(version);
  } catch (const CLI::ExtrasError&) {
    // Name each argument nobody took, with the flag it most likely meant.
    std::string message;
    const std::vector<std::string> names = flag_names(app);
    for (const std::string& extra : app.remaining()) {
      std::string text = "unknown argument '" + extra + "'";
      if (extra.starts_with("-")) {
        const std::string flag = extra.substr(0, extra.find('='));
        const std::string guess = nearest(flag, names);
        if (!guess.empty()) text += " (did you mean " + guess + "?)";
      }
      message += (message.empty() ? "" : "; ") + text;
    }
    return usage_error(app, message.empty() ? std::string("unexpected arguments") : message);
  } catch (const CLI::ParseError& error) {
    return usage_error(app, error.what());
  }
}

/// Refuses `flags` given on the command line when they do not apply: returns the usage error's
/// status (2) naming the first one and `why`, or nullopt when none was given or `applies`.
inline std::optional<int> refuse_unless(const CLI::App& app, bool applies,
                                        std::initializer_list<const char*> flags,
                                        const std::string& why) {
  if (applies) return std::nullopt;
  for (const char* flag : flags) {
    if (app.count(flag) > 0) return usage_error(app, std::string(flag) + " " + why);
  }
  return std::nullopt;
}

}  // namespace cohort::cli
