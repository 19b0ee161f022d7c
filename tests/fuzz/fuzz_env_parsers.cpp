// The environment module's switch and duration parsers, and the numeric flag check every program
// uses (tools/common/cli_checks.hpp), over arbitrary text. The first byte picks the parser and,
// for durations, a range; the rest is the value. Each must either accept with a value that obeys
// its contract or refuse with InvalidArgument (a message naming the variable): any other
// exception, a crash, or an accepted value outside the range is a finding.

#include <cohort/core/env.hpp>
#include <cohort/core/error.hpp>

#include "cli_checks.hpp"

#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

namespace {

constexpr std::string_view kName = "COHORT_FUZZ_VALUE";

void check_bool(std::string_view value) {
  try {
    (void)cohort::env::parse_bool(kName, value);
  } catch (const cohort::InvalidArgument& error) {
    if (std::string_view(error.what()).find(kName) == std::string_view::npos) std::abort();
  }
}

void check_duration(std::string_view value, std::uint8_t selector) {
  cohort::env::DurationRange range;
  if ((selector & 1U) != 0) {
    range.min = std::chrono::milliseconds(selector);
    range.max = std::chrono::milliseconds(std::int64_t{1} << (selector % 40));
  }
  try {
    const auto parsed = cohort::env::parse_duration(kName, value, range);
    if (parsed < range.min || parsed > range.max) std::abort();
    if (cohort::env::describe_duration(parsed).empty()) std::abort();
  } catch (const cohort::InvalidArgument& error) {
    if (std::string_view(error.what()).find(kName) == std::string_view::npos) std::abort();
  }
}

void check_number(const std::string& value, std::uint8_t selector) {
  const bool integer = (selector & 2U) != 0;
  const double max = std::ldexp(1.0, selector % 64);
  const std::string refusal = cohort::cli::number_in(0.0, false, max, integer)(value);
  if (!refusal.empty()) return;
  // Accepted: it must parse whole, finite, in range, and whole when asked.
  char* end = nullptr;
  const double parsed = std::strtod(value.c_str(), &end);
  if (end == value.c_str() || *end != '\0' || !std::isfinite(parsed)) std::abort();
  if (parsed <= 0.0 || parsed > max) std::abort();
  if (integer && parsed != std::floor(parsed)) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::uint8_t selector = data[0];
  const std::string value(reinterpret_cast<const char*>(data + 1), size - 1);
  switch (selector % 3) {
    case 0:
      check_bool(value);
      break;
    case 1:
      check_duration(value, static_cast<std::uint8_t>(selector / 3));
      break;
    default:
      check_number(value, static_cast<std::uint8_t>(selector / 3));
      break;
  }
  return 0;
}
