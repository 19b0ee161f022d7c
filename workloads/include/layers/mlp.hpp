#pragma once

/// @file
/// `Mlp`: a multi-layer perceptron classifier (linear layers with ReLU between them, softmax
/// cross-entropy at the end) whose parameters live in a `cohort::DataParallel`'s arenas.
///
///     cohort::ParamRegistry registry;
///     layers::Mlp model({.inputs = 32, .hidden = 256, .layers = 3, .classes = 10}, registry);
///     cohort::DataParallel dp(world, registry, {.init = [&](auto& d) { model.initialise(d, math,
///     seed); },
///                                               .compute_stream = math.stream()});
///     model.bind(dp, math, batch);
///     model.forward(x, batch);
///     model.loss_and_backward(labels, batch, 1.0f / batch, stats, &dp);   // marks each layer
///     ready
///
/// Backward marks each layer's gradients ready (`grad_ready`) as soon as it has enqueued them, so
/// the data-parallel engine all-reduces the last layers while the first are still computed.
/// Each layer is a unit (ZeRO-3, Note [ZeRO-3] in data_parallel.hpp): gathered before forward
/// uses it and released after (all but the last, which backward takes over), gathered again for
/// backward and released once its gradients are marked; in the other modes these calls move
/// nothing. With bf16 parameters, the layers compute in f32 from an f32 copy of the layer's
/// weights cast just before each use (one copy, the size of the largest layer) and cast their
/// gradients to bf16 into the engine's buffers.

#include <layers/math.hpp>

#include <cohort/ddp/data_parallel.hpp>
#include <cohort/ddp/param_registry.hpp>

#include <cstdint>
#include <functional>
#include <vector>

namespace layers {

struct MlpConfig {
  int inputs = 32;
  int hidden = 256;
  /// Linear layers, at least 1 (1: a linear classifier).
  int layers = 3;
  int classes = 10;
  /// The parameters' dtype: f32 or bf16.
  cohort::DType dtype = cohort::DType::f32;
};

class Mlp {
 public:
  /// Registers "fc<i>.weight" [out, in] and "fc<i>.bias" [out], in forward order, and the unit
  /// "fc<i>" of the two.
  Mlp(const MlpConfig& config, cohort::ParamRegistry& registry);

  const MlpConfig& config() const noexcept { return config_; }
  std::size_t parameter_count() const noexcept;
  /// Inputs and outputs of linear layer `layer`.
  int fan_in(int layer) const noexcept;
  int fan_out(int layer) const noexcept;
  /// Forward FLOPs of linear layer `layer` per sample (its backward is twice that).
  double forward_flops(int layer) const noexcept;

  /// Writes initial values: weights uniform in +-sqrt(6 / fan_in) (He), biases zero, drawn from
  /// `seed` alone. Waits for the copies.
  void initialise(cohort::DataParallel& dp, Math& math, std::uint64_t seed) const;

  /// Allocates workspaces for batches of up to `max_batch` rows. `math` must run on the
  /// DataParallel's compute stream.
  void bind(cohort::DataParallel& dp, Math& math, int max_batch);

  /// Enqueues the forward pass over `batch` rows of `inputs` [batch, config().inputs].
  void forward(const float* inputs, int batch);
  /// Enqueues softmax cross-entropy (loss sum and correct count added to `stats[0..1]`), then,
  /// when `dp` is not null, the backward pass with loss gradient scale `grad_scale`, marking each
  /// layer's gradients ready on `dp` as soon as they are enqueued.
  void loss_and_backward(const std::int32_t* labels, int batch, float grad_scale, double* stats,
                         cohort::DataParallel* dp);

  /// The parameters in f32, in registration order (waits for the stream).
  std::vector<float> download_parameters() const;
  /// Calls `visit` with each parameter's values in f32, in registration order, one at a time
  /// (waits for the stream): for reading a sharded model without holding all of it.
  void visit_parameters(const std::function<void(const std::vector<float>&)>& visit) const;

 private:
  struct Layer {
    cohort::ParamHandle weight, bias;
    cohort::UnitHandle unit;
    cohort::Buffer activation;  // [max_batch, fan_out]
  };
  /// The layer's weights and bias in f32, for the next kernels on the stream: views of the
  /// engine's (f32), or the f32 copy cast from them now (bf16). Its unit must be gathered.
  const float* weight(std::size_t layer);
  const float* bias(std::size_t layer);

  MlpConfig config_;
  std::vector<Layer> layers_;
  cohort::DataParallel* dp_ = nullptr;
  Math* math_ = nullptr;
  int max_batch_ = 0;
  const float* inputs_ = nullptr;
  cohort::Buffer grad_a_, grad_b_;  // [max_batch, widest]
  // bf16 parameters only: f32 copies of one layer's weights, bias and gradients, each the size of
  // the largest layer's.
  cohort::Buffer weight32_, bias32_, grad_weight32_, grad_bias32_;
};

}  // namespace layers
