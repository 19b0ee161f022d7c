#pragma once

// scaling_bench's measurement: the training steps at one rank count, in a world of the first k
// ranks, and each rank's samples as JSON for the store.

#include "scaling/scaling_types.hpp"

#include <cohort/comm/world.hpp>
#include <cohort/ddp/param_registry.hpp>

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace scaling {

/// The workload's parameters, in registration order.
cohort::ParamRegistry registry_of(const layers::Workload& workload);

/// Runs the workload on `world` and returns this rank's samples.
RankSamples measure(cohort::World& world, const Setup& setup);

nlohmann::json to_json(const RankSamples& samples);
RankSamples from_json(const nlohmann::json& in);

/// 1, 2, 4, ... below `world_size`, then `world_size`.
std::vector<int> rank_counts(int world_size);

/// The world of the first `k` ranks of `parent`, through a store scoped to it.
cohort::World sub_world(cohort::World& parent, int k, const std::string& scope);

}  // namespace scaling
