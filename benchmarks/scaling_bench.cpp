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
// (cuDNN; its other layers as below); or TF32 GEMMs sized to each layer's FLOPs. On host
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

#include "scaling/measure.hpp"
#include "scaling/probe.hpp"
#include "scaling/report.hpp"

#include <cohort/comm/world.hpp>
#include <cohort/core/error.hpp>

#include <CLI/CLI.hpp>
#include <cli_checks.hpp>
#include <nlohmann/json.hpp>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <optional>
#include <thread>
#include <string>
#include <vector>

namespace {

using namespace scaling;
namespace cli = cohort::cli;

/// Prints a progress line every `kProgressPeriod` until stopped, so that a long run is never silent.
class ProgressLines {
 public:
  explicit ProgressLines(const Progress& progress) : thread_([this, &progress] { loop(progress); }) {}
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
    std::fprintf(stderr, "scaling_bench: %s, simulated compute at %.4g TFLOP/s (%.0f ms of compute a "
                 "step), rank counts %s\n", setup.workload.name.c_str(), o.sim_tflops,
                 3.0 * setup.workload.forward_flops() * setup.batch / (o.sim_tflops * 1e12) * 1e3,
                 list.c_str());
  }
  if (setup.budgeted) {
    std::fprintf(stderr, "scaling_bench: expected about %.0f s (--budget-s): per rank count %d "
                 "warm-up step(s), then as many of %d timed steps as fit its share of what is left "
                 "of the budget (at least 3: longer when 3 steps alone take longer)\n",
                 o.budget_s, o.warmup, o.steps);
  } else {
    std::fprintf(stderr, "scaling_bench: %zu rank counts x (%d warm-up + %d timed steps); each "
                 "count prints its step time after its warm-up\n", counts.size(), o.warmup, o.steps);
  }
}

int run(cohort::World& world, const Setup& setup) {
  const bool leader = world.rank() == 0;
  std::vector<Row> rows;
  std::size_t buckets = 0;
  const std::string run_scope = "scaling";  // the world's store is scoped to this world
  const std::vector<int> counts = rank_counts(world.size());
  Progress progress;
  LinkProbe probe;
  std::optional<ProgressLines> lines;
  if (leader) {
    print_expectation(setup, counts);
    lines.emplace(progress);
  }
  const auto start = std::chrono::steady_clock::now();
  for (std::size_t index = 0; index < counts.size(); ++index) {
    const int k = counts[index];
    const std::string scope = run_scope + "/" + std::to_string(k);
    if (world.rank() < k) {
      // What is left of the budget, shared by the rank counts still to run (set-up included).
      const double spent = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      const double share = std::max(0.0, setup.options.budget_s - spent) /
                           static_cast<double>(counts.size() - index);
      cohort::World group = sub_world(world, k, scope);
      const RankSamples samples = measure(group, setup, share, leader ? &progress : nullptr);
      if (setup.options.probe && k > 1 && index + 1 == counts.size()) {
        std::vector<std::size_t> sizes = bucket_sizes(registry_of(setup.workload), k, samples.buckets);
        sizes.push_back(4096);
        probe = probe_link(group, sizes, 7);
      }
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
    rows.back().steps = static_cast<int>(all.front().step_ms.size());
    attribute(rows.back(), rows.front());
    buckets = static_cast<std::size_t>(rows.back().collectives);
    std::fprintf(stderr, "scaling_bench: %d ranks: step %.2f ms, efficiency %.1f%%\n", k,
                 rows.back().step_ms, 100.0 * rows.back().efficiency);
  }
  lines.reset();
  if (!leader) return 0;

  cohort::ParamRegistry registry = registry_of(setup.workload);
  std::vector<Projection> projections;
  for (const int gpus : {8, 64}) projections.push_back(project(gpus, setup, rows.front(), registry));
  const ModelCheck check = check_model(setup, rows.back(), rows.front(), registry, probe);
  print_report(setup, rows, projections, check, world, buckets);
  const nlohmann::json report = report_json(setup, rows, projections, check, world);
  if (!setup.options.json.empty()) {
    cli::write_file("--json", setup.options.json, report.dump(2) + "\n");
  }
  if (!setup.options.plot.empty()) {
    std::string json_path = setup.options.json;
    if (json_path.empty()) {
      json_path = setup.options.plot + ".json";
      cli::write_file("--plot", json_path, report.dump(2) + "\n");
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
                 "host ranks without one")
      ->check(cli::whole(1, 1024));
  app.add_option("--batch-per-rank", options.batch_per_rank, "samples per rank and step (0: the workload's)")
      ->check(cli::whole(0, 1 << 20));
  app.add_option("--steps", options.steps, "timed steps per rank count")->check(cli::whole(1, 1e6));
  app.add_option("--warmup", options.warmup, "untimed steps per rank count (default 3 on GPUs, 1 on host ranks)")
      ->check(cli::whole(0, 1e6));
  app.add_option("--compute", options.compute, "auto (real on GPUs, simulated on host ranks), real, simulated")
      ->check(CLI::IsMember({"auto", "real", "simulated"}));
  app.add_option("--sim-tflops", options.sim_tflops,
                 "the rate simulated compute models (default: the rate at which a step computes for "
                 "--target-step-ms)")
      ->check(cli::positive(1e6));
  app.add_option("--target-step-ms", options.target_step_ms,
                 "simulated compute: forward and backward of one step take this long")
      ->check(cli::positive(1e7));
  app.add_option("--budget-s", options.budget_s,
                 "host ranks: fewer timed steps (3 at least) when --steps would take longer than "
                 "this, measured at each rank count's warm-up; 0: always --steps")
      ->check(cli::number(0, 1e7));
  app.add_option("--bucket-mb", options.bucket_mb,
                 "bucket cap (MiB); default: from the measured link, or 25 with --first-bucket-mb")
      ->check(cli::positive(1 << 20));
  app.add_option("--first-bucket-mb", options.first_bucket_mb,
                 "first bucket cap (MiB); default: from the measured link, or 1 with --bucket-mb")
      ->check(cli::positive(1 << 20));
  app.add_option("--hidden", options.hidden, "mlp: hidden width")->check(cli::whole(1, 1 << 20));
  app.add_option("--layers", options.layers, "mlp: linear layers")->check(cli::whole(1, 1000));
  app.add_option("--link-gbps", options.link_gbps, "projection: all-reduce busbw in a node (GB/s)")
      ->check(cli::positive(1e6));
  app.add_option("--link-latency-us", options.link_latency_us,
                 "projection: cost of one small all-reduce in a node (us)")
      ->check(cli::number(0, 1e9));
  app.add_option("--node-gbps", options.node_gbps, "projection: all-reduce busbw across nodes (GB/s)")
      ->check(cli::positive(1e6));
  app.add_option("--node-latency-us", options.node_latency_us,
                 "projection: cost of one small all-reduce across nodes (us)")
      ->check(cli::number(0, 1e9));
  app.add_flag("!--no-probe", options.probe,
               "skip the link probe and the model check at the largest rank count");
  app.add_option("--gpus-per-node", options.gpus_per_node, "projection: GPUs per node")
      ->check(cli::whole(1, 1024));
  app.add_option("--json", options.json, "write the report to this file")
      ->check(cli::writable_file());
  app.add_option("--plot", options.plot, "draw efficiency and throughput against ranks (PNG)")
      ->check(cli::writable_file());
  CLI11_PARSE(app, argc, argv);

  try {
    Setup setup;
    setup.options = options;
    setup.workload = layers::make_workload(
        options.workload, layers::MlpConfig{.inputs = 32, .hidden = options.hidden,
                                            .layers = options.layers, .classes = 10,
                                            .dtype = cohort::DType::f32});
    if (options.bucket_mb > 0.0 || options.first_bucket_mb > 0.0) {
      // Either flag fixes the caps; the other keeps the library's default.
      Options& o = setup.options;
      if (o.bucket_mb <= 0.0) o.bucket_mb = static_cast<double>(cohort::kDefaultBucketBytes) / 1048576.0;
      if (o.first_bucket_mb <= 0.0) {
        o.first_bucket_mb = static_cast<double>(cohort::kDefaultFirstBucketBytes) / 1048576.0;
      }
      if (o.bucket_mb * 1048576.0 < 1.0 || o.first_bucket_mb * 1048576.0 < 1.0) {
        std::fprintf(stderr, "scaling_bench: --bucket-mb and --first-bucket-mb must be at least 1 byte\n");
        return 2;
      }
    }
    setup.batch = options.batch_per_rank > 0 ? options.batch_per_rank : setup.workload.default_batch_per_rank;
    const bool launched = cohort::LaunchInfo::from_environment().launcher != cohort::Launcher::none;
    auto run_world = [&](cohort::World& world) {
      Setup resolved = setup;
      resolved.simulated = options.compute == "simulated" ||
                           (options.compute == "auto" && world.device().is_host());
      resolved.budgeted = world.device().is_host() && options.budget_s > 0.0;
      Options& o = resolved.options;
      if (o.warmup < 0) o.warmup = world.device().is_host() ? 1 : 3;
      if (o.sim_tflops <= 0.0) {
        // Forward and backward (twice the forward) of this rank's batch in target_step_ms.
        o.sim_tflops = 3.0 * resolved.workload.forward_flops() * resolved.batch /
                       (o.target_step_ms * 1e-3) / 1e12;
      }
      return run(world, resolved);
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
