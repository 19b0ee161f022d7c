#include "scaling/report.hpp"

#include "scaling/conv_work.hpp"
#include "scaling/gemm_work.hpp"

#include <layers/bucket_json.hpp>

#include "common/bench_common.hpp"

#include <cohort/core/env.hpp>
#include <cohort/core/error.hpp>
#include <cohort/version.hpp>

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>

namespace scaling {
namespace {

using cohort::bench::machine_line;
using Json = nlohmann::json;

// The matplotlib script that draws --plot (tools/plot_scaling.py, embedded at build time).
constexpr const char* kPlotScript =
#include "scaling_bench_plot.inc"
    ;

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

/// A Python that has matplotlib: $COHORT_PYTHON, python3 on the PATH, or the system's.
std::string find_python() {
  std::vector<std::string> candidates;
  if (auto chosen = cohort::env::text(cohort::env::kPython)) candidates.push_back(*chosen);
  candidates.emplace_back("python3");
  candidates.emplace_back("/usr/bin/python3");
  for (const std::string& candidate : candidates) {
    if (run_program({candidate, "-c", "import matplotlib"}, /*quiet=*/true) == 0) return candidate;
  }
  COHORT_FAIL(cohort::Error,
              "--plot needs python3 with matplotlib (Debian: python3-matplotlib; or "
              "set COHORT_PYTHON); the --json report can be plotted later with "
              "tools/plot_scaling.py");
}

double simulated_asked_ms(const Setup& setup) {
  return 3.0 * setup.workload.forward_flops() * setup.batch / (setup.options.sim_tflops * 1e12) *
         1e3;
}

/// The throughput in the workload's unit: tokens/s for the transformers.
double shown_throughput(const Setup& setup, double samples_per_s) {
  return setup.tokens_per_sample > 0 ? samples_per_s * setup.tokens_per_sample : samples_per_s;
}
std::string throughput_unit(const Setup& setup) {
  return setup.tokens_per_sample > 0 ? "tokens/s" : setup.workload.sample_unit + "/s";
}

std::string compute_words(const Setup& setup, bool gpu) {
  const Options& o = setup.options;
  const layers::Workload& w = setup.workload;
  if (setup.simulated) {
    char text[320];
    std::snprintf(text, sizeof(text),
                  "SIMULATED: a sleep of each layer's FLOPs at %.4g TFLOP/s, %.0f ms of forward "
                  "and backward a step asked (%s); not a GPU measurement; communication real",
                  o.sim_tflops, simulated_asked_ms(setup),
                  o.sim_tflops_given ? "--sim-tflops" : "--target-step-ms");
    return text;
  }
  const bool convs = w.name != "mlp" && ConvWork::applies_to(w);
  std::string how;
  if (w.name == "mlp") {
    how = gpu ? "the MLP's layers, cuBLAS" : "the MLP's layers, OpenBLAS";
  } else if (convs) {
    how = std::string(gpu ? "convolutions at the model's shapes, cuDNN "
                          : "convolutions at the "
                            "model's shapes, im2col + OpenBLAS ") +
          (setup.grad_dtype == cohort::DType::bf16     ? "BF16"
           : gpu && setup.precision == Precision::tf32 ? "TF32"
                                                       : "FP32 (no TF32)") +
          "; other layers " + GemmWork::describe(setup.precision, gpu) +
          " GEMMs sized to their FLOPs; real-valued data";
  } else {
    how = std::string(GemmWork::describe(setup.precision, gpu)) +
          " GEMMs sized to each layer's FLOPs; real-valued data";
  }
  return "real (" + how + ")";
}

Json stat_json(const Stat& stat, double scale = 1e-3) {
  return {{"mean_kept", stat.value * scale},
          {"p10", stat.p10 * scale},
          {"median", stat.median * scale},
          {"p90", stat.p90 * scale}};
}

std::string pct(double fraction) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f", 100.0 * fraction);
  return text;
}

std::string range(const Stat& stat) {
  char text[64];
  std::snprintf(text, sizeof(text), "%.1f..%.1f", stat.p10, stat.p90);
  return text;
}

}  // namespace

void print_report(const Setup& setup, const Report& report) {
  const Options& o = setup.options;
  const layers::Workload& w = setup.workload;
  const std::vector<Row>& rows = report.rows;
  const Topology& t = report.topology;
  const bool gpu = t.device != "host";
  const double gradient_mb = static_cast<double>(w.parameter_count()) *
                             static_cast<double>(cohort::size_of(setup.grad_dtype)) * 1e-6;
  std::printf(
      "# scaling_bench: %s, %.1fM parameters in %zu tensors (%.1f MB of %s gradients), %d "
      "%s per rank%s, %s; cohort %s (%s)\n",
      w.name.c_str(), static_cast<double>(w.parameter_count()) / 1e6, w.tensor_count(), gradient_mb,
      std::string(cohort::to_string(setup.grad_dtype)).c_str(), setup.batch, w.sample_unit.c_str(),
      setup.tokens_per_sample > 0
          ? (" of " + std::to_string(setup.tokens_per_sample) + " tokens").c_str()
          : "",
      to_string(setup.precision), cohort::version(), cohort::bench::commit().c_str());
  std::printf("# up to %d ranks on %d node(s) of %d, %s, on %s; %s\n", t.ranks, t.nodes,
              t.ranks_per_node, t.backend.c_str(), gpu ? t.device.c_str() : "host ranks",
              machine_line().c_str());
  std::printf("# compute: %s\n", compute_words(setup, gpu).c_str());
  if (o.zero != 0) {
    std::printf(
        "# ZeRO-%d: gradients reduce-scattered%s; no model check or projection, which "
        "model plain data parallel's all-reduces\n",
        o.zero, o.zero == 3 ? ", each layer a unit gathered before use" : "");
  }
  std::string timed;
  for (const Row& r : rows) timed += (timed.empty() ? "" : ", ") + std::to_string(r.steps);
  std::printf(
      "# buckets at %d ranks: %s: %.0f all-reduces per step; %s timed steps after %d "
      "warm-up. Each number: the mean over the steps within Tukey's fences of the step "
      "time (the slowest rank's); spreads below are p10..p90 over every step\n#\n",
      rows.back().ranks, rows.back().buckets.describe().c_str(), rows.back().collectives,
      timed.c_str(), o.warmup);
  const std::string unit = throughput_unit(setup);
  std::printf("# %5s %9s %12s %6s | %9s %9s %9s %7s %9s | %5s = %7s + %7s + %7s + %7s + %7s%s\n",
              "ranks", "step", "throughput", "effic", "compute", "comm", "exposed", "overlap",
              "step", "lost", "compute", "imbal-", "exposed", "optim-", "outside",
              setup.simulated ? " | sim" : "");
  std::printf("# %5s %9s %12s %6s | %9s %9s %9s %7s %9s | %5s   %7s   %7s   %7s   %7s   %7s%s\n",
              "", "(ms)", unit.c_str(), "(%)", "(ms)", "(ms)", "(ms)", "(%)", "busbw", "(%)",
              "slower", "ance", "comm", "slower", "slower",
              setup.simulated ? " | compute vs asked" : "");
  for (const Row& r : rows) {
    std::string sim;
    if (setup.simulated) {
      char text[48];
      std::snprintf(text, sizeof(text), " | %+.1f%%",
                    100.0 * (r.compute_ms.value / simulated_asked_ms(setup) - 1.0));
      sim = text;
    }
    if (r.ranks == 1) {
      std::printf(
          "  %5d %9.2f %12.1f %6.1f | %9.2f %9s %9s %7s %9s | %5s   %7s   %7s   %7s   %7s   "
          "%7s%s\n",
          r.ranks, r.step_ms.value, shown_throughput(setup, r.throughput), 100.0 * r.efficiency,
          r.compute_ms.value, "-", "-", "-", "-", "-", "-", "-", "-", "-", "-", sim.c_str());
      continue;
    }
    const double s = r.step_ms.value;
    std::printf(
        "  %5d %9.2f %12.1f %6.1f | %9.2f %9.2f %9.2f %7.1f %9.3f | %5.1f = %7s + %7s + %7s "
        "+ %7s + %7s%s\n",
        r.ranks, s, shown_throughput(setup, r.throughput), 100.0 * r.efficiency, r.compute_ms.value,
        r.comm_ms.value, r.lost.exposed.value, 100.0 * r.overlap, r.step_busbw,
        100.0 * r.lost_ms / s, pct(r.lost.compute_slowdown.value / s).c_str(),
        pct(r.lost.imbalance.value / s).c_str(), pct(r.lost.exposed.value / s).c_str(),
        pct(r.lost.optimizer_slowdown.value / s).c_str(),
        pct(r.lost.outside_slowdown.value / s).c_str(), sim.c_str());
  }
  std::printf(
      "#\n# where the lost time goes, in ms (the five parts add up to it), each part's "
      "p10..p90 over every step in brackets:\n");
  for (const Row& r : rows) {
    if (r.ranks == 1) continue;
    std::printf(
        "  %5d lost %.2f ms = compute slower %.2f [%s] + imbalance %.2f [%s] + exposed "
        "communication %.2f [%s] + optimizer slower %.2f [%s] + outside slower %.2f [%s]; "
        "step %.2f [%s], of which issuing buckets %.2f\n",
        r.ranks, r.lost_ms, r.lost.compute_slowdown.value, range(r.lost.compute_slowdown).c_str(),
        r.lost.imbalance.value, range(r.lost.imbalance).c_str(), r.lost.exposed.value,
        range(r.lost.exposed).c_str(), r.lost.optimizer_slowdown.value,
        range(r.lost.optimizer_slowdown).c_str(), r.lost.outside_slowdown.value,
        range(r.lost.outside_slowdown).c_str(), r.step_ms.value, range(r.step_ms).c_str(),
        r.issue_ms.value);
    std::printf("        %.0f all-reduces a step, caps %s\n", r.collectives,
                r.buckets.describe().c_str());
  }
  std::printf(
      "#   compute slower: forward and backward took longer than on 1 rank (communication "
      "and other ranks competing for cores, SMs, memory); imbalance: waiting for the "
      "slowest rank's forward and backward; exposed communication: what the step's "
      "slowest rank waited for the all-reduces beyond that; optimizer slower, outside "
      "slower (launching, synchronizing): against 1 rank. What to do: exposed, smaller "
      "buckets (--bucket-mb) or a larger batch per rank; imbalance, a slow GPU or uneven "
      "input; compute slower, fewer ranks per core or fewer communication threads; "
      "optimizer, a fused optimizer or ZeRO\n");
  if (setup.simulated) {
    std::printf(
        "#   sim: the simulated forward and backward as measured against the %.0f ms "
        "asked: a sleep overshoots its target; every efficiency of simulated compute "
        "depends on the time asked (%s): a longer compute hides more communication\n",
        simulated_asked_ms(setup), o.sim_tflops_given ? "--sim-tflops" : "--target-step-ms");
  }
  std::printf(
      "#\n# bandwidths, each under one name: step busbw = gradient bytes x 2(k-1)/k / the "
      "all-reduces' time in the step on the rank that reached them last (as they ran, "
      "beside backward); link busbw = 2(k-1)/k / the slope of the link probe's fit (the "
      "link alone, large all-reduces); the buckets line's beta = bytes / time of one "
      "all-reduce (no 2(k-1)/k), measured by DataParallel at start to choose its caps\n");

  bool any_check = false;
  for (const ModelCheck& c : report.checks) any_check = any_check || c.valid;
  if (any_check) {
    std::printf(
        "#\n# model check (Note [Checking the model], scaling/model.cpp): each measured "
        "count predicted from its own per-rank compute, imbalance, optimizer and outside "
        "time and its all-reduces as they ran, step by step; then the same with the link "
        "probe's cost of each all-reduce (the link alone), and the two communications\n");
    std::printf("# %5s %10s %10s %7s | %12s %7s | %9s %10s %12s %12s %8s\n", "ranks", "measured",
                "predicted", "error", "with probe's", "error", "probe", "link busbw", "comm (step)",
                "comm (probe)", "step /");
    std::printf("# %5s %10s %10s %7s | %12s %7s | %9s %10s %12s %12s %8s\n", "", "(ms)", "(ms)",
                "(%)", "link (ms)", "(%)", "alpha(ms)", "(GB/s)", "(ms)", "(ms)", "probe");
    for (const ModelCheck& c : report.checks) {
      if (!c.valid) continue;
      if (!c.probed) {
        std::printf("  %5d %10.2f %10.2f %+7.1f | %12s %7s | %9s %10s %12.2f %12s %8s\n", c.ranks,
                    c.measured_ms, c.predicted_ms, 100.0 * c.error, "-", "-", "-", "-",
                    c.step_comm_ms, "-", "-");
        continue;
      }
      std::printf("  %5d %10.2f %10.2f %+7.1f | %12.2f %+7.1f | %9.3f %10.3f %12.2f %12.2f %8.2f\n",
                  c.ranks, c.measured_ms, c.predicted_ms, 100.0 * c.error, c.predicted_probe_ms,
                  100.0 * c.error_probe, c.probe.alpha_ms, c.probe.link_busbw_gbps(),
                  c.step_comm_ms, c.probe_comm_ms,
                  c.probe_comm_ms > 0 ? c.step_comm_ms / c.probe_comm_ms : 0.0);
    }
    for (const ModelCheck& c : report.checks) {
      if (!c.valid || c.probe.cross_ms.empty()) continue;
      std::printf("#   across nodes at %d ranks, the cross-node part alone:", c.ranks);
      for (std::size_t i = 0; i < c.probe.cross_ms.size(); ++i) {
        std::printf("%s %.0f KiB %.2f ms (%.0f%%)", i == 0 ? "" : ",", c.probe.bytes[i] / 1024.0,
                    c.probe.cross_ms[i],
                    c.probe.ms[i] > 0 ? 100.0 * c.probe.cross_ms[i] / c.probe.ms[i] : 0.0);
      }
      std::printf("\n");
    }
  } else {
    std::printf("#\n# model check: none (%s)\n",
                o.zero != 0 ? "the model replays plain data parallel's all-reduces"
                            : "one rank: nothing to predict");
  }

  const ProjectionPlan& plan = report.basis.plan;
  std::printf("#\n");
  if (!plan.valid) {
    std::printf("# no projection: %s\n", plan.why_not.c_str());
    std::fflush(stdout);
    return;
  }
  std::printf("# PROJECTION (not measured) to %s; inputs and their sources:\n",
              plan.target.c_str());
  for (const Input& input : plan.inputs) {
    std::printf("#   %s: %.4g %s (%s)\n", input.name.c_str(), input.value, input.unit.c_str(),
                input.source.c_str());
  }
  for (const std::string& assumption : plan.assumptions)
    std::printf("#   %s\n", assumption.c_str());
  std::printf("# %5s %22s %12s %19s | %9s %9s %9s %9s %9s | %s\n", "gpus", "step (ms) [band]",
              unit.c_str(), "effic (%) [band]", "compute", "imbal", "comm", "exposed", "other",
              "link");
  for (const Projection& p : report.projections) {
    if (!p.valid) {
      std::printf("  %5d no projection: %s\n", p.gpus, p.why_not.c_str());
      continue;
    }
    char step[64], effic[64];
    std::snprintf(step, sizeof(step), "%.3g [%.3g..%.3g]", p.step_ms, p.step_low_ms,
                  p.step_high_ms);
    std::snprintf(effic, sizeof(effic), "%.1f [%.1f..%.1f]", 100.0 * p.efficiency,
                  100.0 * p.efficiency_low, 100.0 * p.efficiency_high);
    std::printf("  %5d %22s %12.4g %19s | %9.3g %9.3g %9.3g %9.3g %9.3g | %s, buckets %s\n", p.gpus,
                step, shown_throughput(setup, p.throughput), effic, p.compute_ms, p.imbalance_ms,
                p.comm_ms, p.exposed_ms, p.other_ms, p.link.c_str(), p.buckets.describe().c_str());
  }
  std::fflush(stdout);
}

nlohmann::json report_json(const Setup& setup, const Report& report) {
  const Options& o = setup.options;
  const Topology& t = report.topology;
  Json out = cohort::bench::provenance(kSchema, o.command_line, t.hosts);
  const layers::Workload& w = setup.workload;
  out["workload"] = {{"name", w.name},
                     {"parameters", w.parameter_count()},
                     {"tensors", w.tensor_count()},
                     {"gradient_bytes", static_cast<double>(w.parameter_count()) *
                                            static_cast<double>(cohort::size_of(setup.grad_dtype))},
                     {"gradient_dtype", std::string(cohort::to_string(setup.grad_dtype))},
                     {"precision", to_string(setup.precision)},
                     {"batch_per_rank", setup.batch},
                     {"sample_unit", w.sample_unit},
                     {"tokens_per_sample",
                      setup.tokens_per_sample > 0 ? Json(setup.tokens_per_sample) : Json(nullptr)},
                     {"forward_flop_per_sample", w.forward_flops()}};
  out["topology"] = {{"ranks", t.ranks},
                     {"nodes", t.nodes},
                     {"ranks_per_node", t.ranks_per_node},
                     {"backend", t.backend},
                     {"device", t.device}};
  out["compute"] = {
      {"kind", setup.simulated ? "simulated" : "real"},
      {"description", compute_words(setup, t.device != "host")},
      {"simulated",
       setup.simulated ? Json{{"asked_s", simulated_asked_ms(setup) * 1e-3},
                              {"rate_flop_per_s", o.sim_tflops * 1e12},
                              {"setting", o.sim_tflops_given ? "--sim-tflops" : "--target-step-ms"}}
                       : Json(nullptr)}};
  out["settings"] = {{"steps_at_most", o.steps},
                     {"warmup_steps", o.warmup},
                     {"budget_s", setup.budgeted ? Json(o.budget_s) : Json(nullptr)},
                     {"bucket_caps", o.bucket_mb > 0.0 ? "fixed" : "auto"},
                     {"zero_stage", o.zero},
                     {"statistic", "mean over the steps within Tukey's fences of the step time"}};
  out["rows"] = Json::array();
  for (const Row& r : report.rows) {
    const bool many = r.ranks > 1;
    const double s = r.step_ms.value;
    Json lost = nullptr, lost_fraction = nullptr;
    if (many) {
      lost = {{"total_s", r.lost_ms * 1e-3},
              {"compute_slowdown_s", stat_json(r.lost.compute_slowdown)},
              {"imbalance_s", stat_json(r.lost.imbalance)},
              {"exposed_comm_s", stat_json(r.lost.exposed)},
              {"optimizer_slowdown_s", stat_json(r.lost.optimizer_slowdown)},
              {"outside_slowdown_s", stat_json(r.lost.outside_slowdown)}};
      lost_fraction = {{"total", r.lost_ms / s},
                       {"compute_slowdown", r.lost.compute_slowdown.value / s},
                       {"imbalance", r.lost.imbalance.value / s},
                       {"exposed_comm", r.lost.exposed.value / s},
                       {"optimizer_slowdown", r.lost.optimizer_slowdown.value / s},
                       {"outside_slowdown", r.lost.outside_slowdown.value / s}};
    }
    out["rows"].push_back(
        {{"ranks", r.ranks},
         {"timed_steps", r.steps},
         {"kept_steps", r.kept},
         {"step_s", stat_json(r.step_ms)},
         {"throughput_samples_per_s", r.throughput},
         {"throughput_tokens_per_s", setup.tokens_per_sample > 0
                                         ? Json(r.throughput * setup.tokens_per_sample)
                                         : Json(nullptr)},
         {"efficiency",
          {{"value", r.efficiency}, {"p10", r.efficiency_p10}, {"p90", r.efficiency_p90}}},
         {"compute_s", stat_json(r.compute_ms)},
         {"issue_s", stat_json(r.issue_ms)},
         {"wait_s", stat_json(r.wait_ms)},
         {"optimizer_s", stat_json(r.optimizer_ms)},
         {"outside_s", stat_json(r.outside_ms)},
         {"comm_s", many ? stat_json(r.comm_ms) : Json(nullptr)},
         {"overlap", many ? Json(r.overlap) : Json(nullptr)},
         {"step_busbw_bytes_per_s", many ? Json(r.step_busbw * 1e9) : Json(nullptr)},
         {"bytes_per_step", r.bytes},
         {"collectives_per_step", r.collectives},
         {"lost", lost},
         {"lost_fraction", lost_fraction},
         {"simulated_compute_overshoot",
          setup.simulated ? Json(r.compute_ms.value / simulated_asked_ms(setup) - 1.0)
                          : Json(nullptr)},
         {"step_series_s",
          [&] {
            std::vector<double> seconds;
            for (const double v : r.step_series) seconds.push_back(v * 1e-3);
            return seconds;
          }()},
         {"buckets", layers::bucket_json(r.buckets)}});
  }
  out["model_checks"] = Json::array();
  for (const ModelCheck& c : report.checks) {
    if (!c.valid) continue;
    out["model_checks"].push_back(
        {{"ranks", c.ranks},
         {"measured_step_s", c.measured_ms * 1e-3},
         {"predicted_step_s", c.predicted_ms * 1e-3},
         {"error", c.error},
         {"predicted_step_s_with_probe_link",
          c.probed ? Json(c.predicted_probe_ms * 1e-3) : Json(nullptr)},
         {"error_with_probe_link", c.probed ? Json(c.error_probe) : Json(nullptr)},
         {"step_comm_s", c.step_comm_ms * 1e-3},
         {"probe_comm_s", c.probed ? Json(c.probe_comm_ms * 1e-3) : Json(nullptr)},
         {"probe", c.probed ? Json{{"ranks", c.probe.ranks},
                                   {"backend", c.probe.backend},
                                   {"bytes", c.probe.bytes},
                                   {"time_s",
                                    [&] {
                                      std::vector<double> seconds;
                                      for (const double v : c.probe.ms) seconds.push_back(v * 1e-3);
                                      return seconds;
                                    }()},
                                   {"cross_node_time_s",
                                    [&] {
                                      std::vector<double> seconds;
                                      for (const double v : c.probe.cross_ms)
                                        seconds.push_back(v * 1e-3);
                                      return seconds;
                                    }()},
                                   {"alpha_s", c.probe.alpha_ms * 1e-3},
                                   {"link_busbw_bytes_per_s", c.probe.link_busbw_gbps() * 1e9}}
                            : Json(nullptr)}});
  }
  const ProjectionPlan& plan = report.basis.plan;
  Json projection = {{"target", plan.valid ? Json(plan.target) : Json(nullptr)},
                     {"why_not", plan.valid ? Json(nullptr) : Json(plan.why_not)},
                     {"inputs", Json::array()},
                     {"assumptions", plan.assumptions},
                     {"band", plan.error_known ? Json{{"error_low", plan.error_low},
                                                      {"error_high", plan.error_high}}
                                               : Json(nullptr)},
                     {"rows", Json::array()}};
  for (const Input& input : plan.inputs) {
    projection["inputs"].push_back({{"name", input.name},
                                    {"value", input.value},
                                    {"unit", input.unit},
                                    {"source", input.source}});
  }
  for (const Projection& p : report.projections) {
    if (!p.valid) {
      projection["rows"].push_back({{"ranks", p.gpus}, {"why_not", p.why_not}});
      continue;
    }
    projection["rows"].push_back({{"ranks", p.gpus},
                                  {"step_s", p.step_ms * 1e-3},
                                  {"step_s_low", p.step_low_ms * 1e-3},
                                  {"step_s_high", p.step_high_ms * 1e-3},
                                  {"efficiency", p.efficiency},
                                  {"efficiency_low", p.efficiency_low},
                                  {"efficiency_high", p.efficiency_high},
                                  {"throughput_samples_per_s", p.throughput},
                                  {"compute_s", p.compute_ms * 1e-3},
                                  {"imbalance_s", p.imbalance_ms * 1e-3},
                                  {"comm_s", p.comm_ms * 1e-3},
                                  {"exposed_comm_s", p.exposed_ms * 1e-3},
                                  {"other_s", p.other_ms * 1e-3},
                                  {"link", p.link},
                                  {"buckets", layers::bucket_json(p.buckets)}});
  }
  out["projection"] = projection;
  return out;
}

void write_plot(const std::string& json_path, const std::string& picture_path) {
  // An argument vector, never a shell command: the paths are the user's and may hold quotes.
  const std::string python = find_python();
  const int status = run_program({python, "-c", kPlotScript, json_path, picture_path}, false);
  COHORT_CHECK(status == 0, cohort::Error,
               python + " failed to draw " + picture_path + " (exit " + std::to_string(status) +
                   ", its message above); the --json report can be plotted again with "
                   "tools/plot_scaling.py");
}

namespace {

std::optional<Json> load_report(const std::string& path, std::string& problem) {
  std::ifstream in(path);
  if (!in) {
    problem = "cannot read '" + path + "'";
    return std::nullopt;
  }
  Json report;
  try {
    in >> report;
  } catch (const std::exception& error) {
    problem = "'" + path + "' is not JSON: " + error.what();
    return std::nullopt;
  }
  const std::string schema = report.value("schema", std::string());
  const std::string want(kSchema);
  if (schema.substr(0, schema.find('/')) != want.substr(0, want.find('/')) ||
      schema.substr(schema.find('/') + 1).substr(0, 1) !=
          want.substr(want.find('/') + 1).substr(0, 1)) {
    problem =
        "'" + path + "' is " +
        (schema.empty() ? std::string("no versioned scaling_bench report") : "schema " + schema) +
        ", not " + want + ": compare reports of this version (rerun with --json)";
    return std::nullopt;
  }
  return report;
}

/// A number of a report with `decimals` decimals, times `scale`; "-" where there is none.
std::string text_of(const Json& value, int decimals, double scale = 1.0) {
  if (value.is_null() || !value.is_number()) return "-";
  char text[48];
  std::snprintf(text, sizeof(text), "%.*f", decimals, value.get<double>() * scale);
  return text;
}

const Json* row_at(const Json& report, int ranks) {
  for (const Json& row : report.at("rows")) {
    if (row.at("ranks") == ranks) return &row;
  }
  return nullptr;
}

}  // namespace

int compare_reports(const std::string& a_path, const std::string& b_path) {
  std::string problem;
  const auto a = load_report(a_path, problem);
  if (!a) {
    std::fprintf(stderr, "scaling_bench: --compare: %s\n", problem.c_str());
    return 2;
  }
  const auto b = load_report(b_path, problem);
  if (!b) {
    std::fprintf(stderr, "scaling_bench: --compare: %s\n", problem.c_str());
    return 2;
  }
  const auto describe = [](const char* label, const std::string& path, const Json& r) {
    std::string hosts;
    for (const Json& host : r.at("hosts")) {
      if (!hosts.empty()) hosts += ',';
      hosts += host.get<std::string>();
    }
    std::printf(
        "# %s: %s\n#    %s, commit %s, cohort %s; %d ranks on %d node(s) (%s, %s) on %s\n"
        "#    %s, %s, batch %d per rank; compute %s\n",
        label, path.c_str(), r.at("timestamp").get<std::string>().c_str(),
        r.at("commit").get<std::string>().c_str(),
        r.at("cohort_version").get<std::string>().c_str(), r.at("topology").at("ranks").get<int>(),
        r.at("topology").at("nodes").get<int>(),
        r.at("topology").at("backend").get<std::string>().c_str(),
        r.at("topology").at("device").get<std::string>().c_str(), hosts.c_str(),
        r.at("workload").at("name").get<std::string>().c_str(),
        r.at("workload").at("precision").get<std::string>().c_str(),
        r.at("workload").at("batch_per_rank").get<int>(),
        r.at("compute").at("kind").get<std::string>().c_str());
  };
  describe("A", a_path, *a);
  describe("B", b_path, *b);
  for (const char* key : {"name", "precision", "batch_per_rank"}) {
    if (a->at("workload").at(key) != b->at("workload").at(key)) {
      std::printf(
          "# WARNING: the workloads differ in %s (%s against %s): the rows compare "
          "different jobs\n",
          key, a->at("workload").at(key).dump().c_str(), b->at("workload").at(key).dump().c_str());
    }
  }
  if (a->at("compute").at("kind") != b->at("compute").at("kind")) {
    std::printf("# WARNING: one run's compute is simulated, the other's real\n");
  }
  std::set<int> counts;
  for (const Json* report : {&*a, &*b}) {
    for (const Json& row : report->at("rows")) counts.insert(row.at("ranks").get<int>());
  }
  std::printf("#\n# %5s | %9s %9s %6s | %12s %12s | %6s %6s | %15s %15s\n", "ranks", "step A",
              "step B", "B/A", "samples/s A", "samples/s B", "eff A", "eff B", "exposed A/B",
              "imbalance A/B");
  std::printf("# %5s | %9s %9s %6s | %12s %12s | %6s %6s | %15s %15s\n", "", "(ms)", "(ms)", "", "",
              "", "(%)", "(%)", "(% of step)", "(% of step)");
  for (const int k : counts) {
    const Json* ra = row_at(*a, k);
    const Json* rb = row_at(*b, k);
    const auto step = [](const Json* row) {
      return row != nullptr ? row->at("step_s").at("mean_kept") : Json(nullptr);
    };
    const auto field = [](const Json* row, const char* key) {
      return row != nullptr && row->contains(key) ? row->at(key) : Json(nullptr);
    };
    const auto lost = [](const Json* row, const char* key) {
      return row != nullptr && !row->at("lost_fraction").is_null()
                 ? row->at("lost_fraction").at(key)
                 : Json(nullptr);
    };
    const Json sa = step(ra), sb = step(rb);
    const Json ratio = sa.is_number() && sb.is_number() ? Json(sb.get<double>() / sa.get<double>())
                                                        : Json(nullptr);
    std::printf(
        "  %5d | %9s %9s %6s | %12s %12s | %6s %6s | %7s/%-7s %7s/%-7s\n", k,
        text_of(sa, 2, 1e3).c_str(), text_of(sb, 2, 1e3).c_str(), text_of(ratio, 3).c_str(),
        text_of(field(ra, "throughput_samples_per_s"), 1).c_str(),
        text_of(field(rb, "throughput_samples_per_s"), 1).c_str(),
        text_of(ra != nullptr ? ra->at("efficiency").at("value") : Json(nullptr), 1, 100).c_str(),
        text_of(rb != nullptr ? rb->at("efficiency").at("value") : Json(nullptr), 1, 100).c_str(),
        text_of(lost(ra, "exposed_comm"), 1, 100).c_str(),
        text_of(lost(rb, "exposed_comm"), 1, 100).c_str(),
        text_of(lost(ra, "imbalance"), 1, 100).c_str(),
        text_of(lost(rb, "imbalance"), 1, 100).c_str());
  }
  std::fflush(stdout);
  return 0;
}

}  // namespace scaling
