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

 private:
  std::vector<ParamInfo> params_;
};

}  // namespace cohort
