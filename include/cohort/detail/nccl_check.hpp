#pragma once

/// @file
/// The old name of `cohort/comm/detail/nccl_check.hpp` (comm owns it): this header keeps
/// `#include <cohort/detail/nccl_check.hpp>` compiling.

#include <cohort/comm/detail/nccl_check.hpp>
