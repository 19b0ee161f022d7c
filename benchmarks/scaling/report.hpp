#pragma once

// scaling_bench's report: rows from every rank's samples, the lost time attributed, the ring-model
// projection, the printed table, the JSON report and the plot.

#include "scaling/scaling_types.hpp"

#include <cohort/comm/world.hpp>
#include <cohort/ddp/param_registry.hpp>

#include <nlohmann/json.hpp>

#include <cstddef>
#include <string>
#include <vector>

namespace scaling {

/// Reduces every rank's samples at one rank count to a row.
Row summarize(int ranks, const std::vector<RankSamples>& all, double batch);

/// Efficiency against the 1-rank row, and the lost time split three ways (fractions of the step).
void attribute(Row& row, const Row& one);

/// The byte size of each bucket of the step at `ranks` ranks planned with `caps` (what the link
/// probe times).
std::vector<std::size_t> bucket_sizes(const cohort::ParamRegistry& registry, int ranks,
                                      const cohort::BucketSizing& caps);

/// The model's prediction of the measured `row` from the probe's per-collective cost.
ModelCheck check_model(const Setup& setup, const Row& row, const Row& one,
                       const cohort::ParamRegistry& registry, const LinkProbe& probe);

/// Projection to `gpus` GPUs from the 1-rank timeline and the given links (see scaling_bench.cpp).
Projection project(int gpus, const Setup& setup, const Row& one,
                   const cohort::ParamRegistry& registry);

void print_report(const Setup& setup, const std::vector<Row>& rows,
                  const std::vector<Projection>& projections, const ModelCheck& check,
                  const cohort::World& world, std::size_t buckets);

nlohmann::json report_json(const Setup& setup, const std::vector<Row>& rows,
                           const std::vector<Projection>& projections, const ModelCheck& check,
                           const cohort::World& world);

/// Draws the JSON report at `json_path` into `png_path` with python3 and matplotlib.
void write_plot(const std::string& json_path, const std::string& png_path);

}  // namespace scaling
