#pragma once

/// @file
/// Whether every rank holds the same bytes: for state a program keeps outside the
/// `ParamRegistry` (which `DataParallel` neither averages nor broadcasts, and a `Checkpointer`
/// does not save), or for the parameters themselves when a run is suspect.
///
///     std::vector<float> extra_bias(64);   // kept outside the registry: check it stays equal
///     cohort::check_ranks_agree(world, std::span<float>(extra_bias), "extra_bias");
///     cohort::check_ranks_agree(world, dp.param_arena(), "parameters", dp.compute_stream());
///
/// Note [Checking that ranks agree]
/// Each rank hashes its bytes (`Checksum`, the checkpoint files' 64-bit hash) and publishes the
/// hash and the byte count through the world's store (`StoreGroup::all_gather`), so it works on
/// any backend and costs one store round, not a collective over the data: a debugging check, to
/// call after the first steps or every few hundred, not every step. Every rank gathers every
/// rank's hash, so all of them throw the same error naming the ranks by what they hold.

#include <cohort/comm/world.hpp>
#include <cohort/core/stream.hpp>

#include <string_view>

namespace cohort {

/// Checks that `data` holds the same bytes on every rank of `world`. Collective: every rank
/// calls it with the same `name` (which names the data in the error). Waits for `stream` (where
/// the data was written), then reads the data on the host (a CUDA device's through copies of at
/// most 64 MiB).
/// @throws InvalidArgument on every rank when they differ: "'extra_bias' differs across the 4
///         ranks: ranks 0, 1 and 3 hold 256 bytes with checksum ...; rank 2 holds ...";
///         TimeoutError when a rank never calls it.
void check_ranks_agree(World& world, TensorView data, std::string_view name, const Stream& stream);

/// The same for host memory written by host code (no stream to wait for).
/// @throws InvalidArgument also when `data` is not host memory (pass the stream).
void check_ranks_agree(World& world, TensorView data, std::string_view name);

}  // namespace cohort
