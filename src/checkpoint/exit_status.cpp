// Which errors a restart cannot fix (Note [Exit statuses] in exit_status.hpp).

#include <cohort/checkpoint/exit_status.hpp>
#include <cohort/checkpoint/manifest.hpp>
#include <cohort/core/error.hpp>

namespace cohort {

bool restart_can_fix(const std::exception& error) noexcept {
  return dynamic_cast<const InvalidArgument*>(&error) == nullptr &&
         dynamic_cast<const UnloadableCheckpoint*>(&error) == nullptr;
}

int exit_status_for(const std::exception& error) noexcept {
  return restart_can_fix(error) ? kFailedExitStatus : kConfigErrorExitStatus;
}

}  // namespace cohort
