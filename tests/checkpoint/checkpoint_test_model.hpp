#pragma once

// A small model for checkpoint tests: three parameters of awkward sizes, an optimizer of each kind,
// and deterministic gradients that depend on the step, the rank and the element, so that a resumed
// run is bitwise equal to an uninterrupted one only if every piece of state came back.

#include "support/test_helpers.hpp"

#include <cohort/checkpoint/checkpoint.hpp>
#include <cohort/comm/world.hpp>
#include <cohort/ddp/data_parallel.hpp>
#include <cohort/optim/data_parallel_target.hpp>
#include <cohort/optim/loss_scaler.hpp>
#include <cohort/optim/sharded_optimizer.hpp>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace cohort_test {

enum class OptimizerKind { none, sgd, adamw, zero1_sgd, zero1_adamw };

inline const char* name_of(OptimizerKind kind) {
  switch (kind) {
    case OptimizerKind::none:
      return "none";
    case OptimizerKind::sgd:
      return "sgd";
    case OptimizerKind::adamw:
      return "adamw";
    case OptimizerKind::zero1_sgd:
      return "zero1_sgd";
    case OptimizerKind::zero1_adamw:
      return "zero1_adamw";
  }
  return "?";
}

inline cohort::ParamRegistry test_registry(cohort::DType dtype, bool extra = false) {
  cohort::ParamRegistry registry;
  registry.add("layer.weight", {37, 5}, dtype);
  registry.add("layer.bias", {300}, dtype);
  registry.add(extra ? "other.weight" : "head.weight", {3, 3}, dtype);
  return registry;
}

/// One rank's model, optimizer and (for 16-bit) loss scaler.
struct TestRun {
  std::unique_ptr<cohort::DataParallel> dp;
  std::unique_ptr<cohort::Optimizer> optimizer;
  std::unique_ptr<cohort::LossScaler> scaler;
  OptimizerKind kind;

  TestRun(cohort::World& world, const cohort::ParamRegistry& registry, OptimizerKind kind_,
          bool with_scaler = false)
      : kind(kind_) {
    const bool zero1 = kind == OptimizerKind::zero1_sgd || kind == OptimizerKind::zero1_adamw;
    cohort::DataParallelOptions options;
    options.bucket_bytes = 1024;
    options.first_bucket_bytes = 512;
    options.gradient_sync =
        zero1 ? cohort::GradientSync::reduce_scatter : cohort::GradientSync::all_reduce;
    options.init = [](cohort::DataParallel& d) {
      fill(d.param_arena().slice(0, d.plan().used_count),
           [](std::size_t e) { return std::sin(0.1 * static_cast<double>(e)) + 0.01; });
    };
    dp = std::make_unique<cohort::DataParallel>(world, registry, options);
    const cohort::OptimizerTarget target = cohort::target_of(*dp);
    const cohort::SgdOptions sgd{.lr = 0.05f, .momentum = 0.9f, .weight_decay = 1e-3f};
    const cohort::AdamWOptions adamw{.lr = 1e-2f,
                                     .schedule = cohort::LrSchedule::warmup_cosine(2, 20, 0.1f)};
    switch (kind) {
      case OptimizerKind::none:
        break;
      case OptimizerKind::sgd:
        optimizer = std::make_unique<cohort::Sgd>(target, sgd);
        break;
      case OptimizerKind::adamw:
        optimizer = std::make_unique<cohort::AdamW>(target, adamw);
        break;
      case OptimizerKind::zero1_sgd:
        optimizer = std::make_unique<cohort::ShardedOptimizer>(target, sgd,
                                                               cohort::sharded_options_of(*dp));
        break;
      case OptimizerKind::zero1_adamw:
        optimizer = std::make_unique<cohort::ShardedOptimizer>(target, adamw,
                                                               cohort::sharded_options_of(*dp));
        break;
    }
    if (with_scaler && optimizer) {
      scaler = std::make_unique<cohort::LossScaler>(
          world.device(), cohort::LossScalerOptions{.initial_scale = 8.0f, .growth_interval = 2});
      optimizer->set_loss_scaler(scaler.get());
    }
  }

  /// Writes `value(element)` into a host arena of any dtype.
  template <typename Fn>
  static void fill(cohort::TensorView view, Fn value) {
    cohort::visit_dtype(view.dtype(), [&]<typename T>(T) {
      T* data = static_cast<T*>(view.data());
      for (std::size_t e = 0; e < view.count(); ++e) data[e] = from_double<T>(value(e));
    });
  }

  /// One training step with gradients that depend on (step, rank, element).
  void step(int step) {
    dp->compute_stream().synchronize();
    const int rank = dp->world().rank();
    const double scale = scaler ? 8.0 : 1.0;
    // The arena's tail padding (past the used count) keeps zero gradients, as in real training.
    fill(dp->grad_arena().slice(0, dp->plan().used_count), [&](std::size_t e) {
      return scale * 0.1 * std::sin(0.37 * step + 0.011 * static_cast<double>(e) + 0.5 * rank);
    });
    for (std::uint32_t i = 0; i < dp->registry().size(); ++i)
      dp->grad_ready(cohort::ParamHandle{i});
    dp->sync_grads();
    if (optimizer) optimizer->step();
    dp->compute_stream().synchronize();
  }

  /// One step of a data-parallel model on an f32 arena: the gradient is the mean over the global
  /// batch (step s: samples [s G, (s + 1) G)) of each sample's gradient, each rank's the mean
  /// over its slice of G / ranks samples, summed in f32 and averaged over the ranks. The same
  /// global gradient on any number of ranks, summed in another order.
  void step_on_batch(int step, int global_batch) {
    dp->compute_stream().synchronize();
    const int ranks = dp->world().size();
    const int local = global_batch / ranks;
    const std::size_t used = dp->plan().used_count;
    std::vector<float> sum(used, 0.0f);
    for (int i = 0; i < local; ++i) {
      const int sample = step * global_batch + dp->world().rank() * local + i;
      for (std::size_t e = 0; e < used; ++e) {
        sum[e] +=
            static_cast<float>(0.1 * std::sin(0.37 * sample + 0.011 * static_cast<double>(e)));
      }
    }
    fill(dp->grad_arena().slice(0, used),
         [&](std::size_t e) { return static_cast<double>(sum[e] / static_cast<float>(local)); });
    for (std::uint32_t i = 0; i < dp->registry().size(); ++i)
      dp->grad_ready(cohort::ParamHandle{i});
    dp->sync_grads();
    if (optimizer) optimizer->step();
    dp->compute_stream().synchronize();
  }

  /// The parameters' bytes (the used part of the arena).
  std::vector<unsigned char> params() const {
    dp->compute_stream().synchronize();
    const std::size_t bytes = dp->plan().used_count * cohort::size_of(dp->dtype());
    const auto* data = static_cast<const unsigned char*>(dp->param_arena().data());
    return {data, data + bytes};
  }
};

/// The run's Checkpointer: with its optimizer and loss scaler, or `without_optimizer` when it has
/// no optimizer.
inline std::unique_ptr<cohort::Checkpointer> checkpointer_of(TestRun& run,
                                                             cohort::CheckpointOptions options) {
  if (!run.optimizer) {
    return std::make_unique<cohort::Checkpointer>(*run.dp, cohort::without_optimizer,
                                                  std::move(options));
  }
  return std::make_unique<cohort::Checkpointer>(*run.dp, run.optimizer.get(), std::move(options),
                                                run.scaler.get());
}

/// A fresh folder under the temporary directory, removed with the object.
class TemporaryFolder {
 public:
  TemporaryFolder() {
    std::random_device random;
    path_ = std::filesystem::temp_directory_path() /
            ("cohort-checkpoint-test-" + std::to_string(random()) + std::to_string(random()));
    std::filesystem::create_directories(path_);
  }
  ~TemporaryFolder() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TemporaryFolder(const TemporaryFolder&) = delete;
  TemporaryFolder& operator=(const TemporaryFolder&) = delete;
  const std::filesystem::path& path() const noexcept { return path_; }

 private:
  std::filesystem::path path_;
};

inline cohort::WorldOptions host_world() {
  cohort::WorldOptions options;
  options.backend = cohort::BackendChoice::host;
  return options;
}

}  // namespace cohort_test
