#pragma once

// Small helpers shared by the checks_*.cpp files.

#include "checks.hpp"

#include <cohort/core/env.hpp>
#include <cohort/core/error.hpp>

#include <charconv>
#include <optional>
#include <string>
#include <string_view>

namespace cohort::doctor::detail {

/// The value of `name`, or nullopt when it is unset.
inline std::optional<std::string> lookup(const EnvMap& environment, std::string_view name) {
  const auto found = environment.find(name);
  if (found == environment.end()) {
    return std::nullopt;
  }
  return found->second;
}

/// Whether `name` holds a nonzero integer, the way NCCL reads its switches (anything that is not
/// an integer leaves NCCL's default, off).
inline bool switched_on(const EnvMap& environment, std::string_view name) {
  const auto value = lookup(environment, name);
  if (!value || value->empty()) {
    return false;
  }
  long long number = 0;
  const char* end = value->data() + value->size();
  const auto [rest, error] = std::from_chars(value->data(), end, number);
  return error == std::errc() && rest == end && number != 0;
}

/// Whether cohort's switch `name` is on, parsed as cohort parses it; a value cohort would refuse
/// counts as off here (cohort itself names it when it starts).
inline bool cohort_switch_on(const EnvMap& environment, std::string_view name) {
  const auto value = lookup(environment, name);
  if (!value || value->empty()) {
    return false;
  }
  try {
    return env::parse_bool(name, *value);
  } catch (const InvalidArgument&) {
    return false;
  }
}

}  // namespace cohort::doctor::detail
