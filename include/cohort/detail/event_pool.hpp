#pragma once

/// @file
/// The old name of `cohort/core/detail/event_pool.hpp` (core owns it): this header keeps
/// `#include <cohort/detail/event_pool.hpp>` compiling.

#include <cohort/core/detail/event_pool.hpp>
