#pragma once

/// @file
/// `ParamRegistry`: the parameters of a model, by name, shape and dtype, in registration order.
///
///     cohort::ParamRegistry params;
///     cohort::ParamHandle w1 = params.add("fc1.weight", {1024, 784});
///     cohort::ParamHandle b1 = params.add("fc1.bias", {1024});
///
/// Register parameters in the order the forward pass uses them: backward produces gradients in
/// the reverse order, which is the order `DataParallel` lays them out and reduces them in.
///
/// Units group parameters used together (a layer, a block: FSDP's wrapped modules). ZeRO-3
/// (`Sharding::zero3`) keeps parameters sharded and gathers them a unit at a time; the other
/// modes accept the same program and gather nothing. Declare units in the order the forward pass
/// uses them:
///
///     cohort::ParamRegistry params;
///     cohort::ParamHandle w = params.add("fc1.weight", {1024, 784});
///     cohort::ParamHandle b = params.add("fc1.bias", {1024});
///     cohort::UnitHandle fc1 = params.add_unit("fc1", {w, b});

#include <cohort/core/dtype.hpp>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace cohort {

/// Names one parameter of a registry (and of the `DataParallel` built from it): its index in
/// registration order. Cheap to copy.
struct ParamHandle {
  std::uint32_t index = 0;
  friend constexpr bool operator==(ParamHandle, ParamHandle) noexcept = default;
};

/// Names one unit of a registry: its index in declaration order. Cheap to copy.
struct UnitHandle {
  std::uint32_t index = 0;
  friend constexpr bool operator==(UnitHandle, UnitHandle) noexcept = default;
};

/// One declared unit.
struct UnitInfo {
  std::string name;
  std::vector<ParamHandle> params;  ///< as declared
};

/// One registered parameter.
struct ParamInfo {
  std::string name;
  std::vector<std::size_t> shape;  ///< empty for a scalar
  DType dtype = DType::f32;
  std::size_t count = 0;  ///< elements: the product of `shape`

  /// "fc1.weight [1024, 784] f32".
  std::string describe() const;
};

class ParamRegistry {
 public:
  /// Registers a parameter and returns its handle.
  /// @throws InvalidArgument when `name` is empty or already registered, or the shape has a zero
  ///         extent or more than 2^48 elements.
  ParamHandle add(std::string name, std::vector<std::size_t> shape, DType dtype = DType::f32);

  std::size_t size() const noexcept { return params_.size(); }
  bool empty() const noexcept { return params_.empty(); }

  /// @throws InvalidArgument for a handle this registry did not hand out.
  const ParamInfo& info(ParamHandle handle) const;

  /// Every parameter, in registration order (`params()[h.index]` is `info(h)`).
  std::span<const ParamInfo> params() const noexcept { return params_; }

  /// The handle of the parameter called `name`. @throws InvalidArgument when there is none.
  ParamHandle find(std::string_view name) const;

  /// Declares a unit of parameters used together, in forward order with the other units.
  /// @throws InvalidArgument for an empty or taken name, no parameters, an unknown handle, or a
  ///         parameter already in a unit (naming both).
  UnitHandle add_unit(std::string name, std::vector<ParamHandle> params);

  /// Every unit, in declaration order (`units()[u.index]` is `unit(u)`).
  std::span<const UnitInfo> units() const noexcept { return units_; }

  /// @throws InvalidArgument for a handle this registry did not hand out.
  const UnitInfo& unit(UnitHandle handle) const;

  /// The unit `param` belongs to, or the number of units when it belongs to none.
  std::uint32_t unit_index_of(ParamHandle param) const;

 private:
  std::vector<ParamInfo> params_;
  std::vector<UnitInfo> units_;
  std::vector<std::uint32_t> unit_of_;  ///< per parameter; units_.size() for none
};

}  // namespace cohort
