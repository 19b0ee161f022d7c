#pragma once

/// @file
/// `Cnn`: a small ResNet-style image classifier whose parameters live in a `cohort::DataParallel`'s
/// arenas, the convolutional sibling of `Mlp` with the same life cycle (register, initialise, bind,
/// forward, loss_and_backward):
///
///     stem   conv 3x3 (1 -> width)            batch norm, ReLU
///     block  conv 3x3 (width -> width)        batch norm, ReLU
///            conv 3x3 (width -> width)        batch norm, + stem output, ReLU     (residual)
///     down   conv 3x3 stride 2 (width -> 2 width)  batch norm, ReLU
///     head   global average pool, linear (2 width -> classes), softmax cross-entropy
///
/// Note [Ghost batch norm]
/// Batch norm normalises over groups of `bn_group` consecutive samples of a rank's batch rather
/// than over the whole batch. A rank's batch is a contiguous slice of the global batch
/// (`cohort::DistributedSampler`), so with a group that divides every rank's batch the groups,
/// and therefore every sample's forward and backward arithmetic, are the same on 1 rank and on 8:
/// runs on different numbers of ranks differ only by the rounding of the gradient all-reduce, as
/// the MLP's do. (Batch norm over each rank's whole batch would make the model depend on the
/// number of ranks; synchronised batch norm would add a collective per layer.) Evaluation uses the
/// statistics of its own groups too (a batch that is not a multiple of the group is one group), so
/// the model keeps no running averages.

#include <layers/cnn_ops.hpp>
#include <layers/math.hpp>

#include <cohort/ddp/data_parallel.hpp>
#include <cohort/ddp/param_registry.hpp>

#include <cstdint>
#include <vector>

namespace layers {

struct CnnConfig {
  int image_size = 16;
  int channels = 1;
  int width = 8;
  int classes = 8;
  /// Samples per batch-norm statistics group (Note [Ghost batch norm]).
  int bn_group = 16;
  Layout layout = Layout::nhwc;
  /// The parameters' dtype: f32 or bf16 (f32 math on f32 copies, as Mlp).
  cohort::DType dtype = cohort::DType::f32;
};

class Cnn {
 public:
  /// Registers every convolution's "<unit>.conv.weight", its "<unit>.bn.weight" and
  /// "<unit>.bn.bias", then "fc.weight" and "fc.bias", in forward order.
  Cnn(const CnnConfig& config, cohort::ParamRegistry& registry);

  const CnnConfig& config() const noexcept { return config_; }
  std::size_t parameter_count() const noexcept;
  /// Forward FLOPs per sample (convolutions and the linear layer).
  double forward_flops() const noexcept;

  /// Convolutions and the linear layer uniform in +-sqrt(6 / fan_in), batch norm scale 1 and
  /// shift 0, drawn from `seed` alone. Waits for the copies.
  void initialise(cohort::DataParallel& dp, Math& math, std::uint64_t seed) const;

  /// Allocates workspaces for batches of up to `max_batch` images. `math` must run on the
  /// DataParallel's compute stream.
  void bind(cohort::DataParallel& dp, Math& math, int max_batch);

  /// Enqueues the forward pass over `batch` images [batch, image_size, image_size, channels]
  /// (NHWC; with one channel the same bytes as NCHW).
  void forward(const float* images, int batch);
  /// As Mlp::loss_and_backward.
  void loss_and_backward(const std::int32_t* labels, int batch, float grad_scale, double* stats,
                         cohort::DataParallel* dp);

  /// The parameters in f32, in registration order (waits for the stream).
  std::vector<float> download_parameters() const;

 private:
  /// A parameter and, for bf16 parameters, its f32 copy and f32 gradient.
  struct Param {
    cohort::ParamHandle handle;
    cohort::Buffer value32, grad32;
  };
  /// Convolution, batch norm, optional residual input, ReLU.
  struct Unit {
    ConvGeometry conv;  // for batch 1; the batch is set per call
    int residual_from = -1;
    Param weight, gamma, beta;
    cohort::Buffer conv_out, activation, grad, saved_mean, saved_inv_std;
  };
  const float* value(const Param& param) const;
  float* grad(Param& param, cohort::DataParallel& dp) const;
  void param_in(Param& param);
  void grad_out(Param& param, cohort::DataParallel& dp);
  ConvGeometry at_batch(const Unit& unit, int batch) const;
  cohort::TensorView f32_view(const void* data, std::size_t count) const;

  CnnConfig config_;
  std::vector<Unit> units_;
  Param fc_weight_, fc_bias_;
  std::unique_ptr<CnnOps> ops_;
  cohort::DataParallel* dp_ = nullptr;
  Math* math_ = nullptr;
  int max_batch_ = 0, batch_ = 0;
  const float* images_ = nullptr;
  cohort::Buffer pooled_, logits_, grad_logits_, grad_pooled_, grad_conv_;
};

}  // namespace layers
