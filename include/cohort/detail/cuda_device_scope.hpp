#pragma once

/// @file
/// The old name of `cohort/core/detail/cuda_device_scope.hpp` (core owns it): this header keeps
/// `#include <cohort/detail/cuda_device_scope.hpp>` compiling.

#include <cohort/core/detail/cuda_device_scope.hpp>
