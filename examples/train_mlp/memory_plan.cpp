#include "memory_plan.hpp"

#include <layers/cnn.hpp>
#include <layers/images.hpp>
#include <layers/mlp.hpp>

#include <cohort/core/format.hpp>
#include <cohort/ddp/param_registry.hpp>
#include <cohort/ddp/shard_layout.hpp>
#include <cohort/memory/memory_estimate.hpp>
#include <cohort/memory/memory_report.hpp>

#include <algorithm>
#include <cstdio>

namespace train_mlp {
namespace {

constexpr std::size_t kMlpEvalRows = 1024;  // the widest test batch run() binds the MLP to

/// Sums of the library's categories (parameters, gradients, optimizer state, buckets).
bool is_library(cohort::MemoryCategory category) {
  return category == cohort::MemoryCategory::parameters ||
         category == cohort::MemoryCategory::gradients ||
         category == cohort::MemoryCategory::optimizer_state ||
         category == cohort::MemoryCategory::buckets ||
         category == cohort::MemoryCategory::gathered;
}

}  // namespace

MemoryPlan plan_memory(const TrainOptions& options, int world_size) {
  const bool bf16 = options.precision == "bf16";
  const cohort::DType dtype = bf16 ? cohort::DType::bf16 : cohort::DType::f32;
  cohort::ParamRegistry registry;  // registering shapes allocates nothing
  MemoryPlan plan;
  if (options.model == Model::mlp) {
    plan.parameters = layers::Mlp({.inputs = kFeatures,
                                   .hidden = options.hidden,
                                   .layers = options.layers,
                                   .classes = kClasses,
                                   .dtype = dtype},
                                  registry)
                          .parameter_count();
  } else {
    plan.parameters = layers::Cnn({.image_size = kImageSize,
                                   .channels = 1,
                                   .width = options.width,
                                   .classes = layers::ShapeImages::kClasses,
                                   .bn_group = kBatchNormGroup,
                                   .layout = layers::Layout::nhwc,
                                   .dtype = dtype},
                                  registry)
                          .parameter_count();
  }
  const std::size_t p = plan.parameters;
  // The library: what DataParallel holds in the stage's layout (shard_layout.hpp; automatic
  // bucket caps are measured at start, the largest they may be assumed here), and the optimizer
  // state
  // (AdamW's two moments or SGD's momentum, f32 master weights under bf16) for the whole arena,
  // or from ZeRO-1 on for this rank's shard.
  const cohort::Sharding sharding = options.zero == 2   ? cohort::Sharding::zero2
                                    : options.zero == 3 ? cohort::Sharding::zero3
                                                        : cohort::Sharding::none;
  const bool automatic = options.bucket_bytes == cohort::kAutoBucketBytes;
  // A layout lists every bucket. For a model far larger than any memory (which this estimate
  // exists to refuse: --hidden 10000000 is 2e16 bytes, 3e8 buckets of 64 MiB) the caps grow so
  // that it lists at most kMaxPlannedBuckets, and it is made in microseconds instead of minutes;
  // ZeRO-2's one bucket in flight is then over-counted, for such models only.
  constexpr std::size_t kMaxPlannedBuckets = 65536;
  const std::size_t floor_cap = p * cohort::size_of(dtype) / kMaxPlannedBuckets + 1;
  const auto cap = [&](std::size_t asked) { return std::max(asked, floor_cap); };
  const cohort::ShardLayout layout = cohort::make_shard_layout(
      registry, world_size, sharding,
      cap(automatic ? cohort::kMaxAutoBucketBytes : options.bucket_bytes),
      cap(automatic ? cohort::kMaxAutoBucketBytes : options.first_bucket_bytes),
      cap(automatic ? cohort::kMaxAutoBucketBytes : cohort::kDefaultLastBucketBytes));
  const std::size_t state_floats = (options.optimizer == "adamw" ? 2U : 1U) + (bf16 ? 1U : 0U);
  const std::size_t stepped = options.zero >= 1 ? layout.shard_count : layout.arena_count;
  plan.library = layout.rank_bytes() + state_floats * stepped * sizeof(float);
  // The example: the training set on the host and its device copy (features and a label), the
  // final download of every parameter when it is kept, for the MLP the f32 copies of one bf16
  // layer's weights and gradients and the activations of the widest batch it binds (the CNN's
  // are not estimated; its bf16 copies are of every layer).
  const auto samples = static_cast<std::size_t>(options.train_samples);
  const auto features =
      static_cast<std::size_t>(options.model == Model::mlp ? kFeatures : kImageSize * kImageSize);
  plan.example = 2 * samples * (features + 1) * 4 + (options.keep_params ? p * 4 : 0);
  if (bf16) {
    std::size_t largest = 0;
    for (const cohort::ParamInfo& info : registry.params()) largest = std::max(largest, info.count);
    const auto hidden = static_cast<std::size_t>(options.hidden);
    plan.example += options.model == Model::mlp ? 2 * (largest + hidden) * 4 : p * 8;
  }
  if (options.model == Model::mlp) {
    const std::size_t rows =
        std::max(std::min(kMlpEvalRows, static_cast<std::size_t>(eval_rows(options, world_size))),
                 static_cast<std::size_t>(options.global_batch / world_size));
    const auto hidden = static_cast<std::size_t>(options.hidden);
    const auto layers = static_cast<std::size_t>(options.layers);
    plan.example += rows * (hidden * layers + 2 * std::max(hidden, features)) * 4;
  }
  return plan;
}

void check_memory_plan(const TrainOptions& options, int world_size, cohort::Device device,
                       int ranks_here) {
  const cohort::MemoryAvailability available = cohort::memory_availability(device);
  const auto ranks = static_cast<std::size_t>(std::max(ranks_here, 1));
  const MemoryPlan plan = plan_memory(options, world_size);
  if (available.bytes == 0 || plan.total() * ranks <= available.bytes) return;
  // What the other stages would take, so that the refusal says which would fit.
  std::string advice;
  for (int stage = 0; stage <= kMaxZeroStage; ++stage) {
    if (stage == options.zero) continue;
    TrainOptions other = options;
    other.zero = stage;
    const MemoryPlan alternative = plan_memory(other, world_size);
    const bool fits = alternative.total() * ranks <= available.bytes;
    advice += std::string(advice.empty() ? "" : "; ") + "--zero " + std::to_string(stage) +
              " would need " + cohort::format_bytes(alternative.total()) + " (" +
              (fits ? "fits" : "does not fit") + ")";
  }
  advice = "Per rank, " + advice +
           ". Use a stage that fits, more ranks, or a smaller model or "
           "batch.";
  const std::string what = std::string(program_name(options.model)) + " (" +
                           std::to_string(plan.parameters) + " parameters, ZeRO stage " +
                           std::to_string(options.zero) + ": " +
                           cohort::format_bytes(plan.library) + " in cohort and " +
                           cohort::format_bytes(plan.example) + " of the example's own per rank)";
  cohort::check_memory_fits(available, device, plan.total(), ranks_here, what, advice);
}

nlohmann::json memory_per_parameter(cohort::Device device, std::size_t parameters,
                                    int ranks_in_process, const MemoryPlan& plan) {
  const double scale =
      static_cast<double>(parameters) * static_cast<double>(std::max(ranks_in_process, 1));
  nlohmann::json categories = nlohmann::json::object();
  double library = 0.0, example = 0.0;
  for (const cohort::MemoryCategory category : cohort::kAllMemoryCategories) {
    categories[std::string(cohort::to_string(category))] = 0.0;
  }
  for (const cohort::MemoryUsage& usage : cohort::memory_usage()) {
    if (usage.device != device) continue;
    const double per_parameter = static_cast<double>(usage.current_bytes) / scale;
    categories[std::string(cohort::to_string(usage.category))] = per_parameter;
    (is_library(usage.category) ? library : example) += per_parameter;
  }
  return {{"device", device.to_string()},
          {"bytes_per_parameter", categories},
          {"library_bytes_per_parameter", library},
          {"example_bytes_per_parameter", example},
          {"estimated_bytes_per_rank", plan.total()},
          {"estimated_library_bytes_per_rank", plan.library},
          {"estimated_example_bytes_per_rank", plan.example}};
}

std::string describe_memory(const nlohmann::json& memory) {
  std::string text = "memory per parameter on " + memory["device"].get<std::string>() + ":";
  char number[64];
  bool first = true;
  for (const auto& [name, value] : memory["bytes_per_parameter"].items()) {
    std::snprintf(number, sizeof number, "%s %s %.2f", first ? "" : ",", name.c_str(),
                  value.get<double>());
    text += number;
    first = false;
  }
  std::snprintf(number, sizeof number, " B (cohort %.2f, the example %.2f)",
                memory["library_bytes_per_parameter"].get<double>(),
                memory["example_bytes_per_parameter"].get<double>());
  return text + number;
}

}  // namespace train_mlp
