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
// Compute on GPUs is real: the MLP's own layers; resnet50's convolutions at the model's shapes
// (cuDNN; its other layers as below); or GEMMs sized to each layer's FLOPs, every layer in one
// math mode (layers::MathMode: FP32 here) on real-valued data. On host
// ranks it is simulated by default: a sleep of each layer's FLOPs / --sim-tflops, reported as
// simulated compute and never as a GPU measurement. Communication is always real.
//
// Per rank count: the median step time, throughput, efficiency (throughput over k times the
// 1-rank throughput, which for weak scaling is T1 / Tk), communication time (the collectives'
// durations), exposed communication (not hidden behind backward), overlap, achieved busbw
// (bytes / communication time x 2(k-1)/k, nccl-tests' definition), and the lost percent split
// into exposed communication, imbalance (waiting for the slowest rank's compute) and overhead (the
// rest). At the largest rank count a link probe times the step's all-reduces alone and the model
// predicts the measured step from it (Note [Checking the model], scaling/report.cpp); then a
// projection to 8 and 64 GPUs with the same model, alpha + 2(n-1)/n x bytes / B per bucket,
// buckets issued as the measured backward makes them ready, alpha and B published numbers.

#include "scaling/layer_plan.hpp"
#include "scaling/measure.hpp"
#include "scaling/model.hpp"
#include "scaling/probe.hpp"
#include "scaling/report.hpp"

#include <cohort/comm/world.hpp>
#include <cohort/core/error.hpp>

#if COHORT_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

#include "common/bench_common.hpp"

#include <CLI/CLI.hpp>
#include <cli_checks.hpp>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace scaling;
namespace cli = cohort::cli;

/// Prints a progress line every `kProgressPeriod` until stopped, so that a long run is never
/// silent.
class ProgressLines {
 public:
  explicit ProgressLines(const Progress& progress)
      : thread_([this, &progress] { loop(progress); }) {}
  ~ProgressLines() {
    {
      const std::lock_guard lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    thread_.join();
  }
  ProgressLines(const ProgressLines&) = delete;
  ProgressLines& operator=(const ProgressLines&) = delete;

 private:
  static constexpr std::chrono::seconds kProgressPeriod{5};
  void loop(const Progress& progress) {
    const auto start = std::chrono::steady_clock::now();
    std::unique_lock lock(mutex_);
    while (!wake_.wait_for(lock, kProgressPeriod, [this] { return stop_; })) {
      const double elapsed =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      std::fprintf(stderr, "scaling_bench: %.0f s: %d ranks, step %d of %d (last %.2f s)\n",
                   elapsed, progress.ranks.load(), progress.step.load(), progress.total.load(),
                   progress.step_s.load());
    }
  }
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::thread thread_;
};

/// The expected duration, printed before the run.
void print_expectation(const Setup& setup, const std::vector<int>& counts) {
  const Options& o = setup.options;
  std::string list;
  for (const int k : counts) list += (list.empty() ? "" : ", ") + std::to_string(k);
  if (setup.simulated) {
    std::fprintf(stderr,
                 "scaling_bench: %s, simulated compute at %.4g TFLOP/s (%.0f ms of compute a "
                 "step), rank counts %s\n",
                 setup.workload.name.c_str(), o.sim_tflops,
                 3.0 * setup.workload.forward_flops() * setup.batch / (o.sim_tflops * 1e12) * 1e3,
                 list.c_str());
  }
  if (setup.budgeted) {
    std::fprintf(stderr,
                 "scaling_bench: expected about %.0f s (--budget-s): per rank count %d "
                 "warm-up step(s), then as many of %d timed steps as fit its share of what is left "
                 "of the budget (at least 3: longer when 3 steps alone take longer)\n",
                 o.budget_s, o.warmup, o.steps);
  } else {
    std::fprintf(stderr,
                 "scaling_bench: %zu rank counts x (%d warm-up + %d timed steps); each "
                 "count prints its step time after its warm-up\n",
                 counts.size(), o.warmup, o.steps);
  }
}

int run(cohort::World& world, const Setup& setup, const Link& links_file) {
  const bool leader = world.rank() == 0;
  const std::string run_scope = "scaling";  // the world's store is scoped to this world
  const std::vector<int> counts = rank_counts(world.size());
  Progress progress;
  std::optional<ProgressLines> lines;
  if (leader) {
    print_expectation(setup, counts);
    lines.emplace(progress);
  }
  Report report;
  std::vector<std::vector<RankSamples>> samples_by_count;
  std::vector<LinkProbe> probes;
  const cohort::ParamRegistry registry = registry_of(setup.workload, setup.grad_dtype);
  const auto start = std::chrono::steady_clock::now();
  for (std::size_t index = 0; index < counts.size(); ++index) {
    const int k = counts[index];
    const std::string scope = run_scope + "/" + std::to_string(k);
    LinkProbe probe;
    if (world.rank() < k) {
      // What is left of the budget, shared by the rank counts still to run (set-up included).
      const double spent =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      const double share = std::max(0.0, setup.options.budget_s - spent) /
                           static_cast<double>(counts.size() - index);
      cohort::World group = sub_world(world, k, scope);
      const RankSamples samples = measure(group, setup, share, leader ? &progress : nullptr);
      // Every measured count is checked against the model, so every count's link is probed:
      // its own bucket sizes and a small all-reduce, on the world that trained.
      if (setup.options.probe && k > 1) {
        std::vector<std::size_t> sizes = bucket_sizes(registry, k, samples.buckets);
        sizes.push_back(4096);
        probe = probe_link(group, sizes, 7);
      }
      world.store().set(scope + "/result/" + std::to_string(world.rank()), to_json(samples).dump());
      if (k == world.size()) {
        report.topology.nodes = group.num_nodes();
        report.topology.ranks_per_node = group.local_world_size();
        report.topology.backend = std::string(cohort::to_string(group.backend()));
      }
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
    report.rows.push_back(summarize(k, all, setup));
    attribute(report.rows.back(), report.rows.front());
    // The model replays plain data parallel's all-reduces: the sharded modes are not checked.
    report.checks.push_back(setup.options.zero == 0
                                ? check_model(setup, all, report.rows.back(), registry, probe)
                                : ModelCheck{});
    probes.push_back(probe);
    samples_by_count.push_back(std::move(all));
    const Row& row = report.rows.back();
    std::fprintf(
        stderr, "scaling_bench: %d ranks: step %.2f ms, efficiency %.1f%%%s\n", k,
        row.step_ms.value, 100.0 * row.efficiency,
        report.checks.back().valid
            ? (", model " +
               std::to_string(static_cast<int>(std::lround(100.0 * report.checks.back().error))) +
               "% off")
                  .c_str()
            : "");
  }
  lines.reset();
  // Every rank's host, for the report's provenance.
  const std::vector<std::string> hosts =
      world.group().all_gather("scaling/hosts", cohort::bench::host_name());
  if (!leader) return 0;
  report.topology.ranks = world.size();
  report.topology.device = setup.device;
  report.topology.hosts = hosts;

  report.basis = plan_projection(setup, report.rows, report.checks, probes.back(),
                                 report.topology.nodes > 1, links_file);
  for (const int gpus : setup.options.project_to) {
    if (!report.basis.plan.valid) break;
    if (gpus <= world.size()) continue;  // measured: never a projection beside a measurement
    report.projections.push_back(project(gpus, setup, report.basis, registry));
  }
  print_report(setup, report);
  const nlohmann::json json = report_json(setup, report);
  if (!setup.options.json.empty()) {
    cli::write_file("--json", setup.options.json, json.dump(2) + "\n");
  }
  if (!setup.options.plot.empty()) {
    std::string json_path = setup.options.json;
    if (json_path.empty()) {
      json_path = setup.options.plot + ".json";
      cli::write_file("--plot", json_path, json.dump(2) + "\n");
    }
    write_plot(json_path, setup.options.plot);
    std::printf("# plot: %s\n", setup.options.plot.c_str());
  }
  return 0;
}

/// The device's name, for the report: "host", or the GPU's.
std::string device_name(const cohort::World& world) {
  if (world.device().is_host()) return "host";
#if COHORT_WITH_CUDA
  cudaDeviceProp properties{};
  if (cudaGetDeviceProperties(&properties, world.device().index()) == cudaSuccess) {
    return properties.name;
  }
#endif
  return world.device().to_string();
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  for (int i = 0; i < argc; ++i) options.command_line.emplace_back(argv[i]);
  CLI::App app{
      "scaling_bench: weak scaling of data-parallel training through cohort at 1, 2, "
      "4, ... ranks, where each lost percent goes, a model of the step checked against "
      "every measured count, and a projection to more GPUs from compute that belongs "
      "to the target",
      "scaling_bench"};
  cli::conventions(app);
  std::vector<std::string> compare;
  app.add_option("--compare", compare,
                 "print two --json reports (two clusters, two runs) side by side, and exit")
      ->expected(2)
      ->check(CLI::ExistingFile);
  app.add_option("--workload", options.workload, "the model whose parameters and FLOPs are trained")
      ->check(cli::one_of({"mlp", "resnet50", "bert-large", "gpt2-124m"}));
  app.add_option("--ranks", options.ranks, "host ranks as threads (when not started by a launcher)")
      ->check(cli::whole(1, 1024))
      ->default_str("every GPU, or 4 host ranks without one");
  app.add_option("--batch-per-rank", options.batch_per_rank, "samples per rank and step")
      ->check(cli::whole(1, 1 << 20))
      ->default_str("the workload's");
  app.add_option("--steps", options.steps, "timed steps per rank count")->check(cli::whole(1, 1e6));
  app.add_option("--warmup", options.warmup, "untimed steps per rank count")
      ->check(cli::whole(0, 1e6))
      ->default_str("3 on GPUs, 2 on host ranks");
  app.add_option("--compute", options.compute,
                 "auto (real on GPUs, simulated on host ranks), real, simulated")
      ->check(cli::one_of({"auto", "real", "simulated"}));
  app.add_option("--precision", options.precision,
                 "fp32, tf32 (FP32 data on tensor cores), bf16 or fp16 (16-bit parameters, "
                 "gradients and arithmetic, FP32 master weights); real compute on host ranks is "
                 "fp32 only")
      ->check(cli::one_of({"fp32", "tf32", "bf16", "fp16"}));
  app.add_option("--sim-tflops", options.sim_tflops,
                 "the rate simulated compute models, instead of --target-step-ms")
      ->check(cli::positive(1e6))
      ->default_str("from --target-step-ms");
  app.add_option("--target-step-ms", options.target_step_ms,
                 "simulated compute: forward and backward of one step take this long")
      ->check(cli::positive(1e7));
  app.add_option("--budget-s", options.budget_s,
                 "host ranks: fewer timed steps (3 at least) when --steps would take longer than "
                 "this, measured at each rank count's warm-up; 0: always --steps")
      ->check(cli::number(0, 1e7));
  app.add_option("--bucket-mb", options.bucket_mb, "bucket cap (MiB)")
      ->check(cli::positive(1 << 20))
      ->default_str("from the measured link, or 25 with --first-bucket-mb");
  app.add_option("--first-bucket-mb", options.first_bucket_mb, "first bucket cap (MiB)")
      ->check(cli::positive(1 << 20))
      ->default_str("from the measured link, or 1 with --bucket-mb");
  app.add_option("--zero", options.zero,
                 "0 plain data parallel, 2 ZeRO-2, 3 ZeRO-3 (each layer a unit; no link probe, "
                 "model check or projection, which model plain data parallel)")
      ->check(CLI::IsMember({0, 2, 3}));
  app.add_option("--hidden", options.hidden, "mlp: hidden width")->check(cli::whole(1, 1 << 20));
  app.add_option("--layers", options.layers, "mlp: linear layers")->check(cli::whole(1, 1000));
  app.add_option("--target", options.target,
                 "what to project to: this (this device: needs real compute), a100 or h100 (the "
                 "card's published peak at --target-utilization), none")
      ->check(cli::one_of({"auto", "this", "a100", "h100", "none"}))
      ->default_str("auto: this device where compute is real, none where it is simulated");
  app.add_option("--target-utilization", options.target_utilization,
                 "--target a100/h100: the fraction of the card's peak the step's compute reaches "
                 "(stated, never measured here)")
      ->check(cli::number_in(0.0, false, 1.0, false));
  app.add_option("--project-to", options.project_to,
                 "GPU counts to project to (above those measured)")
      ->check(cli::whole(2, 1 << 20));
  app.add_option("--links", options.links,
                 "projection: the in-node link from an allreduce_bench --json report")
      ->check(CLI::ExistingFile);
  app.add_option("--link-gbps", options.link_gbps, "projection: all-reduce busbw in a node (GB/s)")
      ->check(cli::positive(1e6))
      ->default_str("measured here, or the target card's published number");
  app.add_option("--link-latency-us", options.link_latency_us,
                 "projection: cost of one small all-reduce in a node (us)")
      ->check(cli::number(0, 1e9))
      ->default_str("with --link-gbps: 0");
  app.add_option("--node-gbps", options.node_gbps,
                 "projection: all-reduce busbw across nodes (GB/s)")
      ->check(cli::positive(1e6))
      ->default_str("measured across nodes here, or the target card's published number");
  app.add_option("--node-latency-us", options.node_latency_us,
                 "projection: cost of one small all-reduce across nodes (us)")
      ->check(cli::number(0, 1e9))
      ->default_str("with --node-gbps: 0");
  app.add_flag("!--no-probe", options.probe,
               "skip the link probes (the link check, and this device's measured link)");
  app.add_option("--gpus-per-node", options.gpus_per_node, "projection: GPUs per node")
      ->check(cli::whole(1, 1024));
  app.add_option("--json", options.json,
                 "write the report to this file (schema " + std::string(kSchema) + ")")
      ->check(cli::writable_file());
  app.add_option("--plot", options.plot,
                 "draw efficiency and throughput against ranks (.png, .pdf or .svg)")
      ->check(cli::writable_file_ending({".png", ".pdf", ".svg"}));
  std::string layers_json;
  app.add_option("--layers-json", layers_json,
                 "write the step's work on one rank with real compute, layer by layer (shapes, "
                 "math mode, optimizer), to this file and exit: what a peer runs to compare")
      ->check(cli::writable_file());
  if (const std::optional<int> status = cli::parse(app, argc, argv)) return *status;
  if (!compare.empty()) {
    if (app.get_options([&](const CLI::Option* option) {
             return option->count() > 0 && option->get_name() != "--compare";
           })
            .size() > 0) {
      return cli::usage_error(app,
                              "--compare prints two reports and measures nothing: give no "
                              "other flag");
    }
    return compare_reports(compare[0], compare[1]);
  }
  // Flags that would do nothing are refused, so that a run never silently ignores one.
  if (const auto refused =
          cli::refuse_unless(app, options.workload == "mlp", {"--hidden", "--layers"},
                             "applies only to --workload mlp")) {
    return *refused;
  }
  if (const auto refused =
          cli::refuse_unless(app, options.compute != "real", {"--sim-tflops", "--target-step-ms"},
                             "sets simulated compute, but --compute real runs "
                             "real compute")) {
    return *refused;
  }
  if (const auto refused = cli::refuse_unless(
          app, options.zero == 0,
          {"--target", "--target-utilization", "--links", "--link-gbps", "--link-latency-us",
           "--node-gbps", "--node-latency-us", "--project-to", "--gpus-per-node", "--no-probe"},
          "sets the link probe or the projection, which model plain data parallel's all-reduces: "
          "--zero 2 and 3 have neither")) {
    return *refused;
  }
  if (app.count("--sim-tflops") > 0 && app.count("--target-step-ms") > 0) {
    return cli::usage_error(app,
                            "--sim-tflops and --target-step-ms both set the simulated rate: "
                            "give one");
  }
  const bool named_card = options.target == "a100" || options.target == "h100";
  if (named_card && options.target_utilization <= 0.0) {
    return cli::usage_error(app,
                            "--target " + options.target +
                                " projects from the card's "
                                "published peak: give --target-utilization (the fraction of it "
                                "the step's compute reaches, e.g. 0.4), which no run here "
                                "measures");
  }
  if (const auto refused = cli::refuse_unless(app, named_card, {"--target-utilization"},
                                              "applies only to --target a100 or h100")) {
    return *refused;
  }
  if (const auto refused =
          cli::refuse_unless(app, options.target != "none",
                             {"--links", "--link-gbps", "--link-latency-us", "--node-gbps",
                              "--node-latency-us", "--project-to", "--gpus-per-node"},
                             "sets the projection, but --target none projects nothing")) {
    return *refused;
  }
  if (options.target == "this" && options.compute == "simulated") {
    return cli::usage_error(app,
                            "--target this projects from the compute measured here, but "
                            "--compute simulated measures a sleep that belongs to no GPU: "
                            "use --target a100 or h100 with --target-utilization");
  }
  if (app.count("--links") > 0 && app.count("--link-gbps") > 0) {
    return cli::usage_error(app, "--links and --link-gbps both give the in-node link: give one");
  }
  Link links_file;
  if (!options.links.empty()) {
    try {
      std::ifstream in(options.links);
      nlohmann::json report;
      in >> report;
      links_file = link_from_allreduce_json(report, options.links);
    } catch (const std::exception& error) {
      return cli::usage_error(app, std::string("--links: ") + error.what());
    }
  }
  options.sim_tflops_given = app.count("--sim-tflops") > 0;

  try {
    Setup setup;
    setup.options = options;
    setup.precision = options.precision == "tf32"   ? Precision::tf32
                      : options.precision == "bf16" ? Precision::bf16
                      : options.precision == "fp16" ? Precision::fp16
                                                    : Precision::fp32;
    setup.grad_dtype = setup.precision == Precision::bf16   ? cohort::DType::bf16
                       : setup.precision == Precision::fp16 ? cohort::DType::f16
                                                            : cohort::DType::f32;
    setup.workload =
        layers::make_workload(options.workload, layers::MlpConfig{.inputs = 32,
                                                                  .hidden = options.hidden,
                                                                  .layers = options.layers,
                                                                  .classes = 10,
                                                                  .dtype = cohort::DType::f32});
    setup.tokens_per_sample = options.workload == "gpt2-124m"    ? 1024
                              : options.workload == "bert-large" ? 128
                                                                 : 0;
    if (options.bucket_mb > 0.0 || options.first_bucket_mb > 0.0) {
      // Either flag fixes the caps; the other keeps the library's default.
      Options& o = setup.options;
      if (o.bucket_mb <= 0.0)
        o.bucket_mb = static_cast<double>(cohort::kDefaultBucketBytes) / 1048576.0;
      if (o.first_bucket_mb <= 0.0) {
        o.first_bucket_mb = static_cast<double>(cohort::kDefaultFirstBucketBytes) / 1048576.0;
      }
      if (o.bucket_mb * 1048576.0 < 1.0 || o.first_bucket_mb * 1048576.0 < 1.0) {
        return cli::usage_error(app, "--bucket-mb and --first-bucket-mb must be at least 1 byte");
      }
    }
    setup.batch =
        options.batch_per_rank > 0 ? options.batch_per_rank : setup.workload.default_batch_per_rank;
    if (!layers_json.empty()) {
      if (setup.precision != Precision::fp32 && setup.precision != Precision::tf32) {
        return cli::usage_error(app, std::string("--layers-json writes FP32 or TF32 steps (what "
                                                 "the PyTorch peer runs), not --precision ") +
                                         options.precision);
      }
      const layers::MlpConfig mlp{.inputs = 32,
                                  .hidden = options.hidden,
                                  .layers = options.layers,
                                  .classes = 10,
                                  .dtype = cohort::DType::f32};
      const nlohmann::json plan =
          layer_plan(setup.workload, mlp, setup.batch, math_mode(setup), kSgdLr);
      cli::write_file("--layers-json", layers_json, plan.dump(2) + "\n");
      return 0;
    }
    const bool launched = cohort::LaunchInfo::from_environment().launcher != cohort::Launcher::none;
    if (launched && options.ranks > 0) {
      return cli::usage_error(app,
                              "--ranks starts host ranks as threads, but a launcher started "
                              "this process: drop --ranks (the launcher chose the ranks)");
    }
    auto run_world = [&](cohort::World& world) {
      Setup resolved = setup;
      resolved.simulated =
          options.compute == "simulated" || (options.compute == "auto" && world.device().is_host());
      resolved.budgeted = world.device().is_host() && options.budget_s > 0.0;
      resolved.device = device_name(world);
      // What real compute cannot do here is refused before anything runs.
      if (!resolved.simulated) {
        COHORT_EXPECTS(!world.device().is_host() || resolved.precision == Precision::fp32,
                       std::string("--precision ") + options.precision +
                           ": real compute on host ranks is OpenBLAS, which computes in fp32 "
                           "only (or --compute simulated)");
        COHORT_EXPECTS(resolved.precision != Precision::fp16 ||
                           (options.workload != "mlp" && options.workload != "resnet50"),
                       "--precision fp16: the MLP's layers and the convolutions run in fp32 or "
                       "bf16 only (use bf16)");
      }
      COHORT_EXPECTS(options.target != "this" || !resolved.simulated,
                     "--target this projects from the compute measured here, but it is "
                     "simulated on host ranks: use --target a100 or h100 with "
                     "--target-utilization");
      Options& o = resolved.options;
      // Two on host ranks: the first step after a large model's set-up still faults its arenas in.
      if (o.warmup < 0) o.warmup = world.device().is_host() ? 2 : 3;
      if (o.zero != 0) o.probe = false;  // the probe and the model are plain data parallel's
      if (o.sim_tflops <= 0.0) {
        // Forward and backward (twice the forward) of this rank's batch in target_step_ms.
        o.sim_tflops = 3.0 * resolved.workload.forward_flops() * resolved.batch /
                       (o.target_step_ms * 1e-3) / 1e12;
      }
      return run(world, resolved, links_file);
    };
    if (launched) {
      cohort::World world = cohort::init();
      return run_world(world);
    }
    cohort::WorldOptions world_options;
    int ranks = options.ranks;
    if (ranks > 0) {
      world_options.backend = cohort::BackendChoice::host;
    } else {
      ranks = cohort::cuda_device_count() > 0 ? cohort::cuda_device_count() : 4;
    }
    int status = 0;
    cohort::run_local(
        ranks,
        [&](cohort::World& world) {
          const int rank_status = run_world(world);
          if (world.rank() == 0) status = rank_status;
        },
        world_options);
    return status;
  } catch (const cohort::InvalidArgument& error) {
    std::fprintf(stderr, "scaling_bench: %s\n", error.what());
    return 2;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "scaling_bench: %s\n", error.what());
    return 1;
  }
}
