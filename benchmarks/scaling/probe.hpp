#pragma once

// scaling_bench's link probe: all-reduces of the step's bucket sizes (and one small one) timed on
// the world that trains, and the per-collective cost fitted to them (Note [Checking the model]).

#include "scaling/scaling_types.hpp"

#include <cohort/comm/world.hpp>

#include <cstddef>
#include <vector>

namespace scaling {

/// Times all-reduces of each size (bytes of f32) on `world.comm()`: after one warm-up, `reps`
/// runs of 4 issued back to back (nccl-tests' way), the sizes taking turns within each
/// repetition; every rank takes part. Returns the slowest rank's median per size and the
/// least-squares fit ms = alpha + bytes x ms_per_byte.
LinkProbe probe_link(cohort::World& world, std::vector<std::size_t> sizes, int reps);

}  // namespace scaling
