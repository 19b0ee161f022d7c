#pragma once

// The checks of COHORT_DEBUG_STREAMS that DataParallel::grad_ready runs (Note [Debugging
// streams] in data_parallel.hpp).

#include <cohort/core/stream.hpp>
#include <cohort/core/tensor_view.hpp>

#include <string_view>

namespace cohort::detail {

/// Whether COHORT_DEBUG_STREAMS is on (read through core/env.hpp).
/// @throws InvalidArgument naming the variable for a value that is not a switch.
bool debug_streams_enabled();

/// On a host worker compute stream: throws when library work enqueued on it (named by
/// `label_host_work`) has not been waited for by the host and nothing was enqueued after it, so
/// the host computed `parameter`'s gradient while that work could still run. Does nothing for a
/// caller-run host stream or a CUDA stream.
/// @throws InvalidArgument naming the parameter, the library call and the remedies.
void check_host_waited(const Stream& compute, std::string_view parameter);

/// On a GPU: throws when `gradient` (of `parameter`) changes after the point its mark takes on
/// the compute stream, that is when work the compute stream does not wait for was still writing
/// it. Copies the gradient at that point, waits for the whole device, copies it again and
/// compares. `stream_given`: the caller passed the stream it wrote on. Does nothing on the host.
/// @throws InvalidArgument naming the parameter and what to do; CudaError from the copies.
void check_gradient_settled(const TensorView& gradient, const Stream& compute,
                            std::string_view parameter, bool stream_given);

}  // namespace cohort::detail
