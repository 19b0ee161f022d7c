#pragma once

// train_mlp's and train_cnn's memory: an estimate made from the options before anything is
// allocated (a model that cannot fit is refused at once, not OOM-killed mid-run), and the report
// of what was held, per parameter and category, from cohort::memory_usage().

#include "train.hpp"

#include <cohort/core/device.hpp>

#include <nlohmann/json.hpp>

#include <cstddef>
#include <string>

namespace train_mlp {

/// What one rank will hold, in bytes.
struct MemoryPlan {
  std::size_t parameters = 0;  ///< the model's parameter count
  std::size_t library = 0;     ///< parameters, gradients and optimizer state in cohort
  std::size_t example = 0;     ///< the example's own: data, activations, f32 copies, download
  std::size_t total() const noexcept { return library + example; }
};

/// The estimate for one rank of a world of `world_size` ranks, in the ZeRO stage of `options`.
MemoryPlan plan_memory(const TrainOptions& options, int world_size);

/// The ZeRO stages train_mlp can run (0 to this).
inline constexpr int kMaxZeroStage = 3;

/// Throws cohort::OutOfMemory, before anything is allocated, when `ranks_here` ranks (those that
/// share `device`'s memory: the host's, under its container's limit) of a world of `world_size`
/// do not fit on it. The message says what each other ZeRO stage would need, and which fit.
void check_memory_plan(const TrainOptions& options, int world_size, cohort::Device device,
                       int ranks_here);

/// What this rank's process holds now on `device`, per parameter of `parameters` (times
/// `ranks_in_process`, the ranks that share the process's report), by category; plus the library's
/// and the example's sums and the estimate `plan`.
nlohmann::json memory_per_parameter(cohort::Device device, std::size_t parameters,
                                    int ranks_in_process, const MemoryPlan& plan);

/// One line for the log: "memory per parameter: parameters 4.00, ... (library 16.02, example
/// 3.10 B)".
std::string describe_memory(const nlohmann::json& memory);

}  // namespace train_mlp
