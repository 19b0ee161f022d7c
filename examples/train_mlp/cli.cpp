// The command line of train_mlp and train_cnn (cli.hpp).

#include "cli.hpp"
#include "memory_plan.hpp"

#include <cohort/checkpoint/exit_status.hpp>
#include <cohort/checkpoint/preemption.hpp>
#include <cohort/comm/world.hpp>
#include <cohort/launch/launch_info.hpp>

#include <CLI/CLI.hpp>
#include <cli_checks.hpp>

#include <cstdio>
#include <optional>
#include <stdexcept>

namespace train_mlp {

namespace cli = cohort::cli;

int run_cli(int argc, char** argv, Model model) {
  TrainOptions options = model == Model::cnn ? cnn_defaults() : TrainOptions{};
  const char* name = program_name(model);
  std::string json;
  int ranks = 0;
  bool host = false;
  CLI::App app{model == Model::cnn ? "train_cnn: a ResNet-style CNN trained data-parallel with "
                                     "cohort on generated images"
                                   : "train_mlp: an MLP classifier trained data-parallel with "
                                     "cohort on a mixture of Gaussians",
               name};
  cli::conventions(app);
  app.add_option("--steps", options.steps, "training steps")->check(cli::whole(1, 1e9));
  app.add_option("--warmup-steps", options.warmup_steps,
                 "first steps left out of the timing (fewer than --steps)")
      ->check(cli::whole(0, 1e9));
  app.add_option("--global-batch", options.global_batch, "samples per step over all ranks")
      ->check(cli::whole(1, 1 << 24));
  app.add_option("--seed", options.seed, "seed of the data set and the initial weights");
  app.add_option("--train-samples", options.train_samples, "samples in the training split")
      ->check(cli::whole(1, 1 << 24));
  app.add_option("--test-samples", options.test_samples, "samples in the test split")
      ->check(cli::whole(1, 1 << 24));
  if (model == Model::mlp) {
    app.add_option("--hidden", options.hidden, "width of the hidden layers")
        ->check(cli::whole(1, 1 << 24));
    app.add_option("--layers", options.layers, "linear layers")->check(cli::whole(1, 1000));
  } else {
    app.add_option("--width", options.width, "channels of the first convolutions")
        ->check(cli::whole(1, 1 << 16));
  }
  app.add_option("--optimizer", options.optimizer, "sgd (momentum 0.9) or adamw")
      ->check(cli::one_of({"sgd", "adamw"}));
  app.add_option("--lr", options.lr, "learning rate")
      ->check(cli::positive(1e3))
      ->default_str("0.05 for sgd, 0.002 for adamw");
  app.add_option("--zero", options.zero,
                 "ZeRO stage: 0 plain data parallel, 1 reduce-scattered gradients and sharded "
                 "optimizer state, 2 sharded gradients too, 3 sharded parameters too (each layer "
                 "a unit)")
      ->check(cli::whole(0, kMaxZeroStage));
  bool zero1 = false;
  app.add_flag("--zero1", zero1, "the same as --zero 1");
  app.add_option("--precision", options.precision, "f32, or bf16 parameters and gradients")
      ->check(cli::one_of({"f32", "bf16"}));
  app.add_option("--log-every", options.log_every, "progress line every this many steps (0: none)")
      ->check(cli::whole(0, 1e9));
  double bucket_mb = 0.0;
  double first_bucket_mb = 0.0;
  app.add_option("--bucket-mb", bucket_mb,
                 "cap of the gradient buckets in MiB (default: from the measured link)")
      ->check(cli::number_in(0.0, false, 4096.0, false));
  app.add_option("--first-bucket-mb", first_bucket_mb,
                 "cap of the first bucket in MiB (default: from the measured link, or 1 with "
                 "--bucket-mb)")
      ->check(cli::number_in(0.0, false, 4096.0, false));
  app.add_option("--json", json, "write the result to this file")->check(cli::writable_file());
  std::string params_out;
  app.add_option("--params-out", params_out,
                 "write every final parameter (f32, registration order) to this file, raw")
      ->check(cli::writable_file());
  app.add_option("--checkpoint-dir", options.checkpoint_dir,
                 "save checkpoints here and resume from the latest one; SIGTERM or SIGUSR1 then "
                 "saves at the next step and exits with status 75");
  app.add_option("--checkpoint-every", options.checkpoint_every,
                 "save a checkpoint (in the background) every this many steps (0: only on "
                 "preemption and at the end)")
      ->check(cli::whole(0, 1e9));
  app.add_option("--keep-checkpoints", options.keep_checkpoints, "checkpoints to keep")
      ->check(cli::whole(1, 1e6));
  app.add_option("--ranks", ranks,
                 "run this many ranks as threads (when not started by a launcher)")
      ->check(cli::whole(1, 1024));
  app.add_flag("--host", host, "use host ranks (Gloo) even where there are GPUs");
  if (const std::optional<int> status = cli::parse(app, argc, argv)) return *status;
  if (zero1) options.zero = 1;
  if (bucket_mb > 0.0 || first_bucket_mb > 0.0) {
    // Either flag fixes the caps; the other keeps its default.
    auto bytes = [](double mb) { return static_cast<std::size_t>(mb * 1024.0 * 1024.0); };
    options.bucket_bytes = bucket_mb > 0.0 ? bytes(bucket_mb) : cohort::kDefaultBucketBytes;
    options.first_bucket_bytes =
        first_bucket_mb > 0.0 ? bytes(first_bucket_mb) : cohort::kDefaultFirstBucketBytes;
    if (options.bucket_bytes == 0 || options.first_bucket_bytes == 0) {
      std::fprintf(stderr, "%s: --bucket-mb and --first-bucket-mb must be at least 1 byte\n", name);
      return 2;
    }
  }

  try {
    // The estimate comes before any rank allocates: what cannot fit is refused now, with the
    // bytes needed and available, instead of being OOM-killed in the middle of setting up.
    int world_size = ranks, local_rank = 0, sharing = ranks;  // sharing: ranks on this host
    if (ranks == 0) {
      const cohort::LaunchInfo launch = cohort::LaunchInfo::from_environment();
      world_size = launch.world_size;
      local_rank = launch.local_rank;
      sharing = launch.local_world_size;
    }
    const int gpus = host ? 0 : cohort::cuda_device_count();
    cohort::Device device = cohort::Device::host();
    if (gpus > 0) {
      device = cohort::Device::cuda(local_rank % gpus);
      sharing = (sharing + gpus - 1) / gpus;
    }
    options.keep_params = !params_out.empty();
    check_memory_plan(options, world_size, device, sharing);
    options.ranks_in_process = ranks > 0 ? ranks : 1;

    TrainResult result;
    cohort::WorldOptions world_options;
    if (host) world_options.backend = cohort::BackendChoice::host;
    if (ranks > 0) {
      cohort::run_local(
          ranks,
          [&](cohort::World& world) {
            TrainResult mine = train(world, options, stdout);
            if (world.rank() == 0) result = std::move(mine);
          },
          world_options);
    } else {
      cohort::World world = cohort::init(world_options);
      result = train(world, options, stdout);
      if (result.preempted) return cohort::kPreemptedExitStatus;
      if (world.rank() != 0) return 0;
    }
    if (result.preempted) return cohort::kPreemptedExitStatus;
    if (!json.empty()) {
      cli::write_file("--json", json, to_json(result, options).dump(2) + "\n");
    }
    if (!params_out.empty()) {
      cli::write_file("--params-out", params_out,
                      std::string_view(reinterpret_cast<const char*>(result.params.data()),
                                       result.params.size() * sizeof(float)));
    }
    return 0;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "%s: %s\n", name, error.what());
    cohort::record_failure(std::string(name) + ": " + error.what());  // torchrun's summary
    return cohort::exit_status_for(error);  // 78 when a restart cannot fix it (exit_status.hpp)
  }
}

}  // namespace train_mlp
