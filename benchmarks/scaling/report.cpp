#include "scaling/report.hpp"

#include "scaling/conv_work.hpp"

#include <layers/bucket_json.hpp>

#include "common/bench_common.hpp"

#include <cohort/core/env.hpp>
#include <cohort/core/error.hpp>
#include <cohort/ddp/bucket_plan.hpp>
#include <cohort/version.hpp>

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace scaling {
namespace {

using cohort::bench::machine_line;
using cohort::bench::median;

// The matplotlib script that draws --plot (tools/plot_scaling.py, embedded at build time).
constexpr const char* kPlotScript =
#include "scaling_bench_plot.inc"
    ;

/// A Python that has matplotlib: $COHORT_PYTHON, python3 on the PATH, or the system's.
/// Runs `args` as a program with those arguments, through no shell (a path may hold quotes);
/// its output is dropped when `quiet`. Returns its exit status, or -1 when it could not start.
int run_program(const std::vector<std::string>& args, bool quiet) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  if (quiet) {
    posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
  }
  std::vector<char*> argv;
  for (const std::string& arg : args) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  pid_t pid = 0;
  const int started = posix_spawnp(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (started != 0) return -1;
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return -1;
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::string find_python() {
  std::vector<std::string> candidates;
  if (auto chosen = cohort::env::text(cohort::env::kPython)) candidates.push_back(*chosen);
  candidates.emplace_back("python3");
  candidates.emplace_back("/usr/bin/python3");
  for (const std::string& candidate : candidates) {
    if (run_program({candidate, "-c", "import matplotlib"}, /*quiet=*/true) == 0) return candidate;
  }
  COHORT_FAIL(cohort::Error, "--plot needs python3 with matplotlib (Debian: python3-matplotlib; or "
                             "set COHORT_PYTHON); the --json report can be plotted later with "
                             "tools/plot_scaling.py");
}

}  // namespace

Row summarize(int ranks, const std::vector<RankSamples>& all, double batch) {
  Row row;
  row.ranks = ranks;
  row.buckets = all.front().buckets;  // every rank planned the same caps
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

namespace {

/// When each parameter's gradient is complete, for a step whose forward and backward compute
/// take `compute_ms`: forward is a third of it, then the layers' backward in reverse, each in
/// proportion to its FLOPs.
std::vector<double> ready_times(const Setup& setup, const cohort::ParamRegistry& registry,
                                double compute_ms) {
  const double total_flops = 3.0 * setup.workload.forward_flops();
  const double scale = total_flops > 0 ? compute_ms / total_flops : 0.0;
  std::vector<double> ready(registry.size(), 0.0);
  double clock = setup.workload.forward_flops() * scale;
  for (std::size_t l = setup.workload.layers.size(); l-- > 0;) {
    const layers::WorkloadLayer& layer = setup.workload.layers[l];
    clock += 2.0 * layer.forward_flops * scale;
    for (const layers::WorkloadParam& param : layer.params) ready[registry.find(param.name).index] = clock;
  }
  return ready;
}

cohort::BucketPlan plan_for(const cohort::ParamRegistry& registry, int ranks,
                            const cohort::BucketSizing& caps) {
  return cohort::make_bucket_plan(registry, ranks, caps.middle_bytes, caps.first_bytes,
                                  caps.last_bytes);
}

/// The buckets' all-reduces, one after another on the communicator, each issued once its last
/// gradient is ready: their total time, and when the last one ends.
template <typename Cost>
std::pair<double, double> run_buckets(const cohort::BucketPlan& plan,
                                      const std::vector<double>& ready, Cost cost) {
  double total = 0.0, end = 0.0;
  for (const cohort::Bucket& bucket : plan.buckets) {
    double bucket_ready = 0.0;
    for (const std::uint32_t index : bucket.params) bucket_ready = std::max(bucket_ready, ready[index]);
    const double ms = cost(static_cast<double>(bucket.slice.count * cohort::size_of(plan.dtype)));
    total += ms;
    end = std::max(end, bucket_ready) + ms;
  }
  return {total, end};
}

}  // namespace

std::vector<std::size_t> bucket_sizes(const cohort::ParamRegistry& registry, int ranks,
                                      const cohort::BucketSizing& caps) {
  const cohort::BucketPlan plan = plan_for(registry, ranks, caps);
  std::vector<std::size_t> sizes;
  for (const cohort::Bucket& bucket : plan.buckets) {
    sizes.push_back(bucket.slice.count * cohort::size_of(plan.dtype));
  }
  return sizes;
}

// Note [Checking the model]
// The projection is only as good as its model, so the model is first made to predict what was
// measured here. At the largest rank count the probe times all-reduces of the step's own bucket
// sizes (and a small one) on the world that trained, with no compute running, and fits the cost
// of one all-reduce, alpha + bytes / B: per-collective overhead (Gloo's and the host's, the
// two-level ring across nodes with its in-node parts) lands in alpha, the link in B. The model
// then replays the step: compute as measured at that rank count (the slowest rank's), buckets
// all-reduced one after another, each issued once backward has made its last gradient, at the
// fitted cost; the step is that compute plus what communication leaves exposed plus the
// one-rank step's time outside compute (optimizer, synchronization). Its error against the
// measured step is reported; the projection to 8 and 64 GPUs uses the same replay with
// published link numbers in place of the probe.
ModelCheck check_model(const Setup& setup, const Row& row, const Row& one,
                       const cohort::ParamRegistry& registry, const LinkProbe& probe) {
  ModelCheck check;
  check.valid = row.ranks > 1 && !probe.ms.empty();
  if (!check.valid) return check;
  check.ranks = row.ranks;
  check.probe = probe;
  const double compute = row.compute_ms + std::max(0.0, row.imbalance_ms);
  const auto [comm, end] =
      run_buckets(plan_for(registry, row.ranks, row.buckets), ready_times(setup, registry, compute),
                  [&](double bytes) { return probe.alpha_ms + bytes * probe.ms_per_byte; });
  check.comm_ms = comm;
  check.exposed_ms = std::max(0.0, end - compute);
  check.predicted_ms = (one.step_ms - one.compute_ms) + compute + check.exposed_ms;
  check.measured_ms = row.step_ms;
  check.error = (check.predicted_ms - check.measured_ms) / check.measured_ms;
  return check;
}

Projection project(int gpus, const Setup& setup, const Row& one, const cohort::ParamRegistry& registry) {
  const Options& o = setup.options;
  Projection p;
  p.gpus = gpus;
  const bool inside = gpus <= o.gpus_per_node;
  p.link_gbps = inside ? o.link_gbps : o.node_gbps;
  p.latency_us = inside ? o.link_latency_us : o.node_latency_us;
  p.link = inside ? "in a node" : "across nodes";
  const double n = gpus;
  if (!one.buckets.automatic) {
    p.buckets = one.buckets;  // the caps given, as the measured rows used them
  } else {
    // The caps the library would choose on the projected link: the cost below, as alpha and
    // algorithmic bandwidth (GB/s are 1e3 bytes per us).
    p.buckets = cohort::choose_bucket_sizes(
        {.alpha_us = p.latency_us, .bytes_per_us = p.link_gbps * 1e3 * n / (2.0 * (n - 1))});
  }
  const auto [comm, end] = run_buckets(
      plan_for(registry, gpus, p.buckets), ready_times(setup, registry, one.compute_ms),
      [&](double bytes) {
        return p.latency_us * 1e-3 + 2.0 * (n - 1) / n * bytes / (p.link_gbps * 1e9) * 1e3;
      });
  p.comm_ms = comm;
  p.exposed_ms = std::max(0.0, end - one.compute_ms);
  p.step_ms = one.step_ms + p.exposed_ms;
  p.efficiency = one.step_ms / p.step_ms;
  p.throughput = n * setup.batch / (p.step_ms / 1e3);
  return p;
}

void print_report(const Setup& setup, const std::vector<Row>& rows,
                  const std::vector<Projection>& projections, const ModelCheck& check,
                  const cohort::World& world, std::size_t buckets) {
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
  if (o.zero != 0) {
    std::printf("# ZeRO-%d: gradients reduce-scattered%s; the projection below is plain data "
                "parallel's all-reduce model, not checked against this run\n",
                o.zero, o.zero == 3 ? ", each layer a unit gathered before use" : "");
  }
  if (setup.simulated) {
    std::printf("# compute: SIMULATED (a sleep of each layer's FLOPs / %g TFLOP/s on the compute "
                "stream, %.0f ms a step; not a GPU measurement); communication: real\n", o.sim_tflops,
                3.0 * w.forward_flops() * setup.batch / (o.sim_tflops * 1e12) * 1e3);
  } else {
    const bool convs = w.name != "mlp" && ConvWork::applies_to(w);
    const char* how = w.name == "mlp" ? (world.device().is_host() ? "the MLP's layers, OpenBLAS"
                                                                  : "the MLP's layers, cuBLAS FP32")
                      : convs ? (world.device().is_host()
                                     ? "convolutions at the model's shapes, im2col + OpenBLAS; "
                                       "other layers OpenBLAS GEMMs sized to their FLOPs"
                                     : "convolutions at the model's shapes, cuDNN FP32 (no TF32); "
                                       "other layers cuBLAS TF32 GEMMs sized to their FLOPs")
                      : (world.device().is_host() ? "OpenBLAS GEMMs sized to each layer's FLOPs"
                                                  : "cuBLAS TF32 GEMMs sized to each layer's FLOPs");
    std::printf("# compute: real (%s)\n", how);
  }
  std::string timed;
  for (const Row& r : rows) timed += (timed.empty() ? "" : ", ") + std::to_string(r.steps);
  // Automatic caps are measured again at each rank count: the widest one's are shown.
  std::printf("# buckets at %d ranks: %s: %zu all-reduces per step; %s timed steps after %d "
              "warm-up; step times are medians of the slowest rank\n#\n",
              rows.back().ranks, rows.back().buckets.describe().c_str(), buckets, timed.c_str(),
              o.warmup);
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
  if (check.valid) {
    const LinkProbe& probe = check.probe;
    std::printf("#\n# link probe at %d ranks (%s): all-reduce", probe.ranks, probe.backend.c_str());
    for (std::size_t i = 0; i < probe.ms.size(); ++i) {
      std::printf("%s %.0f KiB %.2f ms", i == 0 ? "" : ",", probe.bytes[i] / 1024.0, probe.ms[i]);
    }
    std::printf("; fit: %.3f ms per all-reduce + %.3f ms per MB (%.3f GB/s busbw)\n",
                probe.alpha_ms, probe.ms_per_byte * 1e6,
                probe.ms_per_byte > 0 ? 2.0 * (probe.ranks - 1) / probe.ranks / (probe.ms_per_byte * 1e6)
                                      : 0.0);
    if (!probe.cross_ms.empty()) {
      // How much of each all-reduce the cross-node link alone accounts for: where the lost
      // percent's exposed communication comes from.
      std::printf("# of which the cross-node part alone (each rank's share over the nodes):");
      for (std::size_t i = 0; i < probe.cross_ms.size(); ++i) {
        std::printf("%s %.0f KiB %.2f ms (%.0f%%)", i == 0 ? "" : ",", probe.bytes[i] / 1024.0,
                    probe.cross_ms[i],
                    probe.ms[i] > 0 ? 100.0 * probe.cross_ms[i] / probe.ms[i] : 0.0);
      }
      std::printf("\n");
    }
    std::printf("# model check at %d ranks (Note [Checking the model]): measured step %.2f ms, "
                "predicted %.2f ms (communication %.2f ms, exposed %.2f ms): error %+.1f%%\n",
                check.ranks, check.measured_ms, check.predicted_ms, check.comm_ms,
                check.exposed_ms, 100.0 * check.error);
  }
  std::printf("#\n# projection (assumed inputs, not measured here): each bucket's all-reduce "
              "costs alpha + 2(n-1)/n x bytes / B, alpha and B published nccl-tests numbers "
              "(docs/design.md); buckets issued as backward makes them ready; compute as measured "
              "at 1 rank%s; imbalance and overhead not modelled; %s\n",
              setup.simulated ? " (simulated)" : "",
              check.valid ? ("the model was " + std::to_string(static_cast<int>(std::lround(100.0 * std::abs(check.error)))) +
                             "% off the measured step at " + std::to_string(check.ranks) + " ranks here").c_str()
                          : "the model was not checked against a measurement here");
  for (const Projection& p : projections) {
    std::printf("  %5d %9.2f %11.1f %6.1f | %9.2f %9.2f %9.2f %7.1f %9s | %6.1f = %8.1f + %9.1f + %8.1f"
                "   (B %g GB/s, alpha %g us per all-reduce %s: assumed; buckets %s)\n",
                p.gpus, p.step_ms, p.throughput, 100.0 * p.efficiency, rows.front().compute_ms,
                p.comm_ms, p.exposed_ms,
                p.comm_ms > 0 ? 100.0 * (1.0 - p.exposed_ms / p.comm_ms) : 100.0, "-",
                100.0 * (1.0 - p.efficiency), 100.0 * (1.0 - p.efficiency), 0.0, 0.0, p.link_gbps,
                p.latency_us, p.link.c_str(), p.buckets.describe().c_str());
  }
  if (world.backend() == cohort::Backend::nccl && rows.back().ranks > 1) {
    std::printf("# measured busbw at %d GPUs: %.1f GB/s; --link-gbps %.0f projects from it\n",
                rows.back().ranks, rows.back().busbw, rows.back().busbw);
  }
  std::fflush(stdout);
}

nlohmann::json report_json(const Setup& setup, const std::vector<Row>& rows,
                           const std::vector<Projection>& projections, const ModelCheck& check,
                           const cohort::World& world) {
  const Options& o = setup.options;
  nlohmann::json out;
  out["workload"] = setup.workload.name;
  out["zero"] = o.zero;
  out["parameters"] = setup.workload.parameter_count();
  out["tensors"] = setup.workload.tensor_count();
  out["batch_per_rank"] = setup.batch;
  out["sample_unit"] = setup.workload.sample_unit;
  out["backend"] = std::string(cohort::to_string(world.backend()));
  out["device"] = world.device().is_host() ? "host" : "cuda";
  out["compute"] = setup.simulated ? "simulated" : "real";
  if (setup.simulated) {
    out["simulated_tflops"] = o.sim_tflops;
    out["simulated_compute_ms"] = 3.0 * setup.workload.forward_flops() * setup.batch / (o.sim_tflops * 1e12) * 1e3;
  }
  out["machine"] = machine_line();
  out["cohort_version"] = cohort::version();
  out["steps"] = o.steps;  // at most; each row's timed_steps says how many ran
  out["warmup"] = o.warmup;
  out["bucket_caps"] = o.bucket_mb > 0.0 ? "fixed" : "auto";  // each row says which it used
  out["ranks"] = rows.back().ranks;
  out["rows"] = nlohmann::json::array();
  for (const Row& r : rows) {
    out["rows"].push_back({{"ranks", r.ranks},
                           {"timed_steps", r.steps},
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
                           {"lost_overhead", r.lost_overhead},
                           {"buckets", layers::bucket_json(r.buckets)}});
  }
  if (check.valid) {
    out["model_check"] = {{"ranks", check.ranks},
                          {"measured_step_ms", check.measured_ms},
                          {"predicted_step_ms", check.predicted_ms},
                          {"error", check.error},
                          {"predicted_comm_ms", check.comm_ms},
                          {"predicted_exposed_comm_ms", check.exposed_ms},
                          {"probe", {{"ranks", check.probe.ranks},
                                     {"backend", check.probe.backend},
                                     {"bytes", check.probe.bytes},
                                     {"ms", check.probe.ms},
                                     {"cross_node_ms", check.probe.cross_ms},
                                     {"alpha_ms", check.probe.alpha_ms},
                                     {"ms_per_byte", check.probe.ms_per_byte}}}};
  }
  out["projection"] = {{"model", "per bucket alpha + 2(n-1)/n bytes / B, buckets as backward makes them ready"},
                       {"link_gbps", o.link_gbps}, {"link_latency_us", o.link_latency_us},
                       {"node_gbps", o.node_gbps}, {"node_latency_us", o.node_latency_us},
                       {"gpus_per_node", o.gpus_per_node},
                       {"link_numbers", "assumed: published nccl-tests numbers (docs/design.md)"},
                       {"model_error_here", check.valid ? nlohmann::json(check.error) : nlohmann::json()},
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
                                         {"buckets", layers::bucket_json(p.buckets)},
                                         {"lost_exposed_comm", 1.0 - p.efficiency}});
  }
  return out;
}

void write_plot(const std::string& json_path, const std::string& png_path) {
  // An argument vector, never a shell command: the paths are the user's and may hold quotes.
  const int status = run_program({find_python(), "-c", kPlotScript, json_path, png_path}, false);
  COHORT_CHECK(status == 0, cohort::Error,
               "python3 (with matplotlib) failed to draw " + png_path +
                   "; install python3-matplotlib, or plot the --json file with tools/plot_scaling.py");
}

}  // namespace scaling
