// DistributedSampler: the host side, and the dispatch to the device for CUDA streams.
//
// Note [Sampler permutation]
// An epoch's permutation is the order of the indices 0..N-1 sorted by a counter-based hash of
// (seed, epoch, index). The hash is a bijection of the index for a given (seed, epoch), so the
// keys are distinct and the sorted order is unique: std::sort on the host and Thrust's radix
// sort_by_key on a GPU must produce the same permutation, bit for bit, whatever their stability
// and however they split the work. A sequential shuffle (Fisher-Yates) would need the same
// random stream in the same order everywhere and does not run in parallel; a sort of hashed keys
// is O(N log N) on the host (N = 10^6: about 0.1 s) and a few milliseconds on a GPU.

#include <cohort/data/distributed_sampler.hpp>

#include "sampler_keys.hpp"

#include <cohort/core/error.hpp>
#include <cohort/memory/host_resource.hpp>

#include <cohort/memory/detail/stream_copy.hpp>

#if COHORT_WITH_CUDA
#include <cohort/memory/device_pool.hpp>
#endif

#include <algorithm>
#include <cstring>
#include <numeric>
#include <string>
#include <utility>

namespace cohort {

std::string_view to_string(LastBatch policy) noexcept {
  return policy == LastBatch::drop ? "drop" : "pad";
}

std::vector<std::int64_t> sampler_permutation(std::uint64_t dataset_size, std::uint64_t seed,
                                              std::uint64_t epoch) {
  const std::uint64_t word = detail::epoch_key(seed, epoch);
  std::vector<std::pair<std::uint64_t, std::int64_t>> keyed(dataset_size);
  for (std::uint64_t i = 0; i < dataset_size; ++i) {
    keyed[i] = {detail::sample_key(word, i), static_cast<std::int64_t>(i)};
  }
  std::sort(keyed.begin(), keyed.end());
  std::vector<std::int64_t> permutation(dataset_size);
  for (std::uint64_t i = 0; i < dataset_size; ++i) permutation[i] = keyed[i].second;
  return permutation;
}

namespace {

std::shared_ptr<MemoryResource> default_resource(Device device) {
  if (device.is_host()) return std::make_shared<HostResource>();
#if COHORT_WITH_CUDA
  DevicePoolOptions pool;
  pool.device = device.index();
  return make_device_pool_resource(pool);
#else
  COHORT_FAIL(InvalidArgument,
              "DistributedSampler on " + device.to_string() + ": this build has no CUDA");
#endif
}

/// The epoch's permutation on the host, padded to `padded` entries by wrapping around.
std::vector<std::int64_t> host_permutation(const SamplerOptions& options, std::uint64_t epoch,
                                           std::uint64_t padded) {
  std::vector<std::int64_t> permutation;
  if (options.shuffle) {
    permutation = sampler_permutation(options.dataset_size, options.seed, epoch);
  } else {
    permutation.resize(options.dataset_size);
    std::iota(permutation.begin(), permutation.end(), std::int64_t{0});
  }
  permutation.resize(padded);
  for (std::uint64_t i = options.dataset_size; i < padded; ++i) {
    permutation[i] = permutation[i % options.dataset_size];
  }
  return permutation;
}

}  // namespace

DistributedSampler::DistributedSampler(const SamplerOptions& options, Stream stream)
    : options_(options), stream_(std::move(stream)) {
  COHORT_EXPECTS(options_.dataset_size > 0, "DistributedSampler: the data set is empty");
  COHORT_EXPECTS(options_.batch_per_rank > 0,
                 "DistributedSampler: batch_per_rank must be positive");
  COHORT_EXPECTS(
      options_.world_size > 0 && options_.rank >= 0 && options_.rank < options_.world_size,
      "DistributedSampler: rank " + std::to_string(options_.rank) + " is outside a world of " +
          std::to_string(options_.world_size));
  const std::uint64_t global = global_batch();
  if (options_.last_batch == LastBatch::drop) {
    steps_per_epoch_ = options_.dataset_size / global;
    COHORT_EXPECTS(steps_per_epoch_ > 0,
                   "DistributedSampler: the data set (" + std::to_string(options_.dataset_size) +
                       " samples) is smaller than one global batch (" + std::to_string(global) +
                       "); use LastBatch::pad or a smaller batch");
  } else {
    steps_per_epoch_ = (options_.dataset_size + global - 1) / global;
  }
  if (options_.resource == nullptr) options_.resource = default_resource(stream_.device());
  COHORT_EXPECTS(stream_.device().is_host() ? options_.resource->host_accessible()
                                            : options_.resource->device_accessible(),
                 "DistributedSampler: resource " + options_.resource->name() +
                     " cannot be reached from " + stream_.device().to_string());
}

std::uint64_t DistributedSampler::global_batch() const noexcept {
  return std::uint64_t{options_.batch_per_rank} * static_cast<std::uint64_t>(options_.world_size);
}

void DistributedSampler::compute_permutation() {
  permutation_epoch_ = position_.epoch;
  const std::uint64_t padded = steps_per_epoch_ * global_batch();
  // The device permutes every sample in place before the first `padded` are used: with
  // LastBatch::drop, `padded` is below the data set's size, and the buffer must hold all of it.
  const std::uint64_t stored = std::max(padded, options_.dataset_size);
  // In stream order: batches of the previous epoch already enqueued keep their memory.
  permutation_ =
      Buffer(options_.resource, stored * sizeof(std::int64_t), stream_, MemoryCategory::other);
  if (stream_.device().is_host()) {
    const std::vector<std::int64_t> host = host_permutation(options_, position_.epoch, padded);
    std::memcpy(permutation_.data(), host.data(), padded * sizeof(std::int64_t));
    return;
  }
#if COHORT_WITH_CUDA
  detail::cuda_permutation(static_cast<std::int64_t*>(permutation_.data()), options_.dataset_size,
                           padded, detail::epoch_key(options_.seed, position_.epoch),
                           options_.shuffle, *options_.resource, stream_);
#endif
}

void DistributedSampler::seek(SamplerPosition position) {
  position.epoch += position.step / steps_per_epoch_;
  position.step %= steps_per_epoch_;
  position_ = position;
}

SampledBatch DistributedSampler::next_batch() {
  // Computed here rather than when a step crosses into the next epoch, so that the last batch of
  // an epoch stays valid until the next call.
  if (permutation_.empty() || permutation_epoch_ != position_.epoch) compute_permutation();
  SampledBatch batch;
  batch.position = position_;
  batch.size = options_.batch_per_rank;
  const std::uint64_t first =
      position_.step * global_batch() +
      std::uint64_t{options_.batch_per_rank} * static_cast<std::uint64_t>(options_.rank);
  batch.indices = static_cast<const std::int64_t*>(permutation_.data()) + first;
  const std::uint64_t end = first + batch.size;
  if (end > options_.dataset_size) {
    batch.repeated = static_cast<std::uint32_t>(end - std::max(first, options_.dataset_size));
  }
  seek({position_.epoch, position_.step + 1});
  return batch;
}

void DistributedSampler::gather(const SampledBatch& batch, const TensorView& source,
                                std::size_t row_elements, const TensorView& destination) const {
  const Device device = stream_.device();
  COHORT_EXPECTS(source.device() == device && destination.device() == device,
                 "DistributedSampler::gather: the views must be on " + device.to_string());
  COHORT_EXPECTS(source.dtype() == destination.dtype(),
                 "DistributedSampler::gather: source and destination dtypes differ");
  COHORT_EXPECTS_EQ(source.count(), options_.dataset_size * row_elements,
                    "DistributedSampler::gather: the source must hold dataset_size rows");
  COHORT_EXPECTS_EQ(destination.count(), std::size_t{batch.size} * row_elements,
                    "DistributedSampler::gather: the destination must hold batch.size rows");
  const std::size_t row_bytes = row_elements * size_of(source.dtype());
  if (device.is_host()) {
    const auto* from = static_cast<const std::byte*>(source.data());
    auto* to = static_cast<std::byte*>(destination.data());
    stream_.enqueue([=, indices = batch.indices, rows = batch.size] {
      for (std::uint32_t j = 0; j < rows; ++j) {
        std::memcpy(to + j * row_bytes, from + static_cast<std::size_t>(indices[j]) * row_bytes,
                    row_bytes);
      }
    });
    return;
  }
#if COHORT_WITH_CUDA
  detail::cuda_gather_rows(batch.indices, batch.size, source.data(), destination.data(), row_bytes,
                           stream_);
#endif
}

std::vector<std::int64_t> DistributedSampler::host_indices(SamplerPosition position) const {
  position.epoch += position.step / steps_per_epoch_;
  position.step %= steps_per_epoch_;
  const std::vector<std::int64_t> permutation =
      host_permutation(options_, position.epoch, steps_per_epoch_ * global_batch());
  const auto first = static_cast<std::ptrdiff_t>(position.step * global_batch() +
                                                 std::uint64_t{options_.batch_per_rank} *
                                                     static_cast<std::uint64_t>(options_.rank));
  return {permutation.begin() + first, permutation.begin() + first + options_.batch_per_rank};
}

std::vector<std::int64_t> DistributedSampler::download_permutation() {
  if (permutation_.empty() || permutation_epoch_ != position_.epoch) compute_permutation();
  std::vector<std::int64_t> host(steps_per_epoch_ * global_batch());
  const std::size_t bytes = host.size() * sizeof(std::int64_t);
  // In the stream's order, on its device, and waited for (the stream is non-blocking: a plain
  // cudaMemcpy on the legacy stream would not wait for the permutation).
  detail::read_after(host.data(), permutation_.data(), bytes, stream_);
  return host;
}

}  // namespace cohort
