#pragma once

// The measurement behind Note [Automatic bucket sizes].

#include <cohort/comm/communicator.hpp>
#include <cohort/ddp/bucket_sizing.hpp>
#include <cohort/launch/store.hpp>
#include <cohort/memory/memory_resource.hpp>

#include <chrono>
#include <memory>

namespace cohort::detail {

/// Times all-reduces of two sizes on `comm` (memory from `memory`, on `stream`) and returns rank
/// 0's estimate on every rank (through `store`). Collective over `comm`, whose ranks must be the
/// ranks meeting through `store`.
LinkEstimate measure_link(Communicator& comm, Store& store,
                          const std::shared_ptr<MemoryResource>& memory, const Stream& stream,
                          std::chrono::milliseconds timeout);

}  // namespace cohort::detail
