// The model-shaped workloads of scaling_bench: ResNet-50's parameter list and the geometry of its
// convolutions, which a GPU runs as real cuDNN convolutions, must be the published model's.

#include <layers/workloads.hpp>

#include <gtest/gtest.h>

#include <cstddef>
#include <map>
#include <string>

namespace {

using layers::ConvGeometry;
using layers::Shape4;
using layers::Workload;
using layers::WorkloadLayer;

std::size_t elements(const layers::WorkloadParam& param) {
  std::size_t total = 1;
  for (std::size_t extent : param.shape) total *= extent;
  return total;
}

std::map<std::string, ConvGeometry> convs_by_name(const Workload& w) {
  std::map<std::string, ConvGeometry> convs;
  for (const WorkloadLayer& layer : w.layers) {
    if (layer.conv) convs.emplace(layer.name, *layer.conv);
  }
  return convs;
}

TEST(Workloads, ResNet50HasThePublishedParametersAndFlops) {
  const Workload w = layers::make_workload("resnet50");
  EXPECT_EQ(w.parameter_count(), 25'557'032u);  // torchvision's resnet50
  EXPECT_EQ(w.tensor_count(), 161u);
  // 4.09 G multiply-adds per 224x224 image (torchvision), plus the norms' few FLOPs per output.
  EXPECT_GT(w.forward_flops(), 2.0 * 4.08e9);
  EXPECT_LT(w.forward_flops(), 2.0 * 4.14e9);
}

TEST(Workloads, EveryResNet50ConvolutionCarriesTheGeometryOfItsFilter) {
  const Workload w = layers::make_workload("resnet50");
  int convs = 0;
  for (const WorkloadLayer& layer : w.layers) {
    if (!layer.conv) {
      EXPECT_EQ(layer.name, "fc");
      continue;
    }
    ++convs;
    const ConvGeometry& g = *layer.conv;
    SCOPED_TRACE(layer.name);
    EXPECT_EQ(g.input.n, 1);
    ASSERT_EQ(layer.params.size(), 3u);
    ASSERT_EQ(layer.params[0].shape.size(), 4u);
    EXPECT_EQ(elements(layer.params[0]), g.weight_count());
    EXPECT_EQ(layer.params[0].shape[0], static_cast<std::size_t>(g.filters));
    EXPECT_EQ(layer.params[0].shape[1], static_cast<std::size_t>(g.input.c));
    EXPECT_EQ(layer.params[0].shape[2], static_cast<std::size_t>(g.kernel));
    EXPECT_EQ(elements(layer.params[1]), static_cast<std::size_t>(g.filters));  // the norm's
    EXPECT_EQ(g.padding, g.kernel / 2);
    EXPECT_DOUBLE_EQ(layer.forward_flops,
                     g.forward_flops() + 4.0 * static_cast<double>(g.output().count()));
  }
  EXPECT_EQ(convs, 53);  // conv1, 16 bottlenecks of 3, and 4 downsample paths
}

TEST(Workloads, ResNet50ConvolutionsChainFromTheImageToTheClassifier) {
  const Workload w = layers::make_workload("resnet50");
  const std::map<std::string, ConvGeometry> convs = convs_by_name(w);
  const ConvGeometry& stem = convs.at("conv1");
  EXPECT_EQ(stem.input, (Shape4{1, 3, 224, 224}));
  EXPECT_EQ(stem.output(), (Shape4{1, 64, 112, 112}));
  Shape4 x{1, 64, 56, 56};  // after the 3x3 max pool of stride 2
  const int blocks[] = {3, 4, 6, 3};
  for (int stage = 0; stage < 4; ++stage) {
    for (int block = 0; block < blocks[stage]; ++block) {
      const std::string p = "layer" + std::to_string(stage + 1) + "." + std::to_string(block);
      SCOPED_TRACE(p);
      const ConvGeometry& c1 = convs.at(p + ".conv1");
      const ConvGeometry& c2 = convs.at(p + ".conv2");
      const ConvGeometry& c3 = convs.at(p + ".conv3");
      EXPECT_EQ(c1.input, x);
      EXPECT_EQ(c2.input, c1.output());
      EXPECT_EQ(c3.input, c2.output());
      // v1.5: the first block of stages 2-4 strides in its 3x3 convolution.
      EXPECT_EQ(c2.stride, block == 0 && stage > 0 ? 2 : 1);
      EXPECT_EQ(c3.output().c, 256 << stage);
      if (block == 0) {
        const ConvGeometry& down = convs.at(p + ".downsample.0");
        EXPECT_EQ(down.input, x);
        EXPECT_EQ(down.output(), c3.output());  // the residual add needs equal shapes
      } else {
        EXPECT_EQ(c3.output(), x);
        EXPECT_EQ(convs.count(p + ".downsample.0"), 0u);
      }
      x = c3.output();
    }
  }
  EXPECT_EQ(x, (Shape4{1, 2048, 7, 7}));  // pooled to the classifier's 2048 inputs
  EXPECT_EQ(elements(w.layers.back().params[0]), 1000u * 2048u);
}

TEST(Workloads, TransformersAndTheMlpHaveNoConvolutions) {
  for (const char* name : {"mlp", "bert-large", "gpt2-124m"}) {
    const Workload w = layers::make_workload(name);
    for (const WorkloadLayer& layer : w.layers) EXPECT_FALSE(layer.conv.has_value()) << name;
  }
}

}  // namespace
