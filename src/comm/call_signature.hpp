#pragma once

// Note [Call signatures]
// Ranks that issue different collectives at the same point (an all_reduce against a broadcast,
// another count, another dtype or reduction) are a bug in the program, and each transport must
// turn it into an error that names the ranks and both calls, never into wrong results or a
// crash. One 64-bit word holds a call: op, reduce op, dtype, root and count (modulo 2^44, 16 Ti
// elements). Shared memory compares the words every round (Note [Shared-memory call
// signatures]); Gloo tags each collective's messages with 32 bits of it (Note [Gloo tags from
// the call]); and when a collective passes its deadline with every rank having issued it, the
// diagnosis compares the words the ranks published (Note [Different calls at one point]).

#include <cohort/comm/communicator.hpp>

#include <cstdint>
#include <string>

namespace cohort::detail {

std::uint64_t call_signature(CollectiveOp op, ReduceOp reduce, DType dtype, int root,
                             std::size_t count) noexcept;

/// The call as a transport compares it (shared memory's rounds, Gloo's tags). Both overloads
/// count the elements each rank contributes (the input's), so that a call reads back the same
/// from either.
std::uint64_t call_signature(const Communicator::Call& call) noexcept;

/// The call as the flight recorder holds it.
std::uint64_t call_signature(const CollectiveRecord& record) noexcept;

/// "all_reduce of 1024 x f32 sum", "broadcast of 8 x i64 from root 2", "barrier".
std::string describe_signature(std::uint64_t signature);

/// 32 bits that differ, but for a chance of 2^-32, wherever the signatures differ.
std::uint32_t signature_tag(std::uint64_t signature) noexcept;

}  // namespace cohort::detail
