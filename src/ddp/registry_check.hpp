#pragma once

// The construction-time check that every rank registered the same parameters with the same
// options: each rank publishes a hash of its description through the store; when the hashes
// differ every rank reads the descriptions and names the first difference and the ranks.

#include <cohort/launch/store.hpp>

#include <chrono>
#include <string>
#include <vector>

namespace cohort::detail {

/// Checks that `lines` (what must agree, one entry a line) are the same on every rank.
/// Collective over the `size` ranks meeting through `store`.
/// @throws InvalidArgument naming the first differing line and which ranks hold what;
///         TimeoutError when a rank does not publish within `timeout`.
void check_same_on_every_rank(Store& store, int rank, int size,
                              const std::vector<std::string>& lines,
                              std::chrono::milliseconds timeout);

}  // namespace cohort::detail
