#pragma once

// The construction-time check that every rank registered the same parameters with the same
// options: the ranks gather a hash of their descriptions; when the hashes differ they gather the
// descriptions and name the first difference and the ranks.

#include <cohort/launch/store_group.hpp>

#include <string>
#include <vector>

namespace cohort::detail {

/// Checks that `lines` (what must agree, one entry a line) are the same on every rank.
/// Collective over the members of `group`.
/// @throws InvalidArgument naming the first differing line and which ranks hold what;
///         TimeoutError (from `group`) naming the ranks that never arrived.
void check_same_on_every_rank(StoreGroup& group, const std::vector<std::string>& lines);

}  // namespace cohort::detail
