#include <layers/workloads.hpp>

#include <cohort/core/error.hpp>

#include <string>

namespace layers {
namespace {

using Shape = std::vector<std::size_t>;

double product(const Shape& shape) {
  double total = 1.0;
  for (std::size_t extent : shape) total *= static_cast<double>(extent);
  return total;
}

// ---- ResNet-50 (torchvision v1.5) ----

// A convolution without bias, followed by batch norm: one layer of three tensors, over a square
// input of `in_size` pixels, padded to keep the size at stride 1 (as torchvision pads). FLOPs
// count 2 per multiply-add, plus a few per output for the norm. Returns the output's size.
int conv_bn(Workload& w, const std::string& conv, const std::string& bn, int in, int out,
            int kernel, int stride, int in_size) {
  const ConvGeometry geometry{.input = {1, in, in_size, in_size},
                              .filters = out,
                              .kernel = kernel,
                              .stride = stride,
                              .padding = kernel / 2};
  const auto k = static_cast<std::size_t>(kernel);
  const auto filters = static_cast<std::size_t>(out);
  WorkloadLayer layer;
  layer.name = conv;
  layer.params.push_back({conv + ".weight", {filters, static_cast<std::size_t>(in), k, k}});
  layer.params.push_back({bn + ".weight", {filters}});
  layer.params.push_back({bn + ".bias", {filters}});
  const double outputs = static_cast<double>(geometry.output().count());
  layer.forward_flops = geometry.forward_flops() + 4.0 * outputs;
  layer.conv = geometry;
  w.layers.push_back(std::move(layer));
  return geometry.output().h;
}

Workload resnet50() {
  Workload w{
      .name = "resnet50", .sample_unit = "images", .layers = {}, .default_batch_per_rank = 32};
  // conv1 (224 -> 112), then a 3x3 max pool of stride 2 (112 -> 56, no parameters).
  conv_bn(w, "conv1", "bn1", 3, 64, 7, 2, 224);
  int size = 56;
  const int blocks[] = {3, 4, 6, 3};
  const int widths[] = {64, 128, 256, 512};
  int in = 64;
  for (int stage = 0; stage < 4; ++stage) {
    const int width = widths[stage];
    const int out = width * 4;
    for (int block = 0; block < blocks[stage]; ++block) {
      const std::string prefix = "layer" + std::to_string(stage + 1) + "." + std::to_string(block);
      // The first block of stages 2-4 halves the size in its 3x3 convolution (v1.5), and its
      // downsample path in its 1x1 convolution.
      const int stride = block == 0 && stage > 0 ? 2 : 1;
      conv_bn(w, prefix + ".conv1", prefix + ".bn1", in, width, 1, 1, size);
      const int out_size =
          conv_bn(w, prefix + ".conv2", prefix + ".bn2", width, width, 3, stride, size);
      conv_bn(w, prefix + ".conv3", prefix + ".bn3", width, out, 1, 1, out_size);
      if (block == 0) {
        conv_bn(w, prefix + ".downsample.0", prefix + ".downsample.1", in, out, 1, stride, size);
      }
      in = out;
      size = out_size;
    }
  }
  w.layers.push_back({"fc", {{"fc.weight", {1000, 2048}}, {"fc.bias", {1000}}}, 2.0 * 2048 * 1000});
  return w;
}

// ---- Transformers ----

WorkloadLayer linear(const std::string& name, std::size_t in, std::size_t out, double tokens,
                     bool transposed_weight = false) {
  const Shape weight = transposed_weight ? Shape{in, out} : Shape{out, in};
  return {name,
          {{name + ".weight", weight}, {name + ".bias", {out}}},
          2.0 * tokens * static_cast<double>(in * out)};
}

WorkloadLayer norm(const std::string& name, std::size_t width, double tokens) {
  return {name,
          {{name + ".weight", {width}}, {name + ".bias", {width}}},
          8.0 * tokens * static_cast<double>(width)};
}

Workload bert_large() {
  constexpr std::size_t kWidth = 1024, kFfn = 4096, kLayers = 24, kVocab = 30522;
  constexpr double kTokens = 128;  // per sample: a sequence of 128 tokens (pretraining phase 1)
  Workload w{
      .name = "bert-large", .sample_unit = "sequences", .layers = {}, .default_batch_per_rank = 32};
  w.layers.push_back({"embeddings",
                      {{"embeddings.word_embeddings.weight", {kVocab, kWidth}},
                       {"embeddings.position_embeddings.weight", {512, kWidth}},
                       {"embeddings.token_type_embeddings.weight", {2, kWidth}}},
                      0.0});
  w.layers.push_back(norm("embeddings.LayerNorm", kWidth, kTokens));
  for (std::size_t i = 0; i < kLayers; ++i) {
    const std::string p = "encoder.layer." + std::to_string(i);
    w.layers.push_back(linear(p + ".attention.self.query", kWidth, kWidth, kTokens));
    w.layers.push_back(linear(p + ".attention.self.key", kWidth, kWidth, kTokens));
    w.layers.push_back(linear(p + ".attention.self.value", kWidth, kWidth, kTokens));
    WorkloadLayer output = linear(p + ".attention.output.dense", kWidth, kWidth, kTokens);
    output.forward_flops += 2.0 * 2.0 * kTokens * kTokens * kWidth;  // QK^T and AV
    w.layers.push_back(std::move(output));
    w.layers.push_back(norm(p + ".attention.output.LayerNorm", kWidth, kTokens));
    w.layers.push_back(linear(p + ".intermediate.dense", kWidth, kFfn, kTokens));
    w.layers.push_back(linear(p + ".output.dense", kFfn, kWidth, kTokens));
    w.layers.push_back(norm(p + ".output.LayerNorm", kWidth, kTokens));
  }
  w.layers.push_back(linear("pooler.dense", kWidth, kWidth, 1.0));
  return w;
}

Workload gpt2_124m() {
  constexpr std::size_t kWidth = 768, kLayers = 12, kVocab = 50257, kContext = 1024;
  constexpr double kTokens = kContext;  // per sample: a sequence of 1024 tokens
  Workload w{
      .name = "gpt2-124m", .sample_unit = "sequences", .layers = {}, .default_batch_per_rank = 8};
  w.layers.push_back(
      {"embeddings", {{"wte.weight", {kVocab, kWidth}}, {"wpe.weight", {kContext, kWidth}}}, 0.0});
  for (std::size_t i = 0; i < kLayers; ++i) {
    const std::string p = "h." + std::to_string(i);
    w.layers.push_back(norm(p + ".ln_1", kWidth, kTokens));
    WorkloadLayer attention = linear(p + ".attn.c_attn", kWidth, 3 * kWidth, kTokens, true);
    attention.forward_flops += 2.0 * 2.0 * kTokens * kTokens * kWidth / 2.0;  // causal QK^T, AV
    w.layers.push_back(std::move(attention));
    w.layers.push_back(linear(p + ".attn.c_proj", kWidth, kWidth, kTokens, true));
    w.layers.push_back(norm(p + ".ln_2", kWidth, kTokens));
    w.layers.push_back(linear(p + ".mlp.c_fc", kWidth, 4 * kWidth, kTokens, true));
    w.layers.push_back(linear(p + ".mlp.c_proj", 4 * kWidth, kWidth, kTokens, true));
  }
  w.layers.push_back(norm("ln_f", kWidth, kTokens));
  // The output projection reuses wte: its work comes first in backward, but wte's gradient is
  // complete only after the embedding's, at the very end.
  w.layers.push_back({"lm_head (tied to wte)", {}, 2.0 * kTokens * kWidth * kVocab});
  return w;
}

}  // namespace

std::size_t Workload::parameter_count() const {
  double total = 0.0;
  for (const WorkloadLayer& layer : layers) {
    for (const WorkloadParam& param : layer.params) total += product(param.shape);
  }
  return static_cast<std::size_t>(total);
}

std::size_t Workload::tensor_count() const {
  std::size_t total = 0;
  for (const WorkloadLayer& layer : layers) total += layer.params.size();
  return total;
}

double Workload::forward_flops() const {
  double total = 0.0;
  for (const WorkloadLayer& layer : layers) total += layer.forward_flops;
  return total;
}

Workload mlp_workload(const MlpConfig& config) {
  Workload w{.name = "mlp", .sample_unit = "samples", .layers = {}, .default_batch_per_rank = 256};
  for (int l = 0; l < config.layers; ++l) {
    const auto in = static_cast<std::size_t>(l == 0 ? config.inputs : config.hidden);
    const auto out =
        static_cast<std::size_t>(l == config.layers - 1 ? config.classes : config.hidden);
    const std::string name = "fc" + std::to_string(l);
    w.layers.push_back({name,
                        {{name + ".weight", {out, in}}, {name + ".bias", {out}}},
                        2.0 * static_cast<double>(in * out + out)});
  }
  return w;
}

Workload make_workload(const std::string& name, const MlpConfig& mlp) {
  if (name == "mlp") return mlp_workload(mlp);
  if (name == "resnet50") return resnet50();
  if (name == "bert-large") return bert_large();
  if (name == "gpt2-124m") return gpt2_124m();
  COHORT_FAIL(cohort::InvalidArgument,
              "workload '" + name + "': use mlp, resnet50, bert-large or gpt2-124m");
}

}  // namespace layers
