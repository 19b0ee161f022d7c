#include <cohort/core/error.hpp>
#include <cohort/ddp/param_registry.hpp>

#include <limits>
#include <utility>

namespace cohort {

namespace {
constexpr std::size_t kMaxElements = std::size_t{1} << 48;
constexpr std::uint32_t kNoUnit = std::numeric_limits<std::uint32_t>::max();
}  // namespace

std::string ParamInfo::describe() const {
  std::string text = name + " [";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) {
      text += ", ";
    }
    text += std::to_string(shape[i]);
  }
  text += "] ";
  text += to_string(dtype);
  return text;
}

ParamHandle ParamRegistry::add(std::string name, std::vector<std::size_t> shape, DType dtype) {
  COHORT_EXPECTS(!name.empty(), "ParamRegistry::add: a parameter needs a name");
  for (const ParamInfo& existing : params_) {
    COHORT_EXPECTS(existing.name != name,
                   "ParamRegistry::add: a parameter named '" + name + "' is already registered");
  }
  COHORT_EXPECTS(params_.size() < std::numeric_limits<std::uint32_t>::max(),
                 "ParamRegistry::add: too many parameters");
  std::size_t count = 1;
  for (const std::size_t extent : shape) {
    COHORT_EXPECTS(extent > 0, "ParamRegistry::add: parameter '" + name +
                                   "' has a zero extent; a parameter needs at least one element");
    COHORT_EXPECTS(count <= kMaxElements / extent,
                   "ParamRegistry::add: parameter '" + name + "' has more than 2^48 elements");
    count *= extent;
  }
  ParamInfo info;
  info.name = std::move(name);
  info.shape = std::move(shape);
  info.dtype = dtype;
  info.count = count;
  params_.push_back(std::move(info));
  unit_of_.push_back(kNoUnit);
  return ParamHandle{static_cast<std::uint32_t>(params_.size() - 1)};
}

const ParamInfo& ParamRegistry::info(ParamHandle handle) const {
  COHORT_EXPECTS(handle.index < params_.size(), "parameter handle " + std::to_string(handle.index) +
                                                    " is not from this registry (" +
                                                    std::to_string(params_.size()) +
                                                    " parameters)");
  return params_[handle.index];
}

UnitHandle ParamRegistry::add_unit(std::string name, std::vector<ParamHandle> params) {
  COHORT_EXPECTS(!name.empty(), "ParamRegistry::add_unit: a unit needs a name");
  for (const UnitInfo& existing : units_) {
    COHORT_EXPECTS(existing.name != name,
                   "ParamRegistry::add_unit: a unit named '" + name + "' is already declared");
  }
  COHORT_EXPECTS(!params.empty(), "ParamRegistry::add_unit: unit '" + name + "' has no parameters");
  const auto index = static_cast<std::uint32_t>(units_.size());
  std::vector<bool> listed(params_.size(), false);
  for (const ParamHandle param : params) {
    const ParamInfo& info = this->info(param);
    const std::uint32_t owner = unit_of_[param.index];
    COHORT_EXPECTS(owner == kNoUnit, "ParamRegistry::add_unit: parameter '" + info.name +
                                         "' of unit '" + name + "' already belongs to unit '" +
                                         (owner == kNoUnit ? std::string() : units_[owner].name) +
                                         "'; a parameter belongs to one unit at most");
    COHORT_EXPECTS(!listed[param.index], "ParamRegistry::add_unit: parameter '" + info.name +
                                             "' is listed twice in unit '" + name + "'");
    listed[param.index] = true;
  }
  for (const ParamHandle param : params) unit_of_[param.index] = index;
  units_.push_back(UnitInfo{std::move(name), std::move(params)});
  return UnitHandle{index};
}

const UnitInfo& ParamRegistry::unit(UnitHandle handle) const {
  COHORT_EXPECTS(handle.index < units_.size(), "unit handle " + std::to_string(handle.index) +
                                                   " is not from this registry (" +
                                                   std::to_string(units_.size()) + " units)");
  return units_[handle.index];
}

std::uint32_t ParamRegistry::unit_index_of(ParamHandle param) const {
  info(param);
  const std::uint32_t owner = unit_of_[param.index];
  return owner == kNoUnit ? static_cast<std::uint32_t>(units_.size()) : owner;
}

ParamHandle ParamRegistry::find(std::string_view name) const {
  for (std::size_t i = 0; i < params_.size(); ++i) {
    if (params_[i].name == name) {
      return ParamHandle{static_cast<std::uint32_t>(i)};
    }
  }
  COHORT_FAIL(InvalidArgument, "no parameter named '" + std::string(name) + "' is registered");
}

}  // namespace cohort
