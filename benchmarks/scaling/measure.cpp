#include "scaling/measure.hpp"

#include "scaling/conv_work.hpp"
#include "scaling/gemm_work.hpp"

#include <layers/bucket_json.hpp>
#include <layers/dataset.hpp>
#include <layers/math.hpp>
#include <layers/mlp.hpp>

#include <cohort/ddp/data_parallel.hpp>
#include <cohort/launch/store.hpp>
#include <cohort/optim/data_parallel_target.hpp>
#include <cohort/optim/sgd.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>

namespace scaling {
namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

layers::MathMode math_mode(const Setup& setup) {
  return setup.precision == Precision::tf32 ? layers::MathMode::tf32 : layers::MathMode::fp32;
}

cohort::ParamRegistry registry_of(const layers::Workload& workload, cohort::DType dtype) {
  cohort::ParamRegistry registry;
  for (std::size_t l = 0; l < workload.layers.size(); ++l) {
    std::vector<cohort::ParamHandle> handles;
    for (const layers::WorkloadParam& param : workload.layers[l].params) {
      handles.push_back(registry.add(param.name, param.shape, dtype));
    }
    // Each layer with parameters is a unit (ZeRO-3 gathers a layer at a time).
    if (!handles.empty()) registry.add_unit("layer" + std::to_string(l), std::move(handles));
  }
  return registry;
}

RankSamples measure(cohort::World& world, const Setup& setup, double budget_per_count_s,
                    Progress* progress) {
  // budget_per_count_s is replaced by the ranks' agreed value after the warm-up.
  const Options& options = setup.options;
  const cohort::Stream stream = cohort::Stream::create(world.device());
  layers::Math math(stream);
  math.set_math_mode(math_mode(setup));
  const bool real_mlp = setup.workload.name == "mlp" && !setup.simulated;

  cohort::ParamRegistry registry;
  std::unique_ptr<layers::Mlp> mlp;
  const layers::MlpConfig mlp_config{.inputs = 32,
                                     .hidden = options.hidden,
                                     .layers = options.layers,
                                     .classes = 10,
                                     .dtype = setup.grad_dtype};
  if (real_mlp) {
    mlp = std::make_unique<layers::Mlp>(mlp_config, registry);
  } else {
    registry = registry_of(setup.workload, setup.grad_dtype);
  }
  cohort::DataParallelOptions dp_options;
  if (options.bucket_mb > 0.0) {  // fixed caps; otherwise kAutoBucketBytes, the default
    dp_options.bucket_bytes = static_cast<std::size_t>(options.bucket_mb * 1048576.0);
    dp_options.first_bucket_bytes = static_cast<std::size_t>(options.first_bucket_mb * 1048576.0);
  }
  dp_options.compute_stream = stream;
  dp_options.sharding = options.zero == 2   ? cohort::Sharding::zero2
                        : options.zero == 3 ? cohort::Sharding::zero3
                                            : cohort::Sharding::none;
  if (real_mlp) {
    dp_options.init = [&](cohort::DataParallel& d) { mlp->initialise(d, math, 1); };
  }
  cohort::DataParallel dp(world, registry, dp_options);
  cohort::Sgd optimizer(cohort::target_of(dp), cohort::SgdOptions{.lr = kSgdLr});

  // Inputs for the real MLP: this rank's rows of the example's data set.
  cohort::Buffer inputs, labels, stats;
  if (real_mlp) {
    mlp->bind(dp, math, setup.batch);
    const layers::GaussianMixture data(layers::MixtureOptions{});
    std::vector<float> x;
    std::vector<std::int32_t> y;
    data.append_rows(layers::Split::train, static_cast<std::uint64_t>(world.rank() * setup.batch),
                     static_cast<std::size_t>(setup.batch), x, y);
    inputs = math.allocate_bytes(x.size() * sizeof(float));
    math.upload(inputs.data(), x.data(), x.size() * sizeof(float));
    labels = math.allocate_bytes(y.size() * sizeof(std::int32_t));
    math.upload(labels.data(), y.data(), y.size() * sizeof(std::int32_t));
    stats = math.allocate_bytes(2 * sizeof(double));
  }

  // Each layer's work for this rank's batch: a sleep of the modelled time, or real GEMMs in the
  // precision asked.
  std::unique_ptr<GemmWork> gemms;
  if (!setup.simulated && !real_mlp) gemms = std::make_unique<GemmWork>(math, setup.precision);
  auto work = [&](double flops) {
    if (setup.simulated) {
      math.simulate(std::chrono::nanoseconds(
          static_cast<std::int64_t>(flops / (options.sim_tflops * 1e12) * 1e9)));
    } else {
      gemms->run(flops);
    }
  };
  const double batch = setup.batch;
  // Real compute of a convolutional workload runs its convolutions at the model's shapes (cuDNN
  // on GPUs); its other layers, as every layer of the other workloads, run GEMMs of their FLOPs.
  std::unique_ptr<ConvWork> convs;
  if (!setup.simulated && !real_mlp && ConvWork::applies_to(setup.workload)) {
    convs = std::make_unique<ConvWork>(math, setup.workload, setup.batch, setup.grad_dtype);
  }
  std::vector<std::vector<cohort::ParamHandle>> layer_params;
  // Each layer's unit (ZeRO-3); none for a layer without parameters, or the MLP, which gathers
  // its own.
  std::vector<std::optional<cohort::UnitHandle>> layer_units;
  std::size_t last_unit_layer = 0;
  for (const layers::WorkloadLayer& layer : setup.workload.layers) {
    std::vector<cohort::ParamHandle> handles;
    for (const layers::WorkloadParam& param : layer.params)
      handles.push_back(registry.find(param.name));
    layer_units.emplace_back();
    if (!handles.empty() && !real_mlp) {
      layer_units.back() = cohort::UnitHandle{registry.unit_index_of(handles.front())};
      last_unit_layer = layer_units.size() - 1;
    }
    layer_params.push_back(std::move(handles));
  }

  // Events on the compute stream cut each step into its phases: forward and backward, the wait
  // for communication in sync_grads, the optimizer; the rest of the wall time is outside them.
  cohort::Event start = cohort::Event::create(world.device(), true);
  cohort::Event backward_done = cohort::Event::create(world.device(), true);
  cohort::Event synced = cohort::Event::create(world.device(), true);
  cohort::Event stepped = cohort::Event::create(world.device(), true);
  RankSamples samples;
  samples.buckets = dp.bucket_sizing();
  int timed = options.steps;
  if (progress != nullptr) {
    progress->ranks = world.size();
    progress->step = 0;
    progress->total = options.warmup + timed;
  }
  double last_step_s = 0.0;
  for (int step = 0; step < options.warmup + timed; ++step) {
    if (step == options.warmup && setup.budgeted) {
      // The slowest rank's warm-up step says how many timed steps fit the budget; every rank
      // must run the same number, so the budget is agreed too (the max of its negation: the
      // smallest of the ranks' clocks' budgets).
      float agreed[2] = {static_cast<float>(last_step_s), -static_cast<float>(budget_per_count_s)};
      dp.comm()
          .all_reduce(cohort::TensorView::of(agreed, 2, cohort::Device::host()),
                      cohort::ReduceOp::max, stream)
          .wait();
      stream.synchronize();
      const float slowest = agreed[0];
      budget_per_count_s = -static_cast<double>(agreed[1]);
      const int fit = slowest > 0.0f
                          ? static_cast<int>(budget_per_count_s / static_cast<double>(slowest))
                          : options.steps;
      timed = std::clamp(fit, std::min(3, options.steps), options.steps);
      if (progress != nullptr) progress->total = options.warmup + timed;
      if (world.rank() == 0) {
        std::fprintf(stderr,
                     "scaling_bench: %d ranks: a warm-up step took %.2f s; %d timed steps, "
                     "about %.0f s\n",
                     world.size(), static_cast<double>(slowest), timed,
                     timed * static_cast<double>(slowest));
      }
    }
    const auto begin = Clock::now();
    start.record(stream);
    double issue_ms = 0.0;  // host time inside grad_ready
    auto ready = [&](cohort::ParamHandle handle) {
      const auto issued = Clock::now();
      dp.grad_ready(handle);
      issue_ms += std::chrono::duration<double, std::milli>(Clock::now() - issued).count();
    };
    if (real_mlp) {
      mlp->forward(static_cast<const float*>(inputs.data()), setup.batch);
      mlp->loss_and_backward(static_cast<const std::int32_t*>(labels.data()), setup.batch,
                             1.0f / static_cast<float>(setup.batch),
                             static_cast<double*>(stats.data()), &dp);
    } else {
      // Each layer's unit is gathered around its work (ZeRO-3; nothing moves otherwise), the
      // last one kept from forward into backward.
      for (std::size_t l = 0; l < setup.workload.layers.size(); ++l) {
        if (layer_units[l]) dp.gather(*layer_units[l]);
        if (convs && convs->is_conv(l)) {
          convs->forward(l, dp, layer_params[l][0]);
        } else {
          work(setup.workload.layers[l].forward_flops * batch);
        }
        if (layer_units[l] && l != last_unit_layer) dp.release(*layer_units[l]);
      }
      for (std::size_t l = setup.workload.layers.size(); l-- > 0;) {
        if (layer_units[l]) dp.gather(*layer_units[l], cohort::Pass::backward);
        if (convs && convs->is_conv(l)) {
          convs->backward(l, dp, layer_params[l][0]);
        } else {
          work(2.0 * setup.workload.layers[l].forward_flops * batch);
        }
        for (const cohort::ParamHandle handle : layer_params[l]) ready(handle);
        if (layer_units[l]) dp.release(*layer_units[l]);
      }
    }
    backward_done.record(stream);
    dp.sync_grads();
    synced.record(stream);
    optimizer.step();
    stepped.record(stream);
    stream.synchronize();
    const double step_ms = std::chrono::duration<double, std::milli>(Clock::now() - begin).count();
    last_step_s = step_ms / 1e3;
    if (progress != nullptr) {
      progress->step_s = last_step_s;
      progress->step = step + 1;
    }
    const cohort::StepStats stats_now = dp.last_step_stats();
    if (step < options.warmup) continue;
    const auto between = [](const cohort::Event& a, const cohort::Event& b) {
      return static_cast<double>(cohort::Event::elapsed_ms(a, b));
    };
    samples.step_ms.push_back(step_ms);
    samples.compute_ms.push_back(between(start, backward_done));
    samples.issue_ms.push_back(issue_ms);
    samples.wait_ms.push_back(between(backward_done, synced));
    samples.optimizer_ms.push_back(between(synced, stepped));
    samples.outside_ms.push_back(std::max(0.0, step_ms - between(start, stepped)));
    samples.comm_ms.push_back(stats_now.comm_ms);
    samples.exposed_ms.push_back(stats_now.exposed_ms);
    samples.bytes = static_cast<double>(stats_now.bytes);
    samples.collectives = static_cast<double>(stats_now.collectives);
  }
  return samples;
}

nlohmann::json to_json(const RankSamples& samples) {
  return {{"step_ms", samples.step_ms},
          {"compute_ms", samples.compute_ms},
          {"issue_ms", samples.issue_ms},
          {"wait_ms", samples.wait_ms},
          {"optimizer_ms", samples.optimizer_ms},
          {"outside_ms", samples.outside_ms},
          {"comm_ms", samples.comm_ms},
          {"exposed_ms", samples.exposed_ms},
          {"bytes", samples.bytes},
          {"collectives", samples.collectives},
          {"buckets", layers::bucket_json(samples.buckets)}};
}

RankSamples from_json(const nlohmann::json& in) {
  RankSamples samples;
  samples.step_ms = in.at("step_ms").get<std::vector<double>>();
  samples.compute_ms = in.at("compute_ms").get<std::vector<double>>();
  samples.issue_ms = in.at("issue_ms").get<std::vector<double>>();
  samples.wait_ms = in.at("wait_ms").get<std::vector<double>>();
  samples.optimizer_ms = in.at("optimizer_ms").get<std::vector<double>>();
  samples.outside_ms = in.at("outside_ms").get<std::vector<double>>();
  samples.comm_ms = in.at("comm_ms").get<std::vector<double>>();
  samples.exposed_ms = in.at("exposed_ms").get<std::vector<double>>();
  samples.bytes = in.at("bytes").get<double>();
  samples.collectives = in.at("collectives").get<double>();
  samples.buckets = layers::bucket_sizing_from_json(in.at("buckets"));
  return samples;
}

std::vector<int> rank_counts(int world_size) {
  std::vector<int> counts;
  for (int k = 1; k < world_size; k *= 2) counts.push_back(k);
  counts.push_back(world_size);
  return counts;
}

cohort::World sub_world(cohort::World& parent, int k, const std::string& scope) {
  cohort::LaunchInfo launch;
  launch.rank = parent.rank();
  launch.world_size = k;
  launch.local_rank = parent.local_rank();
  const int node_first = parent.rank() - parent.local_rank();
  launch.local_world_size = std::min(parent.local_world_size(), k - node_first);
  launch.node_rank = parent.node_rank();
  launch.num_nodes = (k + parent.local_world_size() - 1) / parent.local_world_size();
  launch.run_id = scope;
  launch.store_is_external = true;
  cohort::WorldOptions options;
  options.backend = parent.backend() == cohort::Backend::nccl ? cohort::BackendChoice::nccl
                                                              : cohort::BackendChoice::host;
  options.timeout = parent.timeout();
  options.launch = launch;
  options.ranks_per_node = parent.local_world_size();
  options.store = std::make_shared<cohort::PrefixStore>(
      scope, std::shared_ptr<cohort::Store>(parent.store().clone()));
  return cohort::init(options);
}

}  // namespace scaling
