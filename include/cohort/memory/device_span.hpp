#pragma once

/// @file
/// `DeviceSpan<T>` is a core type (`cohort/core/device_span.hpp`): `TensorView` hands one out.
/// This header keeps `#include <cohort/memory/device_span.hpp>` compiling.

#include <cohort/core/device_span.hpp>
