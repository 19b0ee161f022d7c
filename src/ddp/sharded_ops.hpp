#pragma once

// The two element-wise operations the sharded modes add to arena_ops.hpp, in stream order on the
// host (a task) or a GPU (a kernel or a copy).

#include <cohort/comm/types.hpp>
#include <cohort/core/stream.hpp>

namespace cohort::detail {

/// `to += from` (same dtype and count; 16-bit summed in f32, rounded once), after the work already
/// on `stream`.
void add_on(const Stream& stream, TensorView from, TensorView to);

/// `to = from` (same dtype and count), after the work already on `stream`.
void copy_on(const Stream& stream, TensorView from, TensorView to);

}  // namespace cohort::detail
