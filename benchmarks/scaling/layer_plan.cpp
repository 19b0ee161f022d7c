#include "scaling/layer_plan.hpp"

#include "scaling/conv_work.hpp"
#include "scaling/gemm_work.hpp"

namespace scaling {
namespace {

// The GEMMs a GPU rank runs (GemmWork): the plan is for a peer on the same card.
nlohmann::json gemm_json(double flops) {
  const layers::GemmWorkShape shape = GemmWork::shape(flops, /*gpu=*/true);
  if (shape.repeats == 0) return nullptr;
  return {{"side", shape.side}, {"depth", shape.depth}, {"repeats", shape.repeats}};
}

}  // namespace

nlohmann::json layer_plan(const layers::Workload& workload, const layers::MlpConfig& mlp, int batch,
                          layers::MathMode mode, float lr) {
  nlohmann::json plan;
  plan["workload"] = workload.name;
  plan["sample_unit"] = workload.sample_unit;
  plan["batch"] = batch;
  plan["math"] = layers::to_string(mode);
  plan["parameters"] = workload.parameter_count();
  plan["optimizer"] = {{"rule", "sgd"}, {"lr", lr}, {"momentum", 0.0}};
  const bool is_mlp = workload.name == "mlp";
  plan["kind"] = is_mlp ? "mlp" : "layers";
  if (is_mlp) {
    plan["mlp"] = {{"inputs", mlp.inputs},
                   {"hidden", mlp.hidden},
                   {"layers", mlp.layers},
                   {"classes", mlp.classes},
                   {"loss", "softmax cross-entropy, mean over the batch"}};
  }
  const bool convs = !is_mlp && ConvWork::applies_to(workload);
  nlohmann::json layers = nlohmann::json::array();
  for (const layers::WorkloadLayer& layer : workload.layers) {
    nlohmann::json entry;
    entry["name"] = layer.name;
    nlohmann::json params = nlohmann::json::array();
    for (const layers::WorkloadParam& param : layer.params) {
      params.push_back({{"name", param.name}, {"shape", param.shape}});
    }
    entry["params"] = params;
    entry["forward_flops"] = layer.forward_flops * batch;
    entry["conv"] = nullptr;
    entry["forward_gemm"] = nullptr;
    entry["backward_gemm"] = nullptr;
    if (!is_mlp) {
      if (convs && layer.conv) {
        const layers::ConvGeometry& g = *layer.conv;
        entry["conv"] = {{"n", batch},         {"c", g.input.c},       {"h", g.input.h},
                         {"w", g.input.w},     {"filters", g.filters}, {"kernel", g.kernel},
                         {"stride", g.stride}, {"padding", g.padding}};
      } else {
        entry["forward_gemm"] = gemm_json(layer.forward_flops * batch);
        entry["backward_gemm"] = gemm_json(2.0 * layer.forward_flops * batch);
      }
    }
    layers.push_back(entry);
  }
  plan["layers"] = layers;
  return plan;
}

}  // namespace scaling
