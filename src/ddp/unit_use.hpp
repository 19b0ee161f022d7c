#pragma once

// The rules of `DataParallel::gather` and `release` that hold in every mode, so that a program
// written for ZeRO-3 is checked the same way under plain data parallel: a unit is gathered once
// for a pass before it is released, and released once.

#include <cohort/core/error.hpp>
#include <cohort/ddp/data_parallel.hpp>
#include <cohort/ddp/param_registry.hpp>

#include <cstdint>
#include <optional>
#include <vector>

namespace cohort::detail {

class UnitUse {
 public:
  explicit UnitUse(const ParamRegistry& registry)
      : registry_(registry), held_(registry.units().size()) {}

  /// Records that `unit` is gathered for `pass`; returns the pass it was held for until now
  /// (forward, when backward takes over a unit forward kept), if any.
  /// @throws InvalidArgument for an unknown unit or one already held for `pass`.
  std::optional<Pass> gather(UnitHandle unit, Pass pass) {
    const UnitInfo& info = registry_.unit(unit);
    std::optional<Pass>& held = held_[unit.index];
    // Backward may take over a unit forward kept; nothing else is gathered twice.
    COHORT_EXPECTS(!held || (*held == Pass::forward && pass == Pass::backward),
                   "gather: unit '" + info.name + "' is already gathered for " +
                       (held == Pass::forward ? "forward" : "backward") +
                       "; release it before gathering it again");
    const std::optional<Pass> before = held;
    held = pass;
    return before;
  }

  /// Records that `unit` is released; returns the pass it was held for.
  /// @throws InvalidArgument for an unknown unit or one not held (released twice).
  Pass release(UnitHandle unit) {
    const UnitInfo& info = registry_.unit(unit);
    std::optional<Pass>& held = held_[unit.index];
    COHORT_EXPECTS(held.has_value(), "release: unit '" + info.name +
                                         "' is not gathered: released twice, or never gathered");
    const Pass pass = *held;
    held.reset();
    return pass;
  }

  std::optional<Pass> held(std::uint32_t unit) const { return held_[unit]; }

 private:
  const ParamRegistry& registry_;
  std::vector<std::optional<Pass>> held_;
};

}  // namespace cohort::detail
