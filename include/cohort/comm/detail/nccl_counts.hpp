#pragma once

// What the NCCL backend made in this process (not public API), for the measurement of a World's
// cost (tests/comm/world_cost.cpp) and the tests that hold it. Note [Sharing NCCL's resources]
// in src/comm/nccl/communicator.cpp says what a World makes.

#include <cstdint>

namespace cohort::detail {

/// NCCL communicators (ncclCommInitRankConfig and ncclCommSplit results) made so far; 0 in a
/// build without CUDA.
std::uint64_t nccl_communicators_created() noexcept;

}  // namespace cohort::detail
