#include "train.hpp"
#include "memory_plan.hpp"

#include <layers/bucket_json.hpp>
#include <layers/cnn.hpp>
#include <layers/dataset.hpp>
#include <layers/host_blas.hpp>
#include <layers/images.hpp>
#include <layers/math.hpp>
#include <layers/mlp.hpp>

#include <cohort/checkpoint/checkpoint.hpp>
#include <cohort/checkpoint/preemption.hpp>
#include <cohort/core/error.hpp>
#include <cohort/data/distributed_sampler.hpp>
#include <cohort/ddp/data_parallel.hpp>
#include <cohort/optim/adamw.hpp>
#include <cohort/optim/data_parallel_target.hpp>
#include <cohort/optim/sgd.hpp>
#include <cohort/optim/sharded_optimizer.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>

namespace train_mlp {
namespace {

using Clock = std::chrono::steady_clock;

const char* zero_label(int zero) {
  static const char* const kLabels[] = {"", " ZeRO-1", " ZeRO-2", " ZeRO-3"};
  return zero >= 0 && zero <= 3 ? kLabels[zero] : "";
}

std::unique_ptr<cohort::Optimizer> make_optimizer(const TrainOptions& options,
                                                  cohort::DataParallel& dp) {
  const cohort::OptimizerTarget target = cohort::target_of(dp);
  if (options.optimizer == "sgd") {
    cohort::SgdOptions sgd;
    sgd.lr = options.lr > 0.0f ? options.lr : 0.05f;
    sgd.momentum = 0.9f;
    if (options.zero == 1) {
      return std::make_unique<cohort::ShardedOptimizer>(target, sgd,
                                                        cohort::sharded_options_of(dp));
    }
    return std::make_unique<cohort::Sgd>(target, sgd);
  }
  COHORT_EXPECTS(options.optimizer == "adamw",
                 "--optimizer " + options.optimizer + ": use sgd or adamw");
  cohort::AdamWOptions adamw;
  adamw.lr = options.lr > 0.0f ? options.lr : 2e-3f;
  adamw.weight_decay = 1e-4f;
  if (options.zero == 1) {
    return std::make_unique<cohort::ShardedOptimizer>(target, adamw,
                                                      cohort::sharded_options_of(dp));
  }
  return std::make_unique<cohort::AdamW>(target, adamw);
}

/// Sums `stats` (two doubles on the device) over the ranks and reads them.
std::pair<double, double> reduce_stats(cohort::DataParallel& dp, layers::Math& math,
                                       cohort::Buffer& stats) {
  dp.comm().all_reduce(cohort::TensorView(stats.data(), 2, cohort::DType::f64, math.device()),
                       cohort::ReduceOp::sum, math.stream());
  double host[2] = {0.0, 0.0};
  math.download(host, stats.data(), sizeof(host));
  return {host[0], host[1]};
}

/// `count` elements of type T at the start of `buffer`, on the math's device.
template <typename T>
cohort::TensorView view_of(const cohort::Buffer& buffer, std::size_t count,
                           const layers::Math& math) {
  return cohort::TensorView::of(static_cast<T*>(const_cast<void*>(buffer.data())), count,
                                math.device());
}

/// Every rank holds the whole training split and its slice of the test split.
struct Splits {
  int features = 0;  ///< floats per sample
  std::vector<float> train_x, test_x;
  std::vector<std::int32_t> train_y, test_y;
};

template <typename Data>
Splits make_splits(const Data& data, int features, const TrainOptions& options, int rank,
                   int ranks) {
  Splits splits;
  splits.features = features;
  data.append_rows(layers::Split::train, 0, static_cast<std::size_t>(options.train_samples),
                   splits.train_x, splits.train_y);
  const auto test_begin = static_cast<std::uint64_t>(options.test_samples) *
                          static_cast<std::uint64_t>(rank) / static_cast<std::uint64_t>(ranks);
  const auto test_end = static_cast<std::uint64_t>(options.test_samples) *
                        static_cast<std::uint64_t>(rank + 1) / static_cast<std::uint64_t>(ranks);
  data.append_rows(layers::Split::test, test_begin, test_end - test_begin, splits.test_x,
                   splits.test_y);
  return splits;
}

/// The training loop for either model (layers::Mlp or layers::Cnn, which share their interface).
template <typename Network>
TrainResult run(cohort::World& world, const TrainOptions& options, std::FILE* log,
                const Splits& splits, Network& model, cohort::ParamRegistry& registry,
                layers::Math& math, const std::string& description) {
  const int ranks = world.size();
  const int rank = world.rank();
  const int local_batch = options.global_batch / ranks;
  const cohort::Stream& stream = math.stream();
  const auto& [sample_floats, train_x, test_x, train_y, test_y] = splits;
  auto upload = [&](const auto& host) {
    const std::size_t bytes = host.size() * sizeof(host[0]);
    cohort::Buffer buffer = math.allocate_bytes(bytes);
    math.upload(buffer.data(), host.data(), bytes);
    return buffer;
  };
  const cohort::Buffer train_x_dev = upload(train_x), train_y_dev = upload(train_y);
  const cohort::Buffer test_x_dev = upload(test_x), test_y_dev = upload(test_y);
  cohort::DistributedSampler sampler(
      {.dataset_size = static_cast<std::uint64_t>(options.train_samples),
       .batch_per_rank = static_cast<std::uint32_t>(local_batch),
       .rank = rank,
       .world_size = ranks,
       .seed = options.seed,
       .last_batch = cohort::LastBatch::drop,
       .resource = nullptr},
      stream);
  cohort::Buffer batch_x = math.allocate_floats(static_cast<std::size_t>(local_batch) *
                                                static_cast<std::size_t>(sample_floats));
  cohort::Buffer batch_y =
      math.allocate_bytes(static_cast<std::size_t>(local_batch) * sizeof(std::int32_t));

  cohort::DataParallelOptions dp_options;
  dp_options.bucket_bytes = options.bucket_bytes;
  dp_options.first_bucket_bytes = options.first_bucket_bytes;
  dp_options.gradient_sync =
      options.zero == 1 ? cohort::GradientSync::reduce_scatter : cohort::GradientSync::all_reduce;
  dp_options.sharding = options.zero == 2   ? cohort::Sharding::zero2
                        : options.zero == 3 ? cohort::Sharding::zero3
                                            : cohort::Sharding::none;
  // The layers read their parameters through dp.param() at each use, so ZeRO-2's all-gathers
  // after a step may overlap the next forward.
  dp_options.overlap_param_gather = options.zero == 2;
  dp_options.init = [&](cohort::DataParallel& d) { model.initialise(d, math, options.seed); };
  dp_options.compute_stream = stream;
  cohort::DataParallel dp(world, registry, dp_options);
  // The test split is scored in batches of at most 1024 rows (256 for the CNN), no wider than
  // this rank's share of it.
  const int kEvalBatch =
      std::min(options.model == Model::cnn ? 256 : 1024, std::max(1, eval_rows(options, ranks)));
  model.bind(dp, math, std::max(local_batch, kEvalBatch));
  const std::unique_ptr<cohort::Optimizer> optimizer = make_optimizer(options, dp);
  cohort::Buffer stats = math.allocate_bytes(2 * sizeof(double));

  TrainResult result;
  result.ranks = ranks;
  result.steps = options.steps;
  result.backend = std::string(cohort::to_string(world.backend()));
  result.device = world.device().to_string();
  result.parameters = model.parameter_count();
  result.buckets = dp.bucket_sizing();
  if (world.device().is_host()) result.host_gemm = layers::describe_host_blas();
  if (log != nullptr) {
    std::fprintf(log,
                 "%s: %d ranks (%s, %s), %zu parameters (%s, %s), global "
                 "batch %d (%d per rank), %s%s, %d steps\n",
                 program_name(options.model), ranks, result.backend.c_str(), result.device.c_str(),
                 result.parameters, description.c_str(), options.precision.c_str(),
                 options.global_batch, local_batch, options.optimizer.c_str(),
                 zero_label(options.zero), options.steps);
    std::fprintf(log, "%s: buckets %s\n", program_name(options.model),
                 result.buckets.describe().c_str());
    if (!result.host_gemm.empty()) {
      std::fprintf(log, "%s: GEMM %s\n", program_name(options.model), result.host_gemm.c_str());
    }
    std::fflush(log);
  }

  // Checkpoints: resume from `latest` (an older valid one if it is damaged), save every
  // --checkpoint-every steps in the background, and on a preemption signal at the next step.
  // The data position saved is the sampler's, in samples of the epoch over all ranks.
  std::unique_ptr<cohort::Checkpointer> checkpoints;
  std::unique_ptr<cohort::PreemptionWatch> preemption;
  int first_step = 0;
  const std::string blob = "seed=" + std::to_string(options.seed);
  // The state after `steps` steps: the sampler then stands at the next step's batch.
  auto state_after = [&](int steps) { return cohort::TrainingState::at(steps, sampler, blob); };
  if (!options.checkpoint_dir.empty()) {
    checkpoints = std::make_unique<cohort::Checkpointer>(
        dp, optimizer.get(),
        cohort::CheckpointOptions{.directory = options.checkpoint_dir,
                                  .keep_last = options.keep_checkpoints,
                                  .fallback = true});
    preemption = std::make_unique<cohort::PreemptionWatch>(world, stream);
    if (const std::optional<cohort::TrainingState> loaded = checkpoints->load()) {
      COHORT_EXPECTS(loaded->user_blob == blob, "the checkpoint in " + options.checkpoint_dir +
                                                    " was saved with " + loaded->user_blob +
                                                    ", not --seed " + std::to_string(options.seed));
      first_step = static_cast<int>(loaded->step);
      result.resumed_from = first_step;
      loaded->seek(sampler);
      if (log != nullptr) {
        std::fprintf(log, "%s: resumed from step %d (%s)\n", program_name(options.model),
                     first_step, options.checkpoint_dir.c_str());
        std::fflush(log);
      }
    }
  }

  const auto features = static_cast<std::size_t>(sample_floats);
  // The clock starts after the warm-up steps (first touches of the arenas, the pool's growth),
  // with the stream drained so that no warm-up work is counted.
  const int timed_from = std::min(first_step + options.warmup_steps, options.steps - 1);
  auto start = Clock::now();
  auto window_start = start;
  int window_steps = 0, comm_samples = 0;
  for (int step = first_step; step < options.steps; ++step) {
    if (step == timed_from && step > first_step) {
      stream.synchronize();
      start = Clock::now();
    }
    const cohort::SampledBatch batch = sampler.next_batch();
    sampler.gather(batch, view_of<float>(train_x_dev, train_x.size(), math), features,
                   view_of<float>(batch_x, batch.size * features, math));
    sampler.gather(batch, view_of<std::int32_t>(train_y_dev, train_y.size(), math), 1,
                   view_of<std::int32_t>(batch_y, batch.size, math));
    math.zero(stats.data(), 2 * sizeof(double));
    model.forward(static_cast<const float*>(batch_x.data()), local_batch);
    model.loss_and_backward(static_cast<const std::int32_t*>(batch_y.data()), local_batch,
                            1.0f / static_cast<float>(local_batch),
                            static_cast<double*>(stats.data()), &dp);
    dp.sync_grads();
    optimizer->step();
    ++window_steps;
    // After the step, as docs/checkpoint.md does: the state saved is the one after it.
    if (preemption && step + 1 < options.steps && preemption->agreed()) {
      checkpoints->save(state_after(step + 1));
      result.preempted = true;
      if (log != nullptr) {
        std::fprintf(log, "%s: preempted; saved step %d and stopped\n", program_name(options.model),
                     step + 1);
        std::fflush(log);
      }
      return result;
    }
    if (checkpoints && options.checkpoint_every > 0 && (step + 1) % options.checkpoint_every == 0 &&
        step + 1 < options.steps) {
      checkpoints->save_async(state_after(step + 1));
    }
    const bool last = step + 1 == options.steps;
    if (last || (options.log_every > 0 && (step + 1) % options.log_every == 0)) {
      const cohort::StepStats step_stats = dp.last_step_stats();
      result.comm_ms += step_stats.comm_ms;
      result.exposed_ms += step_stats.exposed_ms;
      ++comm_samples;
      const auto [loss_sum, correct] = reduce_stats(dp, math, stats);
      const auto now = Clock::now();
      const double window_seconds = std::chrono::duration<double>(now - window_start).count();
      result.final_loss = loss_sum / options.global_batch;
      result.final_train_accuracy = correct / options.global_batch;
      if (log != nullptr) {
        std::fprintf(log, "step %5d  loss %.4f  accuracy %.3f  samples/s %.0f\n", step + 1,
                     result.final_loss, result.final_train_accuracy,
                     window_steps * options.global_batch / window_seconds);
        std::fflush(log);
      }
      window_start = now;
      window_steps = 0;
    }
  }
  if (checkpoints) checkpoints->save(state_after(options.steps));
  stream.synchronize();
  result.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  result.samples_per_second =
      (options.steps - timed_from) * static_cast<double>(options.global_batch) / result.seconds;
  result.comm_ms /= std::max(comm_samples, 1);
  result.exposed_ms /= std::max(comm_samples, 1);

  // Test accuracy: each rank scores its slice; the counts are summed.
  math.zero(stats.data(), 2 * sizeof(double));
  const auto test_rows = static_cast<int>(test_y.size());
  for (int first = 0; first < test_rows; first += kEvalBatch) {
    const int rows = std::min(kEvalBatch, test_rows - first);
    model.forward(
        static_cast<const float*>(test_x_dev.data()) + static_cast<std::size_t>(first) * features,
        rows);
    model.loss_and_backward(static_cast<const std::int32_t*>(test_y_dev.data()) + first, rows, 0.0f,
                            static_cast<double*>(stats.data()), nullptr);
  }
  result.test_accuracy = reduce_stats(dp, math, stats).second / options.test_samples;
  // Read while every rank of this process still holds its memory: none returns (and frees)
  // before all have read.
  result.memory = memory_per_parameter(world.device(), model.parameter_count(),
                                       options.ranks_in_process, plan_memory(options, ranks));
  // The largest bucket (ZeRO-2) or unit (ZeRO-3): what the buffers in flight are measured in.
  result.memory["largest_segment_bytes"] =
      dp.shard_layout().largest_segment() * cohort::size_of(dp.dtype());
  world.group().barrier("train_mlp/memory-report");

  // The checksum reads one parameter at a time where the model can (a sharded model is never
  // whole on one rank); every parameter is kept only when asked for.
  auto add = [&](const std::vector<float>& values) {
    for (const float value : values) {
      result.param_checksum += static_cast<double>(value);
      result.param_abs_sum += std::abs(static_cast<double>(value));
    }
    if (options.keep_params)
      result.params.insert(result.params.end(), values.begin(), values.end());
  };
  if constexpr (requires { model.visit_parameters(add); }) {
    model.visit_parameters(add);
  } else {
    add(model.download_parameters());
  }
  if (log != nullptr) {
    std::fprintf(log, "%s: %s\n", program_name(options.model),
                 describe_memory(result.memory).c_str());
    std::fprintf(
        log,
        "%s: final loss %.4f, test accuracy %.4f (%d samples), %.1f s, %.0f "
        "samples/s, param checksum %.6f; gradient all-reduce %.3f ms/step, exposed %.3f ms\n",
        program_name(options.model), result.final_loss, result.test_accuracy, options.test_samples,
        result.seconds, result.samples_per_second, result.param_checksum, result.comm_ms,
        result.exposed_ms);
    std::fflush(log);
  }
  return result;
}

}  // namespace

TrainOptions cnn_defaults() {
  TrainOptions options;
  options.model = Model::cnn;
  options.steps = 150;
  options.global_batch = 128;
  options.lr = 0.01f;
  options.train_samples = 12800;
  options.test_samples = 2048;
  options.log_every = 25;
  return options;
}

const char* program_name(Model model) noexcept {
  return model == Model::cnn ? "train_cnn" : "train_mlp";
}

TrainResult train(cohort::World& world, const TrainOptions& options, std::FILE* log) {
  const int ranks = world.size();
  const int rank = world.rank();
  COHORT_EXPECTS(options.steps > 0, "--steps must be positive");
  COHORT_EXPECTS(options.warmup_steps >= 0 && options.warmup_steps < options.steps,
                 "--warmup-steps " + std::to_string(options.warmup_steps) +
                     " must be at least 0 and fewer than --steps " + std::to_string(options.steps));
  COHORT_EXPECTS(options.global_batch > 0 && options.global_batch % ranks == 0,
                 "--global-batch " + std::to_string(options.global_batch) +
                     " must be a positive multiple of the " + std::to_string(ranks) + " ranks");
  COHORT_EXPECTS(options.precision == "f32" || options.precision == "bf16",
                 "--precision " + options.precision + ": use f32 or bf16");
  COHORT_EXPECTS(options.train_samples >= options.global_batch && options.test_samples >= ranks,
                 "the training set must hold a global batch and the test set a row per rank");
  if (log != nullptr && rank != 0) log = nullptr;
  const cohort::DType dtype =
      options.precision == "bf16" ? cohort::DType::bf16 : cohort::DType::f32;
  const cohort::Stream stream = cohort::Stream::create(world.device());
  layers::Math math(stream);
  cohort::ParamRegistry registry;
  if (options.model == Model::mlp) {
    const Splits splits = make_splits(layers::GaussianMixture({.features = kFeatures,
                                                               .classes = kClasses,
                                                               .clusters_per_class = 4,
                                                               .centre_spread = 1.0f,
                                                               .noise = 1.0f,
                                                               .seed = options.seed}),
                                      kFeatures, options, rank, ranks);
    layers::Mlp model({.inputs = kFeatures,
                       .hidden = options.hidden,
                       .layers = options.layers,
                       .classes = kClasses,
                       .dtype = dtype},
                      registry);
    return run(
        world, options, log, splits, model, registry, math,
        std::to_string(options.layers) + " layers, hidden " + std::to_string(options.hidden));
  }
  const layers::ShapeImages images({.size = kImageSize, .noise = 0.3f, .seed = options.seed});
  const Splits splits = make_splits(images, images.pixels(), options, rank, ranks);
  layers::Cnn model({.image_size = kImageSize,
                     .channels = 1,
                     .width = options.width,
                     .classes = layers::ShapeImages::kClasses,
                     .bn_group = kBatchNormGroup,
                     .layout = layers::Layout::nhwc,
                     .dtype = dtype},
                    registry);
  COHORT_EXPECTS((options.global_batch / ranks) % kBatchNormGroup == 0,
                 "--global-batch " + std::to_string(options.global_batch) + " over " +
                     std::to_string(ranks) + " ranks: each rank's batch must be a multiple of " +
                     std::to_string(kBatchNormGroup) + " (the batch-norm group)");
  return run(world, options, log, splits, model, registry, math,
             "4 convolutions, width " + std::to_string(options.width));
}

nlohmann::json to_json(const TrainResult& result, const TrainOptions& options) {
  nlohmann::json out;
  out["ranks"] = result.ranks;
  out["steps"] = result.steps;
  out["backend"] = result.backend;
  out["device"] = result.device;
  out["final_loss"] = result.final_loss;
  out["final_train_accuracy"] = result.final_train_accuracy;
  out["test_accuracy"] = result.test_accuracy;
  out["param_checksum"] = result.param_checksum;
  out["param_abs_sum"] = result.param_abs_sum;
  out["parameters"] = result.parameters;
  out["seconds"] = result.seconds;
  out["samples_per_second"] = result.samples_per_second;
  out["comm_ms_per_step"] = result.comm_ms;
  out["exposed_comm_ms_per_step"] = result.exposed_ms;
  out["buckets"] = layers::bucket_json(result.buckets);
  out["host_gemm"] = result.host_gemm;
  out["memory"] = result.memory;
  out["model"] = options.model == Model::cnn ? "cnn" : "mlp";
  out["options"] = {{"global_batch", options.global_batch},
                    {"seed", options.seed},
                    {"warmup_steps", options.warmup_steps},
                    {"hidden", options.hidden},
                    {"layers", options.layers},
                    {"width", options.width},
                    {"optimizer", options.optimizer},
                    {"lr", options.lr},
                    {"zero", options.zero},
                    {"precision", options.precision},
                    {"train_samples", options.train_samples},
                    {"test_samples", options.test_samples}};
  return out;
}

}  // namespace train_mlp
