#pragma once

// The options of scaling_bench and what its measurement hands to its model and its report.

#include <layers/workloads.hpp>

#include <cohort/core/dtype.hpp>
#include <cohort/ddp/bucket_sizing.hpp>

#include <optional>
#include <string>
#include <vector>

namespace scaling {

/// Arithmetic of the step's compute, and the dtype of the parameters and gradients.
enum class Precision { fp32, tf32, bf16, fp16 };

struct Options {
  std::string workload = "mlp";
  int ranks = 0;           // host ranks as threads (when not started by a launcher)
  int batch_per_rank = 0;  // 0: the workload's default
  int steps = 20;          // timed steps per rank count (at most, on host ranks: see budget_s)
  int warmup = -1;         // -1: 3 on GPUs, 2 on host ranks
  std::string compute = "auto";    // auto, real, simulated
  std::string precision = "fp32";  // fp32, tf32, bf16, fp16 (bf16/fp16: f32 master weights)
  double sim_tflops = 0.0;         // 0: the rate that makes a step's compute take target_step_ms
  bool sim_tflops_given = false;   // the rate came from --sim-tflops
  double target_step_ms = 200.0;   // simulated compute per step (forward and backward)
  double budget_s = 60.0;  // host ranks: timed steps are cut so the run takes about this long
  // Bucket caps in MiB; 0: from the measured link (Note [Automatic bucket sizes]) unless the
  // other one is given, which then takes the library's default for this one.
  double bucket_mb = 0.0;
  double first_bucket_mb = 0.0;
  int hidden = 1024;  // mlp workload
  int layers = 8;
  // The projection (Note [Projecting to more GPUs], scaling/model.cpp): its target ("auto":
  // this device where the compute is real, none where it is simulated; "a100", "h100": the
  // card's published peak at target_utilization), and its links, each 0 when not given.
  std::string target = "auto";
  double target_utilization = 0.0;
  std::string links;  // an allreduce_bench --json report: the in-node link
  double link_gbps = 0.0;
  double link_latency_us = -1.0;
  double node_gbps = 0.0;
  double node_latency_us = -1.0;
  bool probe = true;  // time the step's all-reduces at each rank count and check the model
  int gpus_per_node = 8;
  std::vector<int> project_to = {8, 64};
  std::string json;
  std::string plot;
  std::vector<std::string> command_line;
};

/// What one rank measured at one rank count, step by step (milliseconds).
struct RankSamples {
  std::vector<double> step_ms;              // the rank's wall time of the step
  std::vector<double> compute_ms;           // forward and backward on the compute stream
  std::vector<double> issue_ms;             // host time inside grad_ready (issuing the buckets)
  std::vector<double> wait_ms;              // from the end of backward until sync_grads' wait ended
  std::vector<double> optimizer_ms;         // the optimizer step
  std::vector<double> outside_ms;           // the rest: launching before, synchronizing after
  std::vector<double> comm_ms, exposed_ms;  // DataParallel's StepStats
  double bytes = 0.0;
  double collectives = 0.0;
  cohort::BucketSizing buckets;  // the caps this rank count planned with
};

/// A number measured over steps: the mean over the kept steps (those within Tukey's fences of
/// the step time), and the spread of every step.
struct Stat {
  double value = 0;  // mean over the kept steps
  double p10 = 0, median = 0, p90 = 0;
};

/// Where the lost time of a step goes, in milliseconds against the 1-rank step; the five add up
/// to the lost time exactly (Note [The breakdown], scaling/model.cpp).
struct Breakdown {
  Stat compute_slowdown;    // forward and backward slower than alone (contention)
  Stat imbalance;           // waiting for the slowest rank's forward and backward
  Stat exposed;             // communication not hidden behind backward
  Stat optimizer_slowdown;  // the optimizer step slower than alone
  Stat outside_slowdown;    // launching and synchronizing slower than alone
};

struct Row {
  int ranks = 0;
  int steps = 0;  // timed steps
  int kept = 0;   // steps the means are over

  Stat step_ms, compute_ms, issue_ms, wait_ms, optimizer_ms, outside_ms, comm_ms;
  Stat exposed_ms;  // the exposed part of the step itself (at 1 rank: its own sync)
  double throughput = 0, efficiency = 0;          // samples/s; T1 / Tk (weak scaling)
  double efficiency_p10 = 0, efficiency_p90 = 0;  // from the step's p90 and p10
  double overlap = 0;                             // 1 - exposed / comm
  double step_busbw = 0;  // GB/s: bytes x 2(k-1)/k / comm time, the collectives as they ran
  double bytes = 0, collectives = 0;
  double lost_ms = 0;  // step - 1-rank step
  Breakdown lost;      // ms; each / step_ms is its share of the step
  cohort::BucketSizing buckets;
  std::vector<double> step_series;  // the slowest rank's step, every timed step (ms)
  // Per step: mean compute, imbalance, exposed, optimizer and outside of the critical rank (the
  // five parts of Note [The breakdown] before the one-rank baselines come off).
  std::vector<std::vector<double>> parts;
  std::vector<std::size_t> kept_steps;
  std::vector<double> compute_deviations;  // each rank's forward and backward / the mean - 1
};

/// All-reduces timed on the world that trains (scaling/probe.hpp): the slowest rank's median of
/// each size, and the fitted per-collective cost ms = alpha + bytes x ms_per_byte.
struct LinkProbe {
  int ranks = 0;
  std::string backend;
  std::vector<double> bytes, ms;
  std::vector<double> cross_ms;  // across nodes: each size's cross-node part alone (world.cross())
  double alpha_ms = 0, ms_per_byte = 0;
  bool valid() const { return !ms.empty(); }
  /// nccl-tests' bus bandwidth of the fitted slope (GB/s): the link alone, large messages.
  double link_busbw_gbps() const {
    return ms_per_byte > 0 ? 2.0 * (ranks - 1) / ranks / (ms_per_byte * 1e6) : 0.0;
  }
};

/// The model's prediction of one measured rank count (Note [Checking the model]).
struct ModelCheck {
  bool valid = false;
  int ranks = 0;
  double measured_ms = 0;
  double predicted_ms = 0;  // the model, with the all-reduces as they ran in the step
  double error = 0;         // (predicted - measured) / measured
  bool probed = false;      // the link probe ran: the second prediction and the link check exist
  double predicted_probe_ms = 0;  // the same model with the probe's cost of each all-reduce
  double error_probe = 0;
  double probe_comm_ms = 0;  // the step's all-reduces at the probe's cost
  double step_comm_ms = 0;   // the same all-reduces as they ran in the step
  LinkProbe probe;
};

/// One input of a projection: its value, unit and where it came from.
struct Input {
  std::string name;
  double value = 0;
  std::string unit;
  std::string source;
};

struct Projection {
  int gpus = 0;
  bool valid = false;
  std::string why_not;                                    // when not valid
  double step_ms = 0, step_low_ms = 0, step_high_ms = 0;  // the band: the model's error here
  double efficiency = 0, efficiency_low = 0, efficiency_high = 0;
  double throughput = 0;
  double compute_ms = 0, imbalance_ms = 0, comm_ms = 0, exposed_ms = 0, other_ms = 0;
  std::string link;  // "in a node", "across nodes"
  cohort::BucketSizing buckets;
};

/// What the projections start from, each input with its source (scaling/model.cpp).
struct ProjectionPlan {
  bool valid = false;
  std::string target;   // "this device (cuda, NVIDIA H200)", "NVIDIA A100 SXM4 (published peak)"
  std::string why_not;  // when no projection is made
  std::vector<Input> inputs;
  std::vector<std::string> assumptions;  // in words, for the report and the plot's caption
  double error_low = 0, error_high = 0;  // the model check's errors here (the band)
  bool error_known = false;
};

struct Setup {
  Options options;  // with warmup and sim_tflops resolved
  layers::Workload workload;
  Precision precision = Precision::fp32;
  cohort::DType grad_dtype = cohort::DType::f32;
  bool simulated = false;
  bool budgeted = false;  // host ranks: the timed steps fit budget_s
  int batch = 0;
  int tokens_per_sample = 0;  // transformers: their sequence length; 0 otherwise
  std::string device;         // "host", or the GPU's name
};

const char* to_string(Precision precision);

}  // namespace scaling
