#pragma once

// scaling_bench's model: the rows and where their lost time goes (Note [The breakdown]), the
// model of a step checked against every measured rank count (Note [Checking the model]), and
// the projection to more GPUs from compute that belongs to the target (Note [Projecting to more
// GPUs]).

#include "scaling/scaling_types.hpp"

#include <cohort/ddp/param_registry.hpp>

#include <nlohmann/json.hpp>

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

namespace scaling {

/// Indices of the steps the means are over: those within Tukey's fences of the step time (1.5
/// interquartile ranges beyond the quartiles).
std::vector<std::size_t> kept_steps(const std::vector<double>& step_ms);

/// The mean over `kept` and the spread over every step of `per_step`.
Stat stat_of(const std::vector<double>& per_step, const std::vector<std::size_t>& kept);

/// Every rank's samples at one rank count reduced to a row (Note [The breakdown]).
Row summarize(int ranks, const std::vector<RankSamples>& all, const Setup& setup);

/// Efficiency against the 1-rank row, and the lost time in five named parts.
void attribute(Row& row, const Row& one);

/// The byte size of each bucket of the step at `ranks` ranks planned with `caps` (what the link
/// probe times).
std::vector<std::size_t> bucket_sizes(const cohort::ParamRegistry& registry, int ranks,
                                      const cohort::BucketSizing& caps);

/// The model's prediction of the rank count `all` measured (Note [Checking the model]).
ModelCheck check_model(const Setup& setup, const std::vector<RankSamples>& all, const Row& row,
                       const cohort::ParamRegistry& registry, const LinkProbe& probe);

/// The link a projection uses in a node or across nodes.
struct Link {
  bool known = false;
  double busbw_gbps = 0, latency_us = 0;
  std::string source;
};

/// What every projection starts from (Note [Projecting to more GPUs]). `node_probe` is the probe
/// of the widest measured world (empty when none), `spans_nodes` whether that world spanned
/// nodes, `links_file` an allreduce_bench --json report's in-node link (or not known).
struct ProjectionBasis {
  ProjectionPlan plan;
  double compute_ms = 0;           // forward and backward of one rank on the target
  double slowdown = 1.0;           // under communication
  double other_ms = 0;             // optimizer and the rest, one rank
  double comm_slowdown = 1.0;      // the step's all-reduces against the probe's, under training
  std::vector<double> deviations;  // per-rank relative deviation of forward and backward
  Link in_node, across_nodes;
};
ProjectionBasis plan_projection(const Setup& setup, const std::vector<Row>& rows,
                                const std::vector<ModelCheck>& checks, const LinkProbe& widest,
                                bool spans_nodes, const Link& links_file);

/// The projection to `gpus` GPUs of the target.
Projection project(int gpus, const Setup& setup, const ProjectionBasis& basis,
                   const cohort::ParamRegistry& registry);

/// The in-node link an allreduce_bench --json report measured: the bus bandwidth of its largest
/// all-reduce and the time of its smallest. @throws std::runtime_error naming what is missing.
Link link_from_allreduce_json(const nlohmann::json& report, const std::string& path);

/// The expected slowest of `n` ranks, as a relative deviation from the mean, drawn (with
/// replacement, a fixed seed) from `deviations`.
double expected_max_deviation(const std::vector<double>& deviations, int n);

}  // namespace scaling
