#pragma once

/// @file
/// `cohort-doctor --collective`: every collective cohort has, run across the ranks that joined,
/// checked element by element and timed (collective.cpp).

#include "checks.hpp"

#include <cohort/comm/world.hpp>

#include <cstddef>
#include <vector>

namespace cohort::doctor {

/// All-reduce, reduce-scatter, all-gather and broadcast of `bytes` (the total message, as
/// nccl-tests counts it) on `world.comm()`, `iterations` timed runs each after two warm-ups.
/// Collective: every rank calls it. Every rank gets the same results: the slowest rank's median
/// time, and the wrong elements summed over the ranks.
std::vector<CollectiveResult> run_collectives(World& world, std::size_t bytes, int iterations);

}  // namespace cohort::doctor
