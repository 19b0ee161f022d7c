#pragma once

// The options of scaling_bench and what its measurement hands to its report.

#include <layers/workloads.hpp>

#include <cohort/ddp/bucket_sizing.hpp>

#include <string>
#include <vector>

namespace scaling {

struct Options {
  std::string workload = "mlp";
  int ranks = 0;             // host ranks as threads (when not started by a launcher)
  int batch_per_rank = 0;    // 0: the workload's default
  int steps = 20;   // timed steps per rank count (at most, on host ranks: see budget_s)
  int warmup = -1;  // -1: 3 on GPUs, 1 on host ranks
  std::string compute = "auto";  // auto, real, simulated
  double sim_tflops = 0.0;       // 0: the rate that makes a step's compute take target_step_ms
  double target_step_ms = 200.0;  // simulated compute per step (forward and backward)
  double budget_s = 60.0;  // host ranks: timed steps are cut so the run takes about this long
  // Bucket caps in MiB; 0: from the measured link (Note [Automatic bucket sizes]) unless the
  // other one is given, which then takes the library's default for this one.
  double bucket_mb = 0.0;
  double first_bucket_mb = 0.0;
  // 0: plain data parallel; 2: ZeRO-2; 3: ZeRO-3 (each layer a unit). The link probe, the model
  // check and the projection describe plain data parallel's all-reduces: with ZeRO there is no
  // probe and no check, and the report says the projection is plain data parallel's.
  int zero = 0;
  int hidden = 1024;         // mlp workload
  int layers = 8;
  // The projection's links (docs/design.md, "Scaling model", cites the sources): all-reduce busbw
  // and the cost of one all-reduce at small sizes, in a node (8xA100 SXM4 NVLink) and across
  // nodes (DGX A100, 8x HDR InfiniBand).
  double link_gbps = 230.0;
  double link_latency_us = 12.0;
  double node_gbps = 192.0;
  double node_latency_us = 20.0;
  bool probe = true;  // time the step's all-reduces at the largest rank count and check the model
  int gpus_per_node = 8;
  std::string json;
  std::string plot;
};

/// What one rank measured at one rank count, step by step.
struct RankSamples {
  std::vector<double> step_ms, compute_ms, comm_ms, exposed_ms;
  double bytes = 0.0;
  double collectives = 0.0;
  cohort::BucketSizing buckets;  // the caps this rank count planned with
};

struct Row {
  int ranks = 0;
  int steps = 0;  // timed steps

  double step_ms = 0, throughput = 0, efficiency = 0, compute_ms = 0, comm_ms = 0, exposed_ms = 0,
         imbalance_ms = 0, overlap = 0, busbw = 0, bytes = 0, collectives = 0;
  double lost = 0, lost_exposed = 0, lost_imbalance = 0, lost_overhead = 0;  // fractions of the step
  cohort::BucketSizing buckets;
};

struct Projection {
  int gpus = 0;
  double link_gbps = 0, latency_us = 0, comm_ms = 0, exposed_ms = 0, step_ms = 0, efficiency = 0,
         throughput = 0;
  std::string link;
  cohort::BucketSizing buckets;  // automatic caps: chosen for the projected link
};

/// All-reduces timed on the world that trains (scaling/probe.hpp): the slowest rank's median of
/// each size, and the fitted per-collective cost ms = alpha + bytes x ms_per_byte.
struct LinkProbe {
  int ranks = 0;
  std::string backend;
  std::vector<double> bytes, ms;
  std::vector<double> cross_ms;  // across nodes: each size's cross-node part alone (world.cross())
  double alpha_ms = 0, ms_per_byte = 0;
};

/// The model's prediction of a measured rank count from the probe (Note [Checking the model]).
struct ModelCheck {
  bool valid = false;
  int ranks = 0;
  double measured_ms = 0, predicted_ms = 0, error = 0, comm_ms = 0, exposed_ms = 0;
  LinkProbe probe;
};

struct Setup {
  Options options;  // with warmup and sim_tflops resolved
  layers::Workload workload;
  bool simulated = false;
  bool budgeted = false;  // host ranks: the timed steps fit budget_s
  int batch = 0;
};

}  // namespace scaling
