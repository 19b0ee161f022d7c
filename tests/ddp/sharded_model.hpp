#pragma once

// A model for the sharded modes' tests: three units of odd-sized parameters (so segments are
// padded and pieces cut through parameters), and one training program written once for every
// mode: it gathers each unit for forward and backward (nothing moves outside ZeRO-3), writes
// each gradient as a function of the parameters, the rank and the step, marks it, syncs and
// steps. The result is every parameter in registration order, so modes compare element for
// element.

#include <cohort/checkpoint/checkpoint.hpp>
#include <cohort/comm/world.hpp>
#include <cohort/ddp/data_parallel.hpp>
#include <cohort/ddp/param_registry.hpp>
#include <cohort/optim/adamw.hpp>
#include <cohort/optim/clip.hpp>
#include <cohort/optim/data_parallel_target.hpp>
#include <cohort/optim/loss_scaler.hpp>
#include <cohort/optim/sgd.hpp>

#include "support/test_helpers.hpp"

#include <cmath>
#include <cstddef>
#include <memory>
#include <vector>

namespace cohort::test {

struct ShardedModel {
  std::vector<ParamHandle> params;
  std::vector<UnitHandle> units;

  /// Registers a.weight [37, 29], a.bias [37], b.weight [53, 37], b.bias [53], c.weight [10, 53],
  /// c.bias [10] in `dtype`, and the units a, b, c.
  explicit ShardedModel(ParamRegistry& registry, DType dtype = DType::f32) {
    const std::size_t widths[] = {29, 37, 53, 10};
    const char* names[] = {"a", "b", "c"};
    for (std::size_t layer = 0; layer < 3; ++layer) {
      const ParamHandle weight = registry.add(std::string(names[layer]) + ".weight",
                                              {widths[layer + 1], widths[layer]}, dtype);
      const ParamHandle bias =
          registry.add(std::string(names[layer]) + ".bias", {widths[layer + 1]}, dtype);
      params.push_back(weight);
      params.push_back(bias);
      units.push_back(registry.add_unit(names[layer], {weight, bias}));
    }
  }
};

/// What a run of the program may vary.
struct ShardedRun {
  Sharding sharding = Sharding::none;
  DType dtype = DType::f32;
  int steps = 3;
  int micro_batches = 1;  ///< > 1: all but the last inside no_sync
  bool sgd = false;       ///< SGD with momentum instead of AdamW
  float clip = 0.0f;      ///< > 0: clip_grad_norm before each step
  bool scaler = false;    ///< a loss scaler (gradients scaled by it)
  bool overlap_param_gather = false;
  int buckets_in_flight = kDefaultBucketsInFlight;
  std::size_t bucket_bytes = 2048;  ///< small: several buckets, and parameters larger than one
  std::size_t first_bucket_bytes = 512;
  std::size_t last_bucket_bytes = 512;
  /// Checkpoints (Note [Sharded checkpoints]): with a directory, the run first loads the latest
  /// checkpoint there, if any, and goes on from its step to `steps`; it saves after step
  /// `save_at` (its count of steps done), if set.
  std::string checkpoint_dir;
  int save_at = -1;
};

/// The initial value of element i of parameter p (rank 0's; the other ranks' are overwritten by
/// the broadcast).
inline float initial_value(std::size_t p, std::size_t i, int rank) {
  return static_cast<float>(0.3 *
                            std::sin(0.7 * static_cast<double>(i) + 1.3 * static_cast<double>(p))) +
         static_cast<float>(rank);
}

/// The gradient of element i with value `value` on `rank` at `step` of micro-batch `micro`.
inline float gradient_value(float value, std::size_t p, std::size_t i, int rank, int step,
                            int micro) {
  return static_cast<float>(0.5 * std::sin(0.11 * static_cast<double>(i) +
                                           0.9 * static_cast<double>(p) + 0.7 * rank + 0.3 * step +
                                           1.7 * micro) +
                            0.1 * static_cast<double>(value));
}

/// Writes `values` (as f32) into `view` (f32 or 16-bit) on the host.
inline void write_values(const TensorView& view, const std::vector<float>& values) {
  if (view.dtype() == DType::f32) {
    std::copy(values.begin(), values.end(), static_cast<float*>(view.data()));
  } else {
    auto* out = static_cast<bfloat16*>(view.data());
    for (std::size_t i = 0; i < values.size(); ++i) out[i] = bfloat16(values[i]);
  }
}

inline std::vector<float> read_values(const TensorView& view) {
  std::vector<float> values(view.count());
  if (view.dtype() == DType::f32) {
    std::copy_n(static_cast<const float*>(view.data()), view.count(), values.begin());
  } else {
    const auto* in = static_cast<const bfloat16*>(view.data());
    for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(in[i]);
  }
  return values;
}

/// Trains the model with `run` on this rank; returns every parameter, registration order, as f32.
/// Backward adds each micro-batch's gradient to what `grad(h)` holds, after `zero_grads()` at
/// the start of each step: the accumulation every mode supports alike.
inline std::vector<float> train_sharded(World& world, const ShardedRun& run) {
  ParamRegistry registry;
  const ShardedModel model(registry, run.dtype);
  DataParallelOptions options;
  options.sharding = run.sharding;
  options.bucket_bytes = run.bucket_bytes;
  options.first_bucket_bytes = run.first_bucket_bytes;
  options.last_bucket_bytes = run.last_bucket_bytes;
  options.overlap_param_gather = run.overlap_param_gather;
  options.buckets_in_flight = run.buckets_in_flight;
  options.init = [&](DataParallel& dp) {
    for (std::size_t p = 0; p < model.params.size(); ++p) {
      const UnitHandle unit = model.units[p / 2];
      if (p % 2 == 0) dp.gather(unit);
      const TensorView view = dp.param(model.params[p]);
      std::vector<float> values(view.count());
      for (std::size_t i = 0; i < values.size(); ++i) values[i] = initial_value(p, i, world.rank());
      write_values(view, values);
      if (p % 2 == 1) dp.release(unit);
    }
  };
  DataParallel dp(world, registry, options);
  std::unique_ptr<Optimizer> optimizer;
  if (run.sgd) {
    optimizer = std::make_unique<Sgd>(target_of(dp), SgdOptions{.lr = 0.05f, .momentum = 0.9f});
  } else {
    optimizer = std::make_unique<AdamW>(target_of(dp), AdamWOptions{.lr = 0.01f});
  }
  std::unique_ptr<LossScaler> scaler;
  if (run.scaler) {
    scaler =
        std::make_unique<LossScaler>(world.device(), LossScalerOptions{.initial_scale = 256.0f});
    optimizer->set_loss_scaler(scaler.get());
  }
  const float scale = run.scaler ? 256.0f : 1.0f;
  const std::size_t layers = model.units.size();
  std::unique_ptr<Checkpointer> checkpoints;
  int first_step = 0;
  if (!run.checkpoint_dir.empty()) {
    checkpoints = std::make_unique<Checkpointer>(
        dp, optimizer.get(), CheckpointOptions{.directory = run.checkpoint_dir}, scaler.get());
    if (const std::optional<TrainingState> loaded = checkpoints->load()) {
      first_step = static_cast<int>(loaded->step);
    }
  }
  for (int step = first_step; step < run.steps; ++step) {
    dp.zero_grads();  // backward adds to the gradients (Note [Who zeroes gradients])
    for (int micro = 0; micro < run.micro_batches; ++micro) {
      std::optional<DataParallel::NoSync> window;
      if (micro + 1 < run.micro_batches) window.emplace(dp);
      // Forward: each unit in turn, the last kept for backward.
      std::vector<std::vector<float>> values(model.params.size());
      for (std::size_t layer = 0; layer < layers; ++layer) {
        dp.gather(model.units[layer], Pass::forward);
        for (std::size_t k = 0; k < 2; ++k) {
          values[2 * layer + k] = read_values(dp.param(model.params[2 * layer + k]));
        }
        if (layer + 1 < layers) dp.release(model.units[layer]);
      }
      // Backward: the last unit first; each gradient marked once written.
      for (std::size_t layer = layers; layer-- > 0;) {
        dp.gather(model.units[layer], Pass::backward);
        for (std::size_t k = 2; k-- > 0;) {
          const std::size_t p = 2 * layer + k;
          const TensorView grad = dp.grad(model.params[p]);
          std::vector<float> grads = read_values(grad);
          for (std::size_t i = 0; i < grads.size(); ++i) {
            grads[i] += scale * gradient_value(values[p][i], p, i, world.rank(), step, micro);
          }
          write_values(grad, grads);
          dp.grad_ready(model.params[p]);
        }
        dp.release(model.units[layer]);
      }
      dp.sync_grads();
    }
    if (run.clip > 0.0f) clip_grad_norm(*optimizer, run.clip);
    optimizer->step();
    if (checkpoints && step + 1 == run.save_at)
      checkpoints->save(TrainingState{step + 1, 0, 0, {}});
  }
  std::vector<float> result;
  for (std::size_t layer = 0; layer < layers; ++layer) {
    dp.gather(model.units[layer]);
    for (std::size_t k = 0; k < 2; ++k) {
      const std::vector<float> values = read_values(dp.param(model.params[2 * layer + k]));
      result.insert(result.end(), values.begin(), values.end());
    }
    dp.release(model.units[layer]);
  }
  dp.compute_stream().synchronize();
  return result;
}

}  // namespace cohort::test
