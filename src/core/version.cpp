#include <cohort/version.hpp>

namespace cohort {

const char* version() noexcept {
  return COHORT_VERSION_STRING;
}

}  // namespace cohort
