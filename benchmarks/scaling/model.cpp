#include "scaling/model.hpp"

#include "common/bench_common.hpp"

#include <cohort/ddp/bucket_plan.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <stdexcept>

namespace scaling {

namespace {

using cohort::bench::percentile;

double mean_of(const std::vector<double>& values, const std::vector<std::size_t>& kept) {
  if (kept.empty()) return 0.0;
  double sum = 0.0;
  for (const std::size_t i : kept) sum += values[i];
  return sum / static_cast<double>(kept.size());
}

/// When each parameter's gradient is complete, as a fraction of forward and backward: forward
/// is a third, then the layers' backward in reverse, each in proportion to its FLOPs.
std::vector<double> ready_fractions(const Setup& setup, const cohort::ParamRegistry& registry) {
  const double total = 3.0 * setup.workload.forward_flops();
  const double scale = total > 0 ? 1.0 / total : 0.0;
  std::vector<double> ready(registry.size(), 1.0);
  double clock = setup.workload.forward_flops() * scale;
  for (std::size_t l = setup.workload.layers.size(); l-- > 0;) {
    const layers::WorkloadLayer& layer = setup.workload.layers[l];
    clock += 2.0 * layer.forward_flops * scale;
    for (const layers::WorkloadParam& param : layer.params) {
      ready[registry.find(param.name).index] = std::min(1.0, clock);
    }
  }
  return ready;
}

cohort::BucketPlan plan_for(const cohort::ParamRegistry& registry, int ranks,
                            const cohort::BucketSizing& caps) {
  return cohort::make_bucket_plan(registry, ranks, caps.middle_bytes, caps.first_bytes,
                                  caps.last_bytes);
}

/// Each bucket's bytes and the fraction of forward and backward after which it is ready.
struct BucketTimes {
  std::vector<double> bytes, ready;
};

BucketTimes bucket_times(const Setup& setup, const cohort::ParamRegistry& registry, int ranks,
                         const cohort::BucketSizing& caps) {
  const cohort::BucketPlan plan = plan_for(registry, ranks, caps);
  const std::vector<double> fractions = ready_fractions(setup, registry);
  BucketTimes times;
  for (const cohort::Bucket& bucket : plan.buckets) {
    double ready = 0.0;
    for (const std::uint32_t index : bucket.params) ready = std::max(ready, fractions[index]);
    times.bytes.push_back(static_cast<double>(bucket.slice.count * cohort::size_of(plan.dtype)));
    times.ready.push_back(ready);
  }
  return times;
}

}  // namespace

std::vector<std::size_t> kept_steps(const std::vector<double>& step_ms) {
  // Tukey's fences: a step more than 1.5 interquartile ranges beyond the quartiles is an
  // outlier (a page-fault storm after the warm-up, a burst of load from elsewhere). They work
  // for 3 steps as for 300, and keep every step of a steady run.
  std::vector<std::size_t> kept;
  const double q1 = percentile(step_ms, 25.0);
  const double q3 = percentile(step_ms, 75.0);
  const double low = q1 - 1.5 * (q3 - q1);
  const double high = q3 + 1.5 * (q3 - q1);
  for (std::size_t i = 0; i < step_ms.size(); ++i) {
    if (step_ms[i] >= low && step_ms[i] <= high) kept.push_back(i);
  }
  return kept;
}

Stat stat_of(const std::vector<double>& per_step, const std::vector<std::size_t>& kept) {
  Stat stat;
  if (per_step.empty()) return stat;
  stat.value = mean_of(per_step, kept);
  stat.p10 = percentile(per_step, 10.0);
  stat.median = percentile(per_step, 50.0);
  stat.p90 = percentile(per_step, 90.0);
  return stat;
}

// Note [The breakdown]
// Every rank's step is cut by events into forward and backward (c), the wait in sync_grads for
// the last all-reduce (w), the optimizer (o), and the rest of its wall time (x: launching
// before, synchronizing after), so that its step is exactly c + w + o + x. The step of the world
// is its slowest rank's, the critical rank r*. Then, step by step,
//   step = mean_r c  +  (max_r c - mean_r c)  +  (c* + w* - max_r c)  +  o*  +  x*
//        = compute   +  imbalance             +  exposed communication  + optimizer + outside,
// an identity: the exposed part is what the critical rank waited beyond the slowest rank's
// backward. Against the one-rank step (whose imbalance is 0 and exposed part only its own
// sync), the lost time is then exactly the sum of five named parts: compute slower than alone
// (contention with communication for cores, SMs or memory), imbalance, exposed communication,
// optimizer slower than alone, outside slower than alone. Every part is a mean over the same kept
// steps (within Tukey's fences of the step time: a load burst from elsewhere or a page-fault
// storm after the warm-up does not move it), so the parts add up to the mean step, and each has
// its p10 and p90 over every step.
Row summarize(int ranks, const std::vector<RankSamples>& all, const Setup& setup) {
  Row row;
  row.ranks = ranks;
  row.buckets = all.front().buckets;
  const std::size_t steps = all.front().step_ms.size();
  row.steps = static_cast<int>(steps);
  std::vector<double> step, compute, issue, imbalance, exposed, wait, optimizer, outside, comm;
  for (std::size_t s = 0; s < steps; ++s) {
    std::size_t critical = 0, slowest_compute = 0;
    double compute_sum = 0.0, issue_sum = 0.0;
    for (std::size_t r = 0; r < all.size(); ++r) {
      if (all[r].step_ms[s] > all[critical].step_ms[s]) critical = r;
      if (all[r].compute_ms[s] > all[slowest_compute].compute_ms[s]) slowest_compute = r;
      compute_sum += all[r].compute_ms[s];
      issue_sum += all[r].issue_ms[s];
    }
    const double n = static_cast<double>(all.size());
    const RankSamples& c = all[critical];
    const double mean_compute = compute_sum / n;
    const double max_compute = all[slowest_compute].compute_ms[s];
    // The step as the identity above has it: the critical rank's own phases.
    const double total = c.compute_ms[s] + c.wait_ms[s] + c.optimizer_ms[s] + c.outside_ms[s];
    step.push_back(total);
    compute.push_back(mean_compute);
    issue.push_back(issue_sum / n);
    imbalance.push_back(max_compute - mean_compute);
    exposed.push_back(c.compute_ms[s] + c.wait_ms[s] - max_compute);
    wait.push_back(c.wait_ms[s]);
    optimizer.push_back(c.optimizer_ms[s]);
    outside.push_back(c.outside_ms[s]);
    // The collectives as they ran on the rank that reached them last (the others' durations
    // include waiting for it).
    comm.push_back(all[slowest_compute].comm_ms[s]);
  }
  const std::vector<std::size_t> kept = kept_steps(step);
  row.kept = static_cast<int>(kept.size());
  row.step_series = step;
  row.step_ms = stat_of(step, kept);
  row.compute_ms = stat_of(compute, kept);
  row.issue_ms = stat_of(issue, kept);
  row.wait_ms = stat_of(wait, kept);
  row.optimizer_ms = stat_of(optimizer, kept);
  row.outside_ms = stat_of(outside, kept);
  row.comm_ms = stat_of(comm, kept);
  row.exposed_ms = stat_of(exposed, kept);
  // Kept for attribute(): the per-step parts.
  row.lost.compute_slowdown = stat_of(compute, kept);
  row.lost.imbalance = stat_of(imbalance, kept);
  row.lost.exposed = stat_of(exposed, kept);
  row.lost.optimizer_slowdown = stat_of(optimizer, kept);
  row.lost.outside_slowdown = stat_of(outside, kept);
  row.parts = {compute, imbalance, exposed, optimizer, outside};
  row.kept_steps = kept;
  // Each rank's forward and backward against the mean of its step: the spread that imbalance
  // grows from (used to extrapolate it, Note [Projecting to more GPUs]).
  for (std::size_t s : kept) {
    for (const RankSamples& rank : all) {
      if (compute[s] > 0) row.compute_deviations.push_back(rank.compute_ms[s] / compute[s] - 1.0);
    }
  }
  row.throughput = ranks * setup.batch / (row.step_ms.value / 1e3);
  row.bytes = all.front().bytes;
  row.collectives = all.front().collectives;
  if (ranks > 1 && row.comm_ms.value > 0) {
    row.step_busbw = row.bytes / (row.comm_ms.value * 1e6) * 2.0 * (ranks - 1) / ranks;
  }
  return row;
}

void attribute(Row& row, const Row& one) {
  const double one_step = one.step_ms.value;
  row.efficiency = one_step / row.step_ms.value;
  row.efficiency_p10 = row.step_ms.p90 > 0 ? one_step / row.step_ms.p90 : 0.0;
  row.efficiency_p90 = row.step_ms.p10 > 0 ? one_step / row.step_ms.p10 : 0.0;
  row.lost_ms = row.step_ms.value - one_step;
  // The one-rank baselines: its compute, imbalance (none), its own sync (exposed), its optimizer
  // and outside, over its kept steps: they add up to its step, so the parts to the lost time.
  double baselines[5] = {};
  for (std::size_t i = 0; i < 5; ++i) baselines[i] = mean_of(one.parts[i], one.kept_steps);
  Stat* parts[5] = {&row.lost.compute_slowdown, &row.lost.imbalance, &row.lost.exposed,
                    &row.lost.optimizer_slowdown, &row.lost.outside_slowdown};
  for (std::size_t i = 0; i < 5; ++i) {
    std::vector<double> shifted = row.parts[i];
    for (double& v : shifted) v -= baselines[i];
    *parts[i] = stat_of(shifted, row.kept_steps);
  }
  if (row.ranks > 1 && row.comm_ms.value > 0) {
    row.overlap = std::clamp(1.0 - row.lost.exposed.value / row.comm_ms.value, 0.0, 1.0);
  }
}

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
// The projection is only as good as its model, so the model first predicts every rank count
// that was measured, from what the run measured there, and says how far off it was. Its inputs
// are each rank's forward and backward, optimizer and outside time, step by step (the run's own
// distributions: its imbalance and its overheads as they were), and each step's all-reduces as
// they ran (the communication of the rank that reached them last, shared among the buckets as
// the link probe's fit alpha + bytes / B shares it, or by bytes without a probe). It replays the
// run on one clock: every rank starts a step when its previous one ended; bucket b is ready on
// rank r at start_r + f_b c_r (f_b: the fraction of forward and backward done when its last
// gradient is, from the layers' FLOPs); a bucket's all-reduce starts when the previous one has
// ended and every rank has it ready; rank r's sync ends at the later of its backward and the
// last all-reduce, then it spends its optimizer and outside time. The predicted step is the
// slowest rank's, averaged over the same kept steps as the measured one. What this checks is
// the model's structure, the part a projection reuses with other links: overlap, imbalance,
// the order of the phases. The link is checked apart: the same replay with the probe's cost of
// each all-reduce (the step's buckets all-reduced with nothing else running), and the ratio of
// the step's communication to the probe's. On a loaded host the step's all-reduces run many
// times slower than the probe's (the worker thread waits for a core after each bucket's
// compute), which the projection to this device carries as a measured input.
ModelCheck check_model(const Setup& setup, const std::vector<RankSamples>& all, const Row& row,
                       const cohort::ParamRegistry& registry, const LinkProbe& probe) {
  ModelCheck check;
  check.valid = row.ranks > 1 && !all.empty();
  if (!check.valid) return check;
  check.ranks = row.ranks;
  check.probe = probe;
  check.probed = probe.valid();
  const BucketTimes buckets = bucket_times(setup, registry, row.ranks, row.buckets);
  // Each bucket's share of the communication: the probe's cost, else its bytes.
  std::vector<double> cost;
  double probe_total = 0.0;
  for (const double bytes : buckets.bytes) {
    cost.push_back(check.probed ? probe.alpha_ms + bytes * probe.ms_per_byte : bytes);
    probe_total += cost.back();
  }
  const std::size_t steps = all.front().step_ms.size();
  const std::size_t n = all.size();
  // The communication of each step as it ran: the collectives of the rank that reached them
  // last (the others' include waiting for it).
  std::vector<double> step_comm(steps, 0.0);
  for (std::size_t s = 0; s < steps; ++s) {
    std::size_t last = 0;
    for (std::size_t r = 0; r < n; ++r) {
      if (all[r].compute_ms[s] > all[last].compute_ms[s]) last = r;
    }
    step_comm[s] = all[last].comm_ms[s];
  }
  auto replay = [&](bool step_costs) {
    std::vector<double> start(n, 0.0), predicted(steps, 0.0);
    for (std::size_t s = 0; s < steps; ++s) {
      const double scale = step_costs ? (probe_total > 0 ? step_comm[s] / probe_total : 0.0) : 1.0;
      double end = -std::numeric_limits<double>::infinity();
      for (std::size_t b = 0; b < cost.size(); ++b) {
        double ready = 0.0;
        for (std::size_t r = 0; r < n; ++r) {
          ready = std::max(ready, start[r] + buckets.ready[b] * all[r].compute_ms[s]);
        }
        end = std::max(end, ready) + cost[b] * scale;
      }
      double slowest = 0.0;
      for (std::size_t r = 0; r < n; ++r) {
        const double synced = std::max(start[r] + all[r].compute_ms[s], end);
        const double finish = synced + all[r].optimizer_ms[s] + all[r].outside_ms[s];
        slowest = std::max(slowest, finish - start[r]);
        start[r] = finish;
      }
      predicted[s] = slowest;
    }
    return mean_of(predicted, row.kept_steps);
  };
  check.measured_ms = row.step_ms.value;
  check.predicted_ms = replay(true);
  check.error = (check.predicted_ms - check.measured_ms) / check.measured_ms;
  check.step_comm_ms = row.comm_ms.value;
  if (check.probed) {
    check.predicted_probe_ms = replay(false);
    check.error_probe = (check.predicted_probe_ms - check.measured_ms) / check.measured_ms;
    check.probe_comm_ms = probe_total;
  }
  return check;
}

namespace {

/// A card's published numbers (NVIDIA's datasheets; the links from published nccl-tests runs,
/// docs/design.md "Scaling model").
struct Card {
  const char* key;
  const char* name;
  double fp32, tf32, bf16, fp16;        // dense TFLOP/s
  double memory_gbps;                   // HBM
  double node_gbps, node_latency_us;    // all-reduce busbw in an 8-GPU node
  double cross_gbps, cross_latency_us;  // across nodes (0: no published number here)
  const char* compute_source;
  const char* node_source;
  const char* cross_source;
};

constexpr Card kCards[] = {
    {"a100", "NVIDIA A100 SXM4 80GB", 19.5, 156.0, 312.0, 312.0, 2039.0, 230.0, 12.0, 192.0, 20.0,
     "NVIDIA A100 datasheet, dense",
     "nccl-tests all_reduce_perf on 8xA100 NVLink: 232.5 GB/s busbw (NVIDIA/nccl-tests#175), "
     "about 12.5 us for 4-16 bytes (deepseek-ai/DeepEP#303)",
     "nccl-tests all_reduce_perf across DGX A100 nodes with 8 HDR NICs: 192 GB/s, 19-20 us for "
     "8 bytes (NVIDIA/nccl-tests#150, #119)"},
    {"h100", "NVIDIA H100 SXM5 80GB", 67.0, 494.7, 989.4, 989.4, 3350.0, 370.0, 12.0, 0.0, 0.0,
     "NVIDIA H100 datasheet, dense",
     "about 370 GB/s all-reduce busbw on 8xH100 NVLink 4 by ring (README, 'What good numbers "
     "look like'); 12 us for small sizes assumed as on A100",
     ""},
};

const Card* card_named(const std::string& key) {
  for (const Card& card : kCards) {
    if (key == card.key) return &card;
  }
  return nullptr;
}

double peak_of(const Card& card, Precision precision) {
  switch (precision) {
    case Precision::fp32:
      return card.fp32;
    case Precision::tf32:
      return card.tf32;
    case Precision::bf16:
      return card.bf16;
    case Precision::fp16:
      return card.fp16;
  }
  return card.fp32;
}

std::string words(double value, int digits = 3) {
  char text[48];
  std::snprintf(text, sizeof(text), "%.*g", digits, value);
  return text;
}

}  // namespace

double expected_max_deviation(const std::vector<double>& deviations, int n) {
  if (deviations.empty() || n <= 1) return 0.0;
  std::mt19937_64 random(20261203);
  std::uniform_int_distribution<std::size_t> pick(0, deviations.size() - 1);
  constexpr int kDraws = 400;
  double sum = 0.0;
  for (int d = 0; d < kDraws; ++d) {
    double slowest = -std::numeric_limits<double>::infinity();
    double mean = 0.0;
    for (int r = 0; r < n; ++r) {
      const double v = deviations[pick(random)];
      slowest = std::max(slowest, v);
      mean += v;
    }
    sum += slowest - mean / n;  // the slowest against the mean of the same draw
  }
  return std::max(0.0, sum / kDraws);
}

Link link_from_allreduce_json(const nlohmann::json& report, const std::string& path) {
  if (!report.contains("records") || !report.at("records").is_array() ||
      report.at("records").empty()) {
    throw std::runtime_error(path + " has no 'records': write it with allreduce_bench --json");
  }
  const nlohmann::json* smallest = nullptr;
  const nlohmann::json* largest = nullptr;
  for (const nlohmann::json& record : report.at("records")) {
    if (record.value("collective", std::string("all_reduce")) != "all_reduce") continue;
    if (smallest == nullptr || record.at("bytes") < smallest->at("bytes")) smallest = &record;
    if (largest == nullptr || record.at("bytes") > largest->at("bytes")) largest = &record;
  }
  if (largest == nullptr) throw std::runtime_error(path + " has no all_reduce record");
  Link link;
  link.known = true;
  link.busbw_gbps = largest->at("in_place").at("busbw_bytes_per_s").get<double>() / 1e9;
  link.latency_us = smallest->at("in_place").at("time_s").get<double>() * 1e6;
  const int ranks = report.value("ranks", 0);
  link.source = "given: allreduce_bench report " + path + " (" + std::to_string(ranks) +
                " ranks: busbw of " + std::to_string(largest->at("bytes").get<long long>()) +
                " bytes, time of " + std::to_string(smallest->at("bytes").get<long long>()) +
                " bytes)";
  return link;
}

// Note [Projecting to more GPUs]
// A projection starts only from compute that belongs to the target: measured on this device
// (--target this, the default where compute is real), or the published peak of a named card at
// a stated utilization (--target a100, h100; --target-utilization). Simulated compute is a
// sleep that belongs to no GPU, so a run with it projects nothing unless a card is named. Every
// input is printed with its source: measured here, given on the command line or in a file, or
// published (with the reference). The links: in a node the widest probe here when the run was
// on this target's devices within one node, else an allreduce_bench report (--links) or
// --link-gbps, else the card's published numbers; across nodes the probe of a run that spanned
// nodes, or --node-gbps, or the card's published numbers; without one there is no projection
// past a node. Imbalance at n ranks is the expected slowest of n draws from the per-rank spread
// measured here (on this device only; a named card's is taken as none, which is optimistic).
// The projected step carries the model check's errors here as a band: if the model was e off
// (predicted/measured - 1) the truth is predicted / (1 + e), for e between the lowest and the
// highest error measured. What the band does not cover (the assumed inputs) is listed.
ProjectionBasis plan_projection(const Setup& setup, const std::vector<Row>& rows,
                                const std::vector<ModelCheck>& checks, const LinkProbe& widest,
                                bool spans_nodes, const Link& links_file) {
  ProjectionBasis basis;
  ProjectionPlan& plan = basis.plan;
  const Options& o = setup.options;
  const Row& one = rows.front();
  std::string target = o.target;
  if (target == "auto") target = setup.simulated ? "none" : "this";
  if (target == "none") {
    plan.why_not = setup.simulated
                       ? "the compute here is SIMULATED (a sleep of modelled time), which belongs "
                         "to no GPU; --target a100 or h100 projects from that card's published "
                         "peak at a stated --target-utilization"
                       : "--target none";
    return basis;
  }
  for (const ModelCheck& check : checks) {
    if (!check.valid) continue;
    if (!plan.error_known) {
      plan.error_low = plan.error_high = check.error;
      plan.error_known = true;
    }
    plan.error_low = std::min(plan.error_low, check.error);
    plan.error_high = std::max(plan.error_high, check.error);
  }
  const Card* card = card_named(target);
  if (target == "this") {
    plan.target = setup.device + " (this device, measured)";
    basis.compute_ms = one.compute_ms.value;
    plan.inputs.push_back({"forward and backward per rank", basis.compute_ms, "ms",
                           "measured here at 1 rank on " + setup.device + " (" +
                               std::string(to_string(setup.precision)) + ")"});
    if (rows.size() > 1 && one.compute_ms.value > 0) {
      basis.slowdown = rows.back().compute_ms.value / one.compute_ms.value;
      plan.inputs.push_back({"compute slowdown under communication", basis.slowdown, "x",
                             "measured here: forward and backward at " +
                                 std::to_string(rows.back().ranks) + " ranks against 1"});
      basis.deviations = rows.back().compute_deviations;
      plan.inputs.push_back({"per-rank spread of forward and backward",
                             cohort::bench::percentile(basis.deviations, 90.0) -
                                 cohort::bench::percentile(basis.deviations, 10.0),
                             "p90-p10 of (rank / mean - 1)",
                             "measured here at " + std::to_string(rows.back().ranks) +
                                 " ranks; the slowest of n is extrapolated by drawing n from it"});
    } else {
      plan.assumptions.push_back("compute slowdown and imbalance not measured (one rank): none");
    }
    basis.other_ms = one.optimizer_ms.value + one.outside_ms.value + one.exposed_ms.value;
    plan.inputs.push_back(
        {"optimizer and the rest of a step", basis.other_ms, "ms", "measured here at 1 rank"});
    // The link under training against the link alone, at the widest count probed.
    for (auto check = checks.rbegin(); check != checks.rend(); ++check) {
      if (!check->valid || !check->probed || check->probe_comm_ms <= 0) continue;
      basis.comm_slowdown = std::max(1.0, check->step_comm_ms / check->probe_comm_ms);
      plan.inputs.push_back(
          {"communication slowdown under training", basis.comm_slowdown, "x",
           "measured here at " + std::to_string(check->ranks) +
               " ranks: the step's all-reduces against the probe's (at least 1)"});
      break;
    }
    if (links_file.known) {
      basis.in_node = links_file;
    } else if (o.link_gbps > 0) {
      basis.in_node = {true, o.link_gbps, std::max(0.0, o.link_latency_us),
                       "given: --link-gbps, --link-latency-us"};
    } else if (widest.valid() && widest.ranks > 1 && !spans_nodes) {
      basis.in_node = {true, widest.link_busbw_gbps(), widest.alpha_ms * 1e3,
                       "measured here: link probe at " + std::to_string(widest.ranks) + " ranks (" +
                           widest.backend + ")"};
    }
    if (o.node_gbps > 0) {
      basis.across_nodes = {true, o.node_gbps, std::max(0.0, o.node_latency_us),
                            "given: --node-gbps, --node-latency-us"};
    } else if (widest.valid() && spans_nodes) {
      basis.across_nodes = {
          true, widest.link_busbw_gbps(), widest.alpha_ms * 1e3,
          "measured here: link probe across nodes at " + std::to_string(widest.ranks) + " ranks"};
    }
  } else if (card != nullptr) {
    if (o.target_utilization <= 0.0) {
      plan.why_not = "--target " + target +
                     " needs --target-utilization (the fraction of the "
                     "card's peak the step's compute reaches), which no run here measured";
      return basis;
    }
    const double peak = peak_of(*card, setup.precision);
    plan.target = std::string(card->name) + " (published peak, not measured)";
    basis.compute_ms = 3.0 * setup.workload.forward_flops() * setup.batch /
                       (peak * 1e12 * o.target_utilization) * 1e3;
    plan.inputs.push_back({"forward and backward per rank", basis.compute_ms, "ms",
                           "published: " + words(peak, 4) + " TFLOP/s " +
                               to_string(setup.precision) + " peak (" + card->compute_source +
                               ") at " + words(100.0 * o.target_utilization) +
                               "% utilization (--target-utilization: stated, not measured)"});
    // The SGD step moves 12 bytes per parameter (f32: read p, g, write p; bf16/fp16 with f32
    // master weights: read g and master, write master and p).
    const double optimizer_bytes = 12.0 * static_cast<double>(setup.workload.parameter_count());
    basis.other_ms = optimizer_bytes / (card->memory_gbps * 1e9) * 1e3;
    plan.inputs.push_back({"optimizer step", basis.other_ms, "ms",
                           "12 bytes per parameter at the published memory bandwidth (" +
                               words(card->memory_gbps, 4) + " GB/s, " + card->compute_source +
                               "); launches not modelled"});
    plan.assumptions.push_back(
        "no compute slowdown under communication, no imbalance and "
        "all-reduces as fast under training as alone (a perfectly even, "
        "quiet cluster: optimistic)");
    if (links_file.known) {
      basis.in_node = links_file;
    } else if (o.link_gbps > 0) {
      basis.in_node = {
          true, o.link_gbps, o.link_latency_us >= 0 ? o.link_latency_us : card->node_latency_us,
          "given: --link-gbps" + std::string(o.link_latency_us >= 0 ? ", --link-latency-us" : "")};
    } else {
      basis.in_node = {true, card->node_gbps, card->node_latency_us,
                       std::string("published: ") + card->node_source};
    }
    if (o.node_gbps > 0) {
      basis.across_nodes = {true, o.node_gbps,
                            o.node_latency_us >= 0 ? o.node_latency_us : card->cross_latency_us,
                            "given: --node-gbps"};
    } else if (card->cross_gbps > 0) {
      basis.across_nodes = {true, card->cross_gbps, card->cross_latency_us,
                            std::string("published: ") + card->cross_source};
    }
  } else {
    plan.why_not = "unknown --target " + target;
    return basis;
  }
  if (basis.in_node.known) {
    plan.inputs.push_back(
        {"all-reduce busbw in a node", basis.in_node.busbw_gbps, "GB/s", basis.in_node.source});
    plan.inputs.push_back(
        {"one small all-reduce in a node", basis.in_node.latency_us, "us", basis.in_node.source});
  }
  if (basis.across_nodes.known) {
    plan.inputs.push_back({"all-reduce busbw across nodes", basis.across_nodes.busbw_gbps, "GB/s",
                           basis.across_nodes.source});
    plan.inputs.push_back({"one small all-reduce across nodes", basis.across_nodes.latency_us, "us",
                           basis.across_nodes.source});
  }
  if (!basis.in_node.known) {
    plan.why_not =
        "no link in a node was measured or given (a run on one device; --links "
        "FILE from allreduce_bench --json, or --link-gbps)";
    return basis;
  }
  plan.assumptions.push_back(
      "each bucket's all-reduce costs alpha + 2(n-1)/n x bytes / busbw, "
      "one after another, each issued when backward makes it ready; the "
      "bucket caps the library would choose on that link");
  plan.assumptions.push_back(plan.error_known
                                 ? "band: from the estimate to the estimate corrected by the "
                                   "model's error against the steps measured here (" +
                                       words(100.0 * plan.error_low, 2) + "% to " +
                                       words(100.0 * plan.error_high, 2) +
                                       "%); the inputs above are not in it"
                                 : "no band: the model was not checked here (one rank)");
  plan.valid = true;
  return basis;
}

Projection project(int gpus, const Setup& setup, const ProjectionBasis& basis,
                   const cohort::ParamRegistry& registry) {
  Projection p;
  p.gpus = gpus;
  const bool inside = gpus <= setup.options.gpus_per_node;
  const Link& link = inside ? basis.in_node : basis.across_nodes;
  p.link = inside ? "in a node" : "across nodes";
  if (!basis.plan.valid || !link.known) {
    p.why_not = !basis.plan.valid ? basis.plan.why_not
                                  : "no link across nodes was measured or given (--node-gbps)";
    return p;
  }
  p.valid = true;
  const double n = gpus;
  p.compute_ms = basis.compute_ms * basis.slowdown;
  p.imbalance_ms = p.compute_ms * expected_max_deviation(basis.deviations, gpus);
  const double slowest = p.compute_ms + p.imbalance_ms;
  // Automatic caps: those the library would choose on this link (GB/s are 1e3 bytes per us);
  // fixed ones as the measured rows used them.
  p.buckets = setup.options.bucket_mb > 0
                  ? cohort::BucketSizing{}
                  : cohort::choose_bucket_sizes(
                        {.alpha_us = link.latency_us,
                         .bytes_per_us = link.busbw_gbps * 1e3 * n / (2.0 * (n - 1))});
  if (setup.options.bucket_mb > 0) {
    p.buckets.middle_bytes = static_cast<std::size_t>(setup.options.bucket_mb * 1048576.0);
    p.buckets.first_bytes = static_cast<std::size_t>(setup.options.first_bucket_mb * 1048576.0);
    p.buckets.last_bytes = cohort::kDefaultLastBucketBytes;
  }
  const BucketTimes buckets = bucket_times(setup, registry, gpus, p.buckets);
  double end = 0.0;
  for (std::size_t b = 0; b < buckets.bytes.size(); ++b) {
    const double ms = (link.latency_us * 1e-3 +
                       2.0 * (n - 1) / n * buckets.bytes[b] / (link.busbw_gbps * 1e9) * 1e3) *
                      basis.comm_slowdown;
    p.comm_ms += ms;
    end = std::max(end, buckets.ready[b] * slowest) + ms;
  }
  p.exposed_ms = std::max(0.0, end - slowest);
  p.other_ms = basis.other_ms;
  p.step_ms = slowest + p.exposed_ms + p.other_ms;
  const double one = basis.compute_ms + basis.other_ms;
  p.efficiency = one / p.step_ms;
  p.throughput = n * setup.batch / (p.step_ms / 1e3);
  // The band: from the model's estimate to what it would be were the model as far off as it
  // was at each count measured here (its truth = estimate / (1 + error)).
  p.step_low_ms = p.step_high_ms = p.step_ms;
  if (basis.plan.error_known) {
    for (const double error : {basis.plan.error_low, basis.plan.error_high}) {
      p.step_low_ms = std::min(p.step_low_ms, p.step_ms / (1.0 + error));
      p.step_high_ms = std::max(p.step_high_ms, p.step_ms / (1.0 + error));
    }
  }
  p.efficiency_low = one / p.step_high_ms;
  p.efficiency_high = one / p.step_low_ms;
  return p;
}

}  // namespace scaling
