#pragma once

#include <cohort/ddp/bucket_plan.hpp>
#include <cohort/ddp/bucket_sizing.hpp>

// The training loop of examples/train_mlp and examples/train_cnn, as a function of the world, so
// that the examples' mains and the tests run the same code.

#include <cohort/comm/world.hpp>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace train_mlp {

/// The data sets: the MLP's Gaussian mixture (features, classes) and the CNN's images (side).
inline constexpr int kFeatures = 32;
inline constexpr int kClasses = 10;
inline constexpr int kImageSize = 16;
/// Samples per batch-norm group (Note [Ghost batch norm] in layers/cnn.hpp).
inline constexpr int kBatchNormGroup = 8;

/// What is trained: the MLP on the Gaussian mixture (train_mlp) or the CNN on the shape images
/// (train_cnn).
enum class Model : std::uint8_t { mlp, cnn };

struct TrainOptions {
  Model model = Model::mlp;
  int steps = 300;
  int warmup_steps = 0;    ///< the first steps, left out of the timing (samples/s)
  int global_batch = 256;  ///< split evenly over the ranks: a multiple of the world size
  std::uint64_t seed = 1;
  int hidden = 256;
  int layers = 3;  ///< linear layers
  int width = 8;   ///< the CNN's channels (2 x width after the stride-2 convolution)
  std::string optimizer = "adamw";  ///< sgd (momentum 0.9) or adamw
  float lr = 0.0f;                  ///< 0: 0.05 for sgd, 0.002 for adamw
  /// ZeRO stage: 0 plain data parallel, 1 reduce-scattered gradients and sharded optimizer state.
  int zero = 0;
  std::string precision =
      "f32";           ///< f32, or bf16 parameters and gradients (f32 math and master weights)
  int log_every = 50;  ///< progress line every this many steps (0: none)
  int train_samples = 32768;
  int test_samples = 8192;
  /// Bucket caps: kAutoBucketBytes (0, the default) takes all three from the measured link
  /// (Note [Automatic bucket sizes]); otherwise the middle and first caps as given.
  std::size_t bucket_bytes = cohort::kAutoBucketBytes;
  std::size_t first_bucket_bytes = cohort::kDefaultFirstBucketBytes;
  /// Checkpoints: where (empty: none), every how many steps (0: only on preemption and at the
  /// end), how many to keep. With a folder, the run resumes from its `latest` checkpoint and
  /// SIGTERM/SIGUSR1 make every rank save and stop at the next step.
  std::string checkpoint_dir;
  int checkpoint_every = 0;
  int keep_checkpoints = 2;
  /// Ranks that share this process's memory report: the threads of `--ranks`, else 1.
  int ranks_in_process = 1;
  /// Return every final parameter (`TrainResult::params`): the tests and --params-out want them;
  /// otherwise only their checksum is computed, one parameter at a time.
  bool keep_params = true;
};

/// The options train_cnn starts from: the CNN and its data set sizes and schedule.
TrainOptions cnn_defaults();

/// "train_mlp" or "train_cnn".
const char* program_name(Model model) noexcept;

/// The most test rows a rank scores (its share of the test split, rounded up).
inline int eval_rows(const TrainOptions& options, int world_size) {
  return (options.test_samples + world_size - 1) / world_size;
}

struct TrainResult {
  int ranks = 0;
  int steps = 0;
  std::string backend;
  std::string device;
  double final_loss = 0.0;            ///< mean loss of the last step's global batch
  double final_train_accuracy = 0.0;  ///< accuracy on the last step's global batch
  double test_accuracy = 0.0;
  double param_checksum = 0.0;  ///< sum of every parameter, as a double
  double param_abs_sum = 0.0;   ///< sum of |parameter|, the checksum's scale
  std::size_t parameters = 0;
  double seconds = 0.0;  ///< the timed steps (after the warm-up), wall clock
  double samples_per_second = 0.0;
  double comm_ms = 0.0;          ///< gradient all-reduce time per step (sampled at progress lines)
  double exposed_ms = 0.0;       ///< of which not hidden behind backward
  cohort::BucketSizing buckets;  ///< the caps the gradients were bucketed with, and why
  std::string host_gemm;      ///< on host ranks, the GEMM library, kernels and threads (else empty)
  std::vector<float> params;  ///< every parameter in f32, registration order (keep_params)
  int resumed_from = 0;       ///< the step the run resumed at (0: a fresh start)
  bool preempted = false;     ///< stopped early by a signal, after saving a checkpoint
  nlohmann::json memory;      ///< bytes per parameter by category (memory_plan.hpp)
};

/// Trains on this rank's shard of every global batch. Collective: every rank of `world` calls it
/// with the same options. Rank 0 writes progress lines to `log` (null: none). Every rank returns
/// the same result.
/// @throws cohort::InvalidArgument for options out of range.
TrainResult train(cohort::World& world, const TrainOptions& options, std::FILE* log);

/// The result and options as the example's --json writes them.
nlohmann::json to_json(const TrainResult& result, const TrainOptions& options);

}  // namespace train_mlp
