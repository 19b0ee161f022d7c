#pragma once

/// @file
/// The old name of `cohort/core/detail/cuda_check.hpp` (core owns it): this header keeps
/// `#include <cohort/detail/cuda_check.hpp>` compiling.

#include <cohort/core/detail/cuda_check.hpp>
