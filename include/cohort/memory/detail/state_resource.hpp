#pragma once

// Where small, long-lived state lives when the user names no resource (not public API): the
// optimizers' state and scalars, the loss scaler's, the preemption flag. Its code is in
// src/memory/state_resource.cpp. Note [Private headers of an area] in docs/design.md.

#include <cohort/core/device.hpp>
#include <cohort/memory/memory_resource.hpp>

#include <memory>

namespace cohort::detail {

/// The resource for optimizer state and scalars when the user names none: one device pool per
/// GPU, shared by every optimizer and loss scaler of the process, or plain host memory.
std::shared_ptr<MemoryResource> default_state_resource(Device device);

/// Whether memory from `resource` is CUDA managed memory (prefetched before each step).
bool is_managed(const MemoryResource& resource) noexcept;

}  // namespace cohort::detail
