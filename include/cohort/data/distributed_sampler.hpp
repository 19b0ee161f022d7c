#pragma once

/// @file
/// `DistributedSampler`: which samples each rank trains on, step by step, epoch by epoch.
///
/// Every epoch has its own permutation of the data set [0, N), a pure function of (seed, epoch),
/// so every rank computes the same one without talking to the others. Step s of the epoch trains
/// on the global batch made of permutation entries [s G, (s + 1) G), G = batch_per_rank x ranks,
/// and rank r takes the slice [s G + r B, s G + (r + 1) B). The global batches do not depend on
/// how many ranks share them, so runs on 1 and on 8 ranks see the same samples at every step.
///
///     cohort::DistributedSampler sampler({.dataset_size = n, .batch_per_rank = 64,
///                                         .rank = world.rank(), .world_size = world.size(),
///                                         .seed = seed}, stream);
///     for (int step = 0; step < steps; ++step) {
///       const cohort::SampledBatch batch = sampler.next_batch();   // indices on the device
///       sampler.gather(batch, all_images, row_elements, batch_images);  // rows, in stream order
///       train_on(batch_images);
///     }
///     // Where to resume from (a later run calls sampler.seek(position)):
///     const cohort::SamplerPosition position = sampler.position();
///
/// On a GPU the permutation and the gather run on the device (Thrust, on the sampler's stream,
/// temporaries from cohort's device pool); on the host they run on the host. Both give the same
/// permutation bit for bit (Note [Sampler permutation] in distributed_sampler.cpp).

#include <cohort/core/stream.hpp>
#include <cohort/core/tensor_view.hpp>
#include <cohort/memory/buffer.hpp>
#include <cohort/memory/memory_resource.hpp>

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

namespace cohort {

/// What happens to the N mod G samples after the last full global batch of an epoch.
enum class LastBatch : std::uint8_t {
  /// Skip them this epoch: floor(N / G) steps. (Another epoch's permutation puts other samples
  /// last, so none is skipped for good.)
  drop,
  /// One more step, its global batch completed with the first entries of the epoch's permutation
  /// (those samples count twice): ceil(N / G) steps. `SampledBatch::repeated` says how many.
  pad,
};

std::string_view to_string(LastBatch policy) noexcept;

struct SamplerOptions {
  /// Samples in the data set, N.
  std::uint64_t dataset_size = 0;
  /// Samples per rank per step, B.
  std::uint32_t batch_per_rank = 1;
  int rank = 0;
  int world_size = 1;
  std::uint64_t seed = 0;
  /// False: every epoch visits the samples in order 0, 1, ..., N - 1.
  bool shuffle = true;
  LastBatch last_batch = LastBatch::drop;
  /// Memory for the permutation and the device sort's temporaries. Null: a device pool of the
  /// sampler's own on a GPU, host memory on the host.
  std::shared_ptr<MemoryResource> resource = nullptr;
};

/// Where a sampler stands: the next batch it hands out is step `step` of epoch `epoch`. Saved in
/// checkpoints; `seek` resumes from it.
struct SamplerPosition {
  std::uint64_t epoch = 0;
  std::uint64_t step = 0;
  bool operator==(const SamplerPosition&) const = default;
};

/// One rank's batch of one step.
struct SampledBatch {
  SamplerPosition position;
  /// `size` data-set indices, in the sampler's stream's device memory (host memory on the host).
  /// Valid until a later `next_batch()` of another epoch, and for the work enqueued on the
  /// sampler's stream before that call.
  const std::int64_t* indices = nullptr;
  std::uint32_t size = 0;
  /// How many of the indices repeat samples to fill the last global batch (`LastBatch::pad`).
  std::uint32_t repeated = 0;
};

class DistributedSampler {
 public:
  /// A sampler at epoch 0, step 0, whose device work runs on `stream`.
  /// @throws InvalidArgument for an empty data set, a zero batch, a rank outside [0, world_size),
  ///         or (with `LastBatch::drop`) a data set smaller than one global batch.
  DistributedSampler(const SamplerOptions& options, Stream stream);

  const SamplerOptions& options() const noexcept { return options_; }
  const Stream& stream() const noexcept { return stream_; }
  /// G = batch_per_rank x world_size.
  std::uint64_t global_batch() const noexcept;
  std::uint64_t steps_per_epoch() const noexcept { return steps_per_epoch_; }
  SamplerPosition position() const noexcept { return position_; }

  /// Moves to `position` (a step past the epoch's end is the next epoch's start).
  void seek(SamplerPosition position);

  /// This rank's batch at `position()`, then advances by one step (into the next epoch after the
  /// last step). The first batch of an epoch computes the epoch's permutation: on a GPU enqueued
  /// on `stream()`, on the host at once. Stream contract: the indices are valid for work enqueued
  /// on `stream()` after this call.
  SampledBatch next_batch();

  /// destination row j = source row batch.indices[j], for rows of `row_elements` elements:
  /// `source` holds dataset_size rows and `destination` batch.size rows, both of one dtype on the
  /// sampler's device. Enqueued on `stream()`.
  /// @throws InvalidArgument for views of the wrong size, dtype or device.
  void gather(const SampledBatch& batch, const TensorView& source, std::size_t row_elements,
              const TensorView& destination) const;

  /// This rank's indices at `position`, computed on the host (for checks and host-side loaders).
  std::vector<std::int64_t> host_indices(SamplerPosition position) const;

  /// The whole permutation of position()'s epoch, padded to steps_per_epoch() x global_batch()
  /// entries, as the device holds it, read back to the host (waits for the stream).
  std::vector<std::int64_t> download_permutation();

 private:
  void compute_permutation();

  SamplerOptions options_;
  Stream stream_;
  std::uint64_t steps_per_epoch_ = 0;
  SamplerPosition position_;
  std::uint64_t permutation_epoch_ = 0;
  Buffer permutation_;  // [steps_per_epoch x global_batch] used; max(that, dataset_size) held
};

/// The permutation of [0, dataset_size) for (seed, epoch), computed on the host; a sampler on any
/// device produces exactly this one.
std::vector<std::int64_t> sampler_permutation(std::uint64_t dataset_size, std::uint64_t seed,
                                              std::uint64_t epoch);

}  // namespace cohort
