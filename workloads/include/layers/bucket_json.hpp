#pragma once

// The bucket caps a DataParallel planned with, as the examples and benchmarks write them in their
// JSON reports. Header-only: its users already link nlohmann_json, the layers library does not.

#include <cohort/ddp/bucket_sizing.hpp>

#include <nlohmann/json.hpp>

namespace layers {

inline nlohmann::json bucket_json(const cohort::BucketSizing& sizing) {
  return {{"automatic", sizing.automatic},
          {"alpha_us", sizing.link.alpha_us},
          {"bytes_per_us", sizing.link.bytes_per_us},
          {"first_bytes", sizing.first_bytes},
          {"middle_bytes", sizing.middle_bytes},
          {"last_bytes", sizing.last_bytes}};
}

inline cohort::BucketSizing bucket_sizing_from_json(const nlohmann::json& in) {
  cohort::BucketSizing sizing;
  sizing.automatic = in.at("automatic").get<bool>();
  sizing.link.alpha_us = in.at("alpha_us").get<double>();
  sizing.link.bytes_per_us = in.at("bytes_per_us").get<double>();
  sizing.first_bytes = in.at("first_bytes").get<std::size_t>();
  sizing.middle_bytes = in.at("middle_bytes").get<std::size_t>();
  sizing.last_bytes = in.at("last_bytes").get<std::size_t>();
  return sizing;
}

}  // namespace layers
