#pragma once

// scaling_bench's measurement: the training steps at one rank count, in a world of the first k
// ranks, and each rank's samples as JSON for the store.

#include "scaling/scaling_types.hpp"

#include <layers/math.hpp>

#include <cohort/comm/world.hpp>
#include <cohort/ddp/param_registry.hpp>

#include <nlohmann/json.hpp>

#include <atomic>
#include <string>
#include <vector>

namespace scaling {

/// Where the run is, for the progress lines (written by the measuring rank 0, read by the
/// thread that prints them).
struct Progress {
  std::atomic<int> ranks{0};        ///< the rank count being measured
  std::atomic<int> step{0};         ///< steps done at it, warm-up included
  std::atomic<int> total{0};        ///< steps planned at it, warm-up included
  std::atomic<double> step_s{0.0};  ///< the last step's time
};

/// The arithmetic of every f32 layer of the step with real compute on a GPU, one setting for the
/// GEMMs and the convolutions alike (layers::MathMode): TF32 under --precision tf32, else FP32
/// (bf16 and fp16 data run on tensor cores with FP32 accumulation whatever the mode).
layers::MathMode math_mode(const Setup& setup);

/// The learning rate of the step's plain SGD.
inline constexpr float kSgdLr = 1e-4f;

/// The workload's parameters, in registration order, in `dtype`.
cohort::ParamRegistry registry_of(const layers::Workload& workload,
                                  cohort::DType dtype = cohort::DType::f32);

/// Runs the workload on `world` and returns this rank's samples. With `setup.budgeted`, the ranks
/// agree after the warm-up on as many timed steps as fit `budget_per_count_s` (3 at least,
/// `steps` at most; the smallest of the ranks' values counts). `progress` (rank 0's, or null)
/// follows the steps.
RankSamples measure(cohort::World& world, const Setup& setup, double budget_per_count_s,
                    Progress* progress);

nlohmann::json to_json(const RankSamples& samples);
RankSamples from_json(const nlohmann::json& in);

/// 1, 2, 4, ... below `world_size`, then `world_size`.
std::vector<int> rank_counts(int world_size);

/// The world of the first `k` ranks of `parent`, through a store scoped to it.
cohort::World sub_world(cohort::World& parent, int k, const std::string& scope);

}  // namespace scaling
