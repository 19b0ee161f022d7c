// scaling_bench: weak scaling of data-parallel training through cohort, and why it falls short.
//
//   build/default/benchmarks/scaling_bench                         # every GPU found: 1, 2, 4, 8
//   build/default/benchmarks/scaling_bench --workload resnet50 --json r50.json --plot r50.png
//   build/ci/benchmarks/scaling_bench --ranks 4                    # 4 host ranks (threads)
//   srun -N 8 --ntasks-per-node 8 scaling_bench --workload gpt2-124m   # any launcher: 1 .. 64
//
// Weak scaling: the batch per rank is fixed, and the step is timed at 1, 2, 4, ... up to N ranks
// (the last count is N itself). Each count runs in a world of its own formed by the first k
// ranks, through the store of the launched world. A step is forward, backward (each layer marks
// its gradients ready, so buckets are all-reduced while backward continues), sync_grads and a
// fused SGD step, then a synchronization; its time is the slowest rank's.
//
// Workloads: `mlp` (the MLP of examples/train_mlp), and model-shaped ones (`resnet50`,
// `bert-large`, `gpt2-124m`: the parameter lists of the published models, layers/workloads.hpp).
// Compute on GPUs is real: the MLP's own layers, or TF32 GEMMs sized to each layer's FLOPs. On host
// ranks it is simulated by default: a sleep of each layer's FLOPs / --sim-tflops, reported as
// simulated compute and never as a GPU measurement. Communication is always real.
//
// Per rank count: the median step time, throughput, efficiency (throughput over k times the
// 1-rank throughput, which for weak scaling is T1 / Tk), communication time (the collectives'
// durations), exposed communication (not hidden behind backward), overlap, achieved busbw
// (bytes / communication time x 2(k-1)/k, nccl-tests' definition), and the lost percent split
// into exposed communication, imbalance (waiting for the slowest rank's compute) and overhead (the
// rest). Then a projection to 8 and 64 GPUs from the ring model, 2(n-1) alpha + 2(n-1)/n x bytes
// / B per bucket, buckets issued as the measured backward makes them ready.

#include <layers/math.hpp>
#include <layers/mlp.hpp>
#include <layers/dataset.hpp>
#include <layers/workloads.hpp>

#include <cohort/comm/world.hpp>
#include <cohort/core/error.hpp>
#include <cohort/ddp/bucket_plan.hpp>
#include <cohort/ddp/data_parallel.hpp>
#include <cohort/launch/store.hpp>
#include <cohort/optim/data_parallel_target.hpp>
#include <cohort/optim/sgd.hpp>
#include <cohort/version.hpp>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

// The matplotlib script that draws --plot (tools/plot_scaling.py, embedded at build time).
constexpr const char* kPlotScript =
#include "scaling_bench_plot.inc"
    ;

struct Options {
  std::string workload = "mlp";
  int ranks = 0;             // host ranks as threads (when not started by a launcher)
  int batch_per_rank = 0;    // 0: the workload's default
  int steps = 20;
  int warmup = 3;
  std::string compute = "auto";  // auto, real, simulated
  double sim_tflops = 0.05;
  double bucket_mb = 0.0;  // 0: 25 MiB, or 4 MiB for the (small) mlp
  double first_bucket_mb = 1.0;
  int hidden = 1024;         // mlp workload
  int layers = 8;
  double link_gbps = 230.0;  // all-reduce busbw inside a node: 8xA100 SXM4 NVLink
  double link_latency_us = 2.0;
  double node_gbps = 192.0;  // across nodes: DGX A100, 8x HDR InfiniBand
  double node_latency_us = 6.0;
  int gpus_per_node = 8;
  std::string json;
  std::string plot;
};

double median(std::vector<double> values) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  const std::size_t middle = values.size() / 2;
  return values.size() % 2 == 1 ? values[middle] : (values[middle - 1] + values[middle]) / 2.0;
}

/// What one rank measured at one rank count, step by step.
struct RankSamples {
  std::vector<double> step_ms, compute_ms, comm_ms, exposed_ms;
  double bytes = 0.0;
  double collectives = 0.0;
};

struct Row {
  int ranks = 0;
  double step_ms = 0, throughput = 0, efficiency = 0, compute_ms = 0, comm_ms = 0, exposed_ms = 0,
         imbalance_ms = 0, overlap = 0, busbw = 0, bytes = 0, collectives = 0;
  double lost = 0, lost_exposed = 0, lost_imbalance = 0, lost_overhead = 0;  // fractions of the step
};

struct Projection {
  int gpus = 0;
  double link_gbps = 0, latency_us = 0, comm_ms = 0, exposed_ms = 0, step_ms = 0, efficiency = 0,
         throughput = 0;
  std::string link;
};

struct Setup {
  Options options;
  layers::Workload workload;
  bool simulated = false;
  int batch = 0;
};

cohort::ParamRegistry registry_of(const layers::Workload& workload) {
  cohort::ParamRegistry registry;
  for (const layers::WorkloadLayer& layer : workload.layers) {
    for (const layers::WorkloadParam& param : layer.params) registry.add(param.name, param.shape);
  }
  return registry;
}

/// Runs the workload on `world` and returns this rank's samples.
RankSamples measure(cohort::World& world, const Setup& setup) {
  const Options& options = setup.options;
  const cohort::Stream stream = cohort::Stream::create(world.device());
  layers::Math math(stream);
  const bool real_mlp = setup.workload.name == "mlp" && !setup.simulated;

  cohort::ParamRegistry registry;
  std::unique_ptr<layers::Mlp> mlp;
  const layers::MlpConfig mlp_config{.inputs = 32, .hidden = options.hidden, .layers = options.layers,
                                     .classes = 10, .dtype = cohort::DType::f32};
  if (real_mlp) {
    mlp = std::make_unique<layers::Mlp>(mlp_config, registry);
  } else {
    registry = registry_of(setup.workload);
  }
  cohort::DataParallelOptions dp_options;
  dp_options.bucket_bytes = static_cast<std::size_t>(options.bucket_mb * 1048576.0);
  dp_options.first_bucket_bytes = static_cast<std::size_t>(options.first_bucket_mb * 1048576.0);
  dp_options.compute_stream = stream;
  if (real_mlp) {
    dp_options.init = [&](cohort::DataParallel& d) { mlp->initialise(d, math, 1); };
  }
  cohort::DataParallel dp(world, registry, dp_options);
  cohort::Sgd optimizer(cohort::target_of(dp), cohort::SgdOptions{.lr = 1e-4f});

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

  // Each layer's work for this rank's batch: a sleep of the modelled time, or real GEMMs.
  auto work = [&](double flops) {
    if (setup.simulated) {
      math.simulate(std::chrono::nanoseconds(
          static_cast<std::int64_t>(flops / (options.sim_tflops * 1e12) * 1e9)));
    } else {
      math.gemm_work(flops);
    }
  };
  const double batch = setup.batch;
  std::vector<std::vector<cohort::ParamHandle>> layer_params;
  for (const layers::WorkloadLayer& layer : setup.workload.layers) {
    std::vector<cohort::ParamHandle> handles;
    for (const layers::WorkloadParam& param : layer.params) handles.push_back(registry.find(param.name));
    layer_params.push_back(std::move(handles));
  }

  cohort::Event start = cohort::Event::create(world.device(), true);
  cohort::Event backward_done = cohort::Event::create(world.device(), true);
  RankSamples samples;
  for (int step = 0; step < options.warmup + options.steps; ++step) {
    const auto begin = Clock::now();
    start.record(stream);
    if (real_mlp) {
      mlp->forward(static_cast<const float*>(inputs.data()), setup.batch);
      mlp->loss_and_backward(static_cast<const std::int32_t*>(labels.data()), setup.batch,
                             1.0f / static_cast<float>(setup.batch),
                             static_cast<double*>(stats.data()), &dp);
    } else {
      for (const layers::WorkloadLayer& layer : setup.workload.layers) work(layer.forward_flops * batch);
      for (std::size_t l = setup.workload.layers.size(); l-- > 0;) {
        work(2.0 * setup.workload.layers[l].forward_flops * batch);
        for (const cohort::ParamHandle handle : layer_params[l]) dp.grad_ready(handle);
      }
    }
    backward_done.record(stream);
    dp.sync_grads();
    optimizer.step();
    stream.synchronize();
    const double step_ms = std::chrono::duration<double, std::milli>(Clock::now() - begin).count();
    const cohort::StepStats stats_now = dp.last_step_stats();
    if (step < options.warmup) continue;
    samples.step_ms.push_back(step_ms);
    samples.compute_ms.push_back(static_cast<double>(cohort::Event::elapsed_ms(start, backward_done)));
    samples.comm_ms.push_back(stats_now.comm_ms);
    samples.exposed_ms.push_back(stats_now.exposed_ms);
    samples.bytes = static_cast<double>(stats_now.bytes);
    samples.collectives = static_cast<double>(stats_now.collectives);
  }
  return samples;
}

nlohmann::json to_json(const RankSamples& samples) {
  return {{"step_ms", samples.step_ms},       {"compute_ms", samples.compute_ms},
          {"comm_ms", samples.comm_ms},       {"exposed_ms", samples.exposed_ms},
          {"bytes", samples.bytes},           {"collectives", samples.collectives}};
}

RankSamples from_json(const nlohmann::json& in) {
  RankSamples samples;
  samples.step_ms = in.at("step_ms").get<std::vector<double>>();
  samples.compute_ms = in.at("compute_ms").get<std::vector<double>>();
  samples.comm_ms = in.at("comm_ms").get<std::vector<double>>();
  samples.exposed_ms = in.at("exposed_ms").get<std::vector<double>>();
  samples.bytes = in.at("bytes").get<double>();
  samples.collectives = in.at("collectives").get<double>();
  return samples;
}

/// Reduces every rank's samples at one rank count to a row (rank 0).
Row summarize(int ranks, const std::vector<RankSamples>& all, double batch) {
  Row row;
  row.ranks = ranks;
  const std::size_t steps = all.front().step_ms.size();
  std::vector<double> step, compute, comm, exposed, imbalance;
  for (std::size_t s = 0; s < steps; ++s) {
    double slowest_step = 0, slowest_compute = 0, compute_sum = 0, comm_sum = 0, exposed_sum = 0;
    for (const RankSamples& rank : all) {
      slowest_step = std::max(slowest_step, rank.step_ms[s]);
      slowest_compute = std::max(slowest_compute, rank.compute_ms[s]);
      compute_sum += rank.compute_ms[s];
      comm_sum += rank.comm_ms[s];
      exposed_sum += rank.exposed_ms[s];
    }
    const double n = static_cast<double>(all.size());
    step.push_back(slowest_step);
    compute.push_back(compute_sum / n);
    comm.push_back(comm_sum / n);
    exposed.push_back(exposed_sum / n);
    imbalance.push_back(slowest_compute - compute_sum / n);
  }
  row.step_ms = median(step);
  row.compute_ms = median(compute);
  row.comm_ms = median(comm);
  row.exposed_ms = median(exposed);
  row.imbalance_ms = median(imbalance);
  row.throughput = ranks * batch / (row.step_ms / 1e3);
  row.bytes = all.front().bytes;
  row.collectives = all.front().collectives;
  if (ranks > 1 && row.comm_ms > 0) {
    row.overlap = std::clamp(1.0 - row.exposed_ms / row.comm_ms, 0.0, 1.0);
    row.busbw = row.bytes / (row.comm_ms * 1e6) * 2.0 * (ranks - 1) / ranks;
  }
  return row;
}

/// Efficiency against the 1-rank row, and the lost time split three ways (fractions of the step).
void attribute(Row& row, const Row& one) {
  row.efficiency = row.throughput / (row.ranks * one.throughput);
  const double lost_ms = row.step_ms - one.step_ms;
  row.lost = lost_ms / row.step_ms;
  if (row.ranks == 1) return;
  // A rank that finishes backward early waits for the slowest inside the collectives, so its
  // exposed time includes the imbalance: count that part once, as imbalance.
  const double imbalance = std::max(0.0, row.imbalance_ms);
  const double exposed = std::max(0.0, row.exposed_ms - imbalance);
  row.lost_exposed = exposed / row.step_ms;
  row.lost_imbalance = imbalance / row.step_ms;
  row.lost_overhead = (lost_ms - exposed - imbalance) / row.step_ms;
}

/// Ring-model projection to `gpus` GPUs from the 1-rank timeline (Note in the file comment).
Projection project(int gpus, const Setup& setup, const Row& one, const cohort::ParamRegistry& registry) {
  const Options& o = setup.options;
  Projection p;
  p.gpus = gpus;
  const bool inside = gpus <= o.gpus_per_node;
  p.link_gbps = inside ? o.link_gbps : o.node_gbps;
  p.latency_us = inside ? o.link_latency_us : o.node_latency_us;
  p.link = inside ? "in a node" : "across nodes";
  const cohort::BucketPlan plan = cohort::make_bucket_plan(
      registry, gpus, static_cast<std::size_t>(o.bucket_mb * 1048576.0),
      static_cast<std::size_t>(o.first_bucket_mb * 1048576.0));
  // When each parameter's gradient is complete: forward is a third of the compute, then the
  // layers' backward in reverse, each in proportion to its FLOPs, scaled to the measured compute.
  const double total_flops = 3.0 * setup.workload.forward_flops();
  const double scale = total_flops > 0 ? one.compute_ms / total_flops : 0.0;
  std::vector<double> ready(registry.size(), 0.0);
  double clock = setup.workload.forward_flops() * scale;
  for (std::size_t l = setup.workload.layers.size(); l-- > 0;) {
    const layers::WorkloadLayer& layer = setup.workload.layers[l];
    clock += 2.0 * layer.forward_flops * scale;
    for (const layers::WorkloadParam& param : layer.params) ready[registry.find(param.name).index] = clock;
  }
  const double n = gpus;
  double comm_end = 0.0;
  for (const cohort::Bucket& bucket : plan.buckets) {
    double bucket_ready = 0.0;
    for (const std::uint32_t index : bucket.params) bucket_ready = std::max(bucket_ready, ready[index]);
    const double bytes = static_cast<double>(bucket.slice.count * cohort::size_of(plan.dtype));
    const double ms = (2.0 * (n - 1) * p.latency_us * 1e-3) +
                      2.0 * (n - 1) / n * bytes / (p.link_gbps * 1e9) * 1e3;
    p.comm_ms += ms;
    comm_end = std::max(comm_end, bucket_ready) + ms;
  }
  p.exposed_ms = std::max(0.0, comm_end - one.compute_ms);
  p.step_ms = one.step_ms + p.exposed_ms;
  p.efficiency = one.step_ms / p.step_ms;
  p.throughput = n * setup.batch / (p.step_ms / 1e3);
  return p;
}

std::string machine_line() {
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  return std::string(host) + ", " + std::to_string(std::thread::hardware_concurrency()) +
         " CPU threads";
}

std::vector<int> rank_counts(int world_size) {
  std::vector<int> counts;
  for (int k = 1; k < world_size; k *= 2) counts.push_back(k);
  counts.push_back(world_size);
  return counts;
}

/// The world of the first `k` ranks of `parent`, through a store scoped to it.
cohort::World sub_world(cohort::World& parent, int k, const std::string& scope) {
  cohort::LaunchInfo launch;
  launch.rank = parent.rank();
  launch.world_size = k;
  launch.local_rank = parent.local_rank();
  const int node_first = parent.rank() - parent.local_rank();
  launch.local_world_size = std::min(parent.local_size(), k - node_first);
  launch.node_rank = parent.node_rank();
  launch.num_nodes = (k + parent.local_size() - 1) / parent.local_size();
  launch.run_id = scope;
  launch.store_is_external = true;
  cohort::WorldOptions options;
  options.backend = parent.backend() == cohort::Backend::nccl ? cohort::BackendChoice::nccl
                                                              : cohort::BackendChoice::gloo;
  options.timeout = parent.timeout();
  options.launch = launch;
  options.ranks_per_node = parent.local_size();
  options.store = std::make_shared<cohort::PrefixStore>(
      scope, std::shared_ptr<cohort::Store>(parent.store().clone()));
  return cohort::init(options);
}

void print_report(const Setup& setup, const std::vector<Row>& rows,
                  const std::vector<Projection>& projections, const cohort::World& world,
                  std::size_t buckets) {
  const Options& o = setup.options;
  const layers::Workload& w = setup.workload;
  std::printf("# scaling_bench: %s, %.1fM parameters in %zu tensors (%.1f MB of f32 gradients), "
              "%d %s per rank; cohort %s\n",
              w.name.c_str(), static_cast<double>(w.parameter_count()) / 1e6, w.tensor_count(),
              static_cast<double>(w.parameter_count()) * 4e-6, setup.batch, w.sample_unit.c_str(),
              cohort::version());
  std::printf("# up to %d ranks, %s, on %s; %s\n", rows.back().ranks,
              std::string(cohort::to_string(world.backend())).c_str(),
              world.device().is_host() ? "host ranks" : "GPUs", machine_line().c_str());
  if (setup.simulated) {
    std::printf("# compute: SIMULATED (a sleep of each layer's FLOPs / %g TFLOP/s on the compute "
                "stream; not a GPU measurement); communication: real\n", o.sim_tflops);
  } else {
    std::printf("# compute: real (%s)\n", world.device().is_host()
                                              ? "OpenBLAS on the host"
                                              : (w.name == "mlp" ? "the MLP's layers, cuBLAS FP32"
                                                                 : "cuBLAS TF32 GEMMs sized to each layer's FLOPs"));
  }
  std::printf("# buckets: %g MiB (first %g MiB): %zu all-reduces per step; %d timed steps after %d "
              "warm-up; step times are medians of the slowest rank\n#\n",
              o.bucket_mb, o.first_bucket_mb, buckets, o.steps, o.warmup);
  std::printf("# %5s %9s %11s %6s | %9s %9s %9s %7s %9s | %6s = %8s + %9s + %8s\n", "ranks", "step",
              "throughput", "effic", "compute", "comm", "exposed", "overlap", "busbw", "lost",
              "exposed", "imbalance", "overhead");
  std::printf("# %5s %9s %11s %6s | %9s %9s %9s %7s %9s | %6s   %8s   %9s   %8s\n", "", "(ms)",
              (w.sample_unit + "/s").c_str(), "(%)", "(ms)", "(ms)", "(ms)", "(%)", "(GB/s)", "(%)",
              "(%)", "(%)", "(%)");
  for (const Row& r : rows) {
    if (r.ranks == 1) {
      std::printf("  %5d %9.2f %11.1f %6.1f | %9.2f %9s %9s %7s %9s | %6s   %8s   %9s   %8s\n",
                  r.ranks, r.step_ms, r.throughput, 100.0 * r.efficiency, r.compute_ms, "-", "-",
                  "-", "-", "-", "-", "-", "-");
      continue;
    }
    std::printf("  %5d %9.2f %11.1f %6.1f | %9.2f %9.2f %9.2f %7.1f %9.3f | %6.1f = %8.1f + %9.1f + %8.1f\n",
                r.ranks, r.step_ms, r.throughput, 100.0 * r.efficiency, r.compute_ms, r.comm_ms,
                r.exposed_ms, 100.0 * r.overlap, r.busbw, 100.0 * r.lost, 100.0 * r.lost_exposed,
                100.0 * r.lost_imbalance, 100.0 * r.lost_overhead);
  }
  std::printf("#\n# projection, ring model per bucket: 2(n-1) alpha + 2(n-1)/n x bytes / B; buckets "
              "issued as backward makes them ready; compute as measured at 1 rank%s; imbalance and "
              "overhead not modelled\n",
              setup.simulated ? " (simulated)" : "");
  for (const Projection& p : projections) {
    std::printf("  %5d %9.2f %11.1f %6.1f | %9.2f %9.2f %9.2f %7.1f %9s | %6.1f = %8.1f + %9.1f + %8.1f"
                "   (B %g GB/s, alpha %g us %s: given)\n",
                p.gpus, p.step_ms, p.throughput, 100.0 * p.efficiency, rows.front().compute_ms,
                p.comm_ms, p.exposed_ms,
                p.comm_ms > 0 ? 100.0 * (1.0 - p.exposed_ms / p.comm_ms) : 100.0, "-",
                100.0 * (1.0 - p.efficiency), 100.0 * (1.0 - p.efficiency), 0.0, 0.0, p.link_gbps,
                p.latency_us, p.link.c_str());
  }
  if (world.backend() == cohort::Backend::nccl && rows.back().ranks > 1) {
    std::printf("# measured busbw at %d GPUs: %.1f GB/s; --link-gbps %.0f projects from it\n",
                rows.back().ranks, rows.back().busbw, rows.back().busbw);
  }
  std::fflush(stdout);
}

nlohmann::json report_json(const Setup& setup, const std::vector<Row>& rows,
                           const std::vector<Projection>& projections, const cohort::World& world) {
  const Options& o = setup.options;
  nlohmann::json out;
  out["workload"] = setup.workload.name;
  out["parameters"] = setup.workload.parameter_count();
  out["tensors"] = setup.workload.tensor_count();
  out["batch_per_rank"] = setup.batch;
  out["sample_unit"] = setup.workload.sample_unit;
  out["backend"] = std::string(cohort::to_string(world.backend()));
  out["device"] = world.device().is_host() ? "host" : "cuda";
  out["compute"] = setup.simulated ? "simulated" : "real";
  if (setup.simulated) out["simulated_tflops"] = o.sim_tflops;
  out["machine"] = machine_line();
  out["cohort_version"] = cohort::version();
  out["steps"] = o.steps;
  out["bucket_mb"] = o.bucket_mb;
  out["first_bucket_mb"] = o.first_bucket_mb;
  out["ranks"] = rows.back().ranks;
  out["rows"] = nlohmann::json::array();
  for (const Row& r : rows) {
    out["rows"].push_back({{"ranks", r.ranks},
                           {"step_ms", r.step_ms},
                           {"throughput", r.throughput},
                           {"efficiency", r.efficiency},
                           {"compute_ms", r.compute_ms},
                           {"comm_ms", r.comm_ms},
                           {"exposed_comm_ms", r.exposed_ms},
                           {"imbalance_ms", r.imbalance_ms},
                           {"overlap", r.overlap},
                           {"busbw_gbps", r.busbw},
                           {"bytes_per_step", r.bytes},
                           {"collectives_per_step", r.collectives},
                           {"lost", r.lost},
                           {"lost_exposed_comm", r.lost_exposed},
                           {"lost_imbalance", r.lost_imbalance},
                           {"lost_overhead", r.lost_overhead}});
  }
  out["projection"] = {{"model", "ring: 2(n-1) alpha + 2(n-1)/n bytes / B per bucket"},
                       {"link_gbps", o.link_gbps}, {"link_latency_us", o.link_latency_us},
                       {"node_gbps", o.node_gbps}, {"node_latency_us", o.node_latency_us},
                       {"gpus_per_node", o.gpus_per_node}, {"link_numbers", "given"},
                       {"rows", nlohmann::json::array()}};
  for (const Projection& p : projections) {
    out["projection"]["rows"].push_back({{"ranks", p.gpus},
                                         {"step_ms", p.step_ms},
                                         {"throughput", p.throughput},
                                         {"efficiency", p.efficiency},
                                         {"comm_ms", p.comm_ms},
                                         {"exposed_comm_ms", p.exposed_ms},
                                         {"link_gbps", p.link_gbps},
                                         {"latency_us", p.latency_us},
                                         {"lost_exposed_comm", 1.0 - p.efficiency}});
  }
  return out;
}

/// A Python that has matplotlib: $COHORT_PYTHON, python3 on the PATH, or the system's.
std::string find_python() {
  std::vector<std::string> candidates;
  if (const char* chosen = std::getenv("COHORT_PYTHON")) candidates.emplace_back(chosen);
  candidates.emplace_back("python3");
  candidates.emplace_back("/usr/bin/python3");
  for (const std::string& candidate : candidates) {
    const std::string probe = candidate + " -c 'import matplotlib' >/dev/null 2>&1";
    if (std::system(probe.c_str()) == 0) return candidate;
  }
  COHORT_FAIL(cohort::Error, "--plot needs python3 with matplotlib (Debian: python3-matplotlib; or "
                             "set COHORT_PYTHON); the --json report can be plotted later with "
                             "tools/plot_scaling.py");
}

void write_plot(const std::string& json_path, const std::string& png_path) {
  const std::string command = find_python() + " - '" + json_path + "' '" + png_path + "'";
  std::FILE* pipe = popen(command.c_str(), "w");
  COHORT_CHECK(pipe != nullptr, cohort::Error, "could not start python3 for --plot");
  std::fputs(kPlotScript, pipe);
  const int status = pclose(pipe);
  COHORT_CHECK(status == 0, cohort::Error,
               "python3 (with matplotlib) failed to draw " + png_path +
                   "; install python3-matplotlib, or plot the --json file with tools/plot_scaling.py");
}

int run(cohort::World& world, const Setup& setup) {
  const bool leader = world.rank() == 0;
  std::vector<Row> rows;
  std::size_t buckets = 0;
  const std::string run_scope = "scaling";  // the world's store is scoped to this world
  for (const int k : rank_counts(world.size())) {
    const std::string scope = run_scope + "/" + std::to_string(k);
    if (world.rank() < k) {
      cohort::World group = sub_world(world, k, scope);
      const RankSamples samples = measure(group, setup);
      world.store().set(scope + "/result/" + std::to_string(world.rank()), to_json(samples).dump());
    }
    world.store().set(scope + "/done/" + std::to_string(world.rank()), "1");
    std::vector<std::string> done;
    for (int r = 0; r < world.size(); ++r) done.push_back(scope + "/done/" + std::to_string(r));
    world.store().wait(done, world.timeout());
    if (!leader) continue;
    std::vector<RankSamples> all;
    for (int r = 0; r < k; ++r) {
      all.push_back(from_json(nlohmann::json::parse(
          world.store().get(scope + "/result/" + std::to_string(r), world.timeout()))));
    }
    rows.push_back(summarize(k, all, setup.batch));
    attribute(rows.back(), rows.front());
    buckets = static_cast<std::size_t>(rows.back().collectives);
    std::fprintf(stderr, "scaling_bench: %d ranks: step %.2f ms, efficiency %.1f%%\n", k,
                 rows.back().step_ms, 100.0 * rows.back().efficiency);
  }
  if (!leader) return 0;

  cohort::ParamRegistry registry = registry_of(setup.workload);
  std::vector<Projection> projections;
  for (const int gpus : {8, 64}) projections.push_back(project(gpus, setup, rows.front(), registry));
  print_report(setup, rows, projections, world, buckets);
  const nlohmann::json report = report_json(setup, rows, projections, world);
  if (!setup.options.json.empty()) std::ofstream(setup.options.json) << report.dump(2) << '\n';
  if (!setup.options.plot.empty()) {
    std::string json_path = setup.options.json;
    if (json_path.empty()) {
      json_path = setup.options.plot + ".json";
      std::ofstream(json_path) << report.dump(2) << '\n';
    }
    write_plot(json_path, setup.options.plot);
    std::printf("# plot: %s\n", setup.options.plot.c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  CLI::App app{"weak scaling of data-parallel training through cohort, explained"};
  app.add_option("--workload", options.workload, "mlp, resnet50, bert-large, gpt2-124m")
      ->check(CLI::IsMember({"mlp", "resnet50", "bert-large", "gpt2-124m"}));
  app.add_option("--ranks", options.ranks,
                 "host ranks as threads (when not started by a launcher); default every GPU, or 4 "
                 "host ranks without one");
  app.add_option("--batch-per-rank", options.batch_per_rank, "samples per rank and step (0: the workload's)");
  app.add_option("--steps", options.steps, "timed steps per rank count")->check(CLI::PositiveNumber);
  app.add_option("--warmup", options.warmup, "untimed steps per rank count");
  app.add_option("--compute", options.compute, "auto (real on GPUs, simulated on host ranks), real, simulated")
      ->check(CLI::IsMember({"auto", "real", "simulated"}));
  app.add_option("--sim-tflops", options.sim_tflops, "the rate simulated compute models")
      ->check(CLI::PositiveNumber);
  app.add_option("--bucket-mb", options.bucket_mb, "bucket cap (MiB); default 25, or 4 for mlp");
  app.add_option("--first-bucket-mb", options.first_bucket_mb, "first bucket cap (MiB)");
  app.add_option("--hidden", options.hidden, "mlp: hidden width");
  app.add_option("--layers", options.layers, "mlp: linear layers");
  app.add_option("--link-gbps", options.link_gbps, "projection: all-reduce busbw in a node (GB/s)");
  app.add_option("--link-latency-us", options.link_latency_us, "projection: latency per ring step in a node");
  app.add_option("--node-gbps", options.node_gbps, "projection: all-reduce busbw across nodes (GB/s)");
  app.add_option("--node-latency-us", options.node_latency_us, "projection: latency per ring step across nodes");
  app.add_option("--gpus-per-node", options.gpus_per_node, "projection: GPUs per node");
  app.add_option("--json", options.json, "write the report to this file");
  app.add_option("--plot", options.plot, "draw efficiency and throughput against ranks (PNG)");
  CLI11_PARSE(app, argc, argv);

  try {
    Setup setup;
    setup.options = options;
    setup.workload = layers::make_workload(
        options.workload, layers::MlpConfig{.inputs = 32, .hidden = options.hidden,
                                            .layers = options.layers, .classes = 10,
                                            .dtype = cohort::DType::f32});
    if (setup.options.bucket_mb <= 0.0) setup.options.bucket_mb = options.workload == "mlp" ? 4.0 : 25.0;
    setup.batch = options.batch_per_rank > 0 ? options.batch_per_rank : setup.workload.default_batch_per_rank;
    const bool launched = cohort::LaunchInfo::from_environment().launcher != cohort::Launcher::none;
    auto run_world = [&](cohort::World& world) {
      setup.simulated = options.compute == "simulated" ||
                        (options.compute == "auto" && world.device().is_host());
      return run(world, setup);
    };
    if (launched) {
      cohort::World world = cohort::init();
      return run_world(world);
    }
    cohort::WorldOptions world_options;
    int ranks = options.ranks;
    if (ranks > 0) {
      world_options.backend = cohort::BackendChoice::gloo;
    } else {
      ranks = cohort::cuda_device_count() > 0 ? cohort::cuda_device_count() : 4;
    }
    int status = 0;
    cohort::run_local(ranks, [&](cohort::World& world) {
      const int rank_status = run_world(world);
      if (world.rank() == 0) status = rank_status;
    }, world_options);
    return status;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "scaling_bench: %s\n", error.what());
    return 2;
  }
}
