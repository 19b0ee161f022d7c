#pragma once

// Stream-ordered copies and zeroing on either backend (not public API): the few memory
// operations the optimizers, DataParallel's arenas and checkpoints need, with the CUDA calls
// only in src/memory/stream_copy.cpp. Note [Private headers of an area] in docs/design.md.

#include <cohort/core/stream.hpp>
#include <cohort/core/tensor_view.hpp>

#include <cstddef>

namespace cohort::detail {

/// Copies `bytes` host bytes to `destination` (on `stream`'s device) in stream order, and waits.
void write_now(void* destination, const void* source, std::size_t bytes, const Stream& stream);

/// Waits for `stream`, then copies `bytes` from `source` (on `stream`'s device) to the host.
void read_after(void* destination, const void* source, std::size_t bytes, const Stream& stream);

/// Enqueues on `stream` a copy of `bytes` from `source` (on `stream`'s device) to host memory
/// (pinned, for a CUDA device, so that the copy is asynchronous); returns at once.
void copy_to_host_async(void* destination, const void* source, std::size_t bytes,
                        const Stream& stream);

/// Enqueues on `stream` a copy of `bytes` from host memory `source` (pinned, for a CUDA device,
/// so that the copy is asynchronous) to `destination` (on `stream`'s device); returns at once.
/// `source` must stay unchanged until the copy has run.
void copy_to_device_async(void* destination, const void* source, std::size_t bytes,
                          const Stream& stream);

/// Enqueues on `stream` a copy of `bytes` between two places in `stream`'s device's memory;
/// returns at once.
void copy_async(void* destination, const void* source, std::size_t bytes, const Stream& stream);

/// Sets `bytes` at `destination` to zero in stream order.
void zero_async(void* destination, std::size_t bytes, const Stream& stream);

/// Sets every element of `data` to zero, after the work already on `stream`.
inline void zero_async(TensorView data, const Stream& stream) {
  zero_async(data.data(), data.bytes(), stream);
}

}  // namespace cohort::detail
