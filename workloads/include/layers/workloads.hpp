#pragma once

/// @file
/// Model-shaped workloads for the scaling benchmark: the parameter lists of published models
/// (names, shapes, in forward order) and each layer's forward FLOPs per sample, so that a
/// benchmark can reproduce a model's gradient traffic and its backward timeline without the model.
///
/// | workload    | parameters | tensors | sample                    | forward FLOPs per sample |
/// |-------------|-----------:|--------:|---------------------------|--------------------------|
/// | resnet50    | 25,557,032 |     161 | a 224x224 image           | about 8.2 G (4.1 G MACs) |
/// | bert-large  | 335,141,888|     391 | a sequence of 128 tokens  | about 2 x 302 M x 128    |
/// | gpt2-124m   | 124,439,808|     148 | a sequence of 1024 tokens | about 2 x 124 M x 1024 +
/// attention |
///
/// ResNet-50 is torchvision's v1.5 (stride on the 3x3 convolution), batch-norm weights and biases
/// included; BERT-large is BertModel (embeddings, 24 layers, pooler); GPT-2 124M is the GPT-2
/// small of llm.c, its output projection tied to the token embedding. ResNet-50's convolutions
/// carry their geometry, so that a benchmark on a GPU can run them as real cuDNN convolutions at
/// the model's shapes (and on host ranks as the host convolutions, for a check).

#include <layers/cnn_ops.hpp>
#include <layers/mlp.hpp>

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

namespace layers {

struct WorkloadParam {
  std::string name;
  std::vector<std::size_t> shape;
};

/// A step of the forward pass: the parameters it uses and its forward FLOPs per sample. Backward
/// runs the layers in reverse, each taking twice its forward FLOPs, and the layer's parameters are
/// ready when it is done. A layer may have no parameters (GPT-2's tied output projection).
struct WorkloadLayer {
  std::string name;
  std::vector<WorkloadParam> params;
  double forward_flops = 0.0;
  /// A convolution's geometry for one sample (`input.n` = 1; a batch sets n), NCHW. Its filter
  /// is `params[0]`, whose element count is `conv->weight_count()`. Empty for other layers.
  std::optional<ConvGeometry> conv = std::nullopt;
};

struct Workload {
  std::string name;
  std::string sample_unit;  ///< what one sample is: "images", "sequences", "samples"
  std::vector<WorkloadLayer> layers;
  int default_batch_per_rank = 32;

  std::size_t parameter_count() const;
  std::size_t tensor_count() const;
  double forward_flops() const;
};

/// "mlp", "resnet50", "bert-large", "gpt2-124m". @throws cohort::InvalidArgument for others.
Workload make_workload(const std::string& name, const MlpConfig& mlp = {});
/// The MLP's parameters and FLOPs, as `Mlp` registers them.
Workload mlp_workload(const MlpConfig& config);

}  // namespace layers
