#pragma once

// Shared by the adaptors: checks the upstream before the base class is built from it.

#include <cohort/core/error.hpp>
#include <cohort/memory/memory_resource.hpp>

#include <memory>
#include <string_view>

namespace cohort::detail {

inline const MemoryResource& checked_upstream(const std::shared_ptr<MemoryResource>& upstream,
                                              std::string_view adaptor) {
  COHORT_EXPECTS(upstream != nullptr,
                 "a " + std::string(adaptor) + " adaptor needs an upstream resource");
  return *upstream;
}

}  // namespace cohort::detail
