#include <cohort/core/env.hpp>

#include <cohort/core/error.hpp>

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <sstream>
#include <system_error>

namespace cohort {

EnvLookup process_environment() {
  return [](std::string_view name) -> std::optional<std::string> {
    const char* value = std::getenv(std::string(name).c_str());
    if (value == nullptr) return std::nullopt;
    return std::string(value);
  };
}

namespace env {
namespace {

char lower(char c) {
  return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
}

bool equals_ignoring_case(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (lower(a[i]) != lower(b[i])) return false;
  }
  return true;
}

bool any_of(std::string_view value, std::initializer_list<std::string_view> words) {
  for (auto word : words) {
    if (equals_ignoring_case(value, word)) return true;
  }
  return false;
}

std::string format_number(double value) {
  std::ostringstream out;
  out << value;
  return out.str();
}

}  // namespace

std::optional<std::string> text(std::string_view name) {
  return text(process_environment(), name);
}

std::optional<std::string> text(const EnvLookup& lookup, std::string_view name) {
  auto value = lookup(name);
  if (value && value->empty()) return std::nullopt;
  return value;
}

bool parse_bool(std::string_view name, std::string_view value) {
  if (any_of(value, {"1", "true", "yes", "on"})) return true;
  if (any_of(value, {"0", "false", "no", "off"})) return false;
  COHORT_FAIL(InvalidArgument, std::string(name) + "='" + std::string(value) +
                                   "' is not a switch; set " + std::string(name) +
                                   " to 1, true, yes or on, or to 0, false, no or off");
}

bool boolean(std::string_view name, bool fallback) {
  return boolean(process_environment(), name, fallback);
}

bool boolean(const EnvLookup& lookup, std::string_view name, bool fallback) {
  auto value = text(lookup, name);
  return value ? parse_bool(name, *value) : fallback;
}

std::string describe_duration(std::chrono::milliseconds duration) {
  const auto ms = static_cast<double>(duration.count());
  if (ms < 1000.0) return format_number(ms) + " ms";
  if (ms < 60'000.0) return format_number(ms / 1000.0) + " s";
  if (ms < 3'600'000.0) return format_number(ms / 60'000.0) + " min";
  if (ms < 86'400'000.0) return format_number(ms / 3'600'000.0) + " h";
  return format_number(ms / 86'400'000.0) + " days";
}

std::chrono::milliseconds parse_duration(std::string_view name, std::string_view value,
                                         DurationRange range) {
  const std::string valid =
      "from " + describe_duration(range.min) + " to " + describe_duration(range.max);
  auto fail = [&](std::string_view problem) {
    COHORT_FAIL(InvalidArgument,
                std::string(name) + "='" + std::string(value) + "' " + std::string(problem) +
                    "; set " + std::string(name) + " to a duration " + valid +
                    ": seconds (600) or a number with ms, s, m or h (500ms, 90s, 10m, 1h)");
  };
  double number = 0.0;
  const char* begin = value.data();
  const char* end = value.data() + value.size();
  const auto [rest, error] = std::from_chars(begin, end, number);
  if (error == std::errc::result_out_of_range) fail("is out of range");
  if (error != std::errc() || rest == begin) fail("is not a duration");
  if (std::isnan(number)) fail("is not a number");
  if (std::isinf(number)) fail("is infinite");
  if (number < 0.0) fail("is negative");
  if (number == 0.0) fail("is zero");
  const std::string_view unit(rest, static_cast<std::size_t>(end - rest));
  double millis = 0.0;
  if (unit.empty() || unit == "s") {
    millis = number * 1000.0;
  } else if (unit == "ms") {
    millis = number;
  } else if (unit == "m") {
    millis = number * 60'000.0;
  } else if (unit == "h") {
    millis = number * 3'600'000.0;
  } else {
    fail("has an unknown unit");
  }
  // Compared as doubles, before any conversion, so that no value overflows an integer.
  if (millis < static_cast<double>(range.min.count())) fail("is too short");
  if (millis > static_cast<double>(range.max.count())) fail("is too long");
  return std::chrono::milliseconds(static_cast<std::int64_t>(std::llround(millis)));
}

std::optional<std::chrono::milliseconds> duration(std::string_view name, DurationRange range) {
  auto value = text(name);
  if (!value) return std::nullopt;
  return parse_duration(name, *value, range);
}

std::chrono::milliseconds timeout() {
  return duration(kTimeout).value_or(kDefaultTimeout);
}

std::string store_token(const EnvLookup& lookup) {
  return text(lookup, kStoreToken).value_or("");
}

std::string store_token() {
  return store_token(process_environment());
}

}  // namespace env
}  // namespace cohort
