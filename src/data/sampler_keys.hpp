#pragma once

// The sort keys of the sampler's permutation (Note [Sampler permutation] in
// distributed_sampler.cpp), one definition for the host and the device, and the CUDA side of the
// sampler (sampler_kernels.cu).

#include <cohort/core/host_device.hpp>
#include <cohort/memory/memory_resource.hpp>

#include <cstddef>
#include <cstdint>

namespace cohort::detail {

/// splitmix64's finalizer: a bijection of 64-bit words that mixes every input bit into every
/// output bit.
COHORT_HOST_DEVICE inline std::uint64_t mix64(std::uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

/// One word per (seed, epoch), from which every sample's key of that epoch is drawn.
COHORT_HOST_DEVICE inline std::uint64_t epoch_key(std::uint64_t seed, std::uint64_t epoch) {
  return mix64(mix64(seed) ^ mix64(epoch + 0x632be59bd9b4e019ULL));
}

/// The sort key of sample `index`: distinct for distinct indices below 2^64 (an odd multiplier
/// and a bijection), so the sort has no ties to break.
COHORT_HOST_DEVICE inline std::uint64_t sample_key(std::uint64_t epoch_word, std::uint64_t index) {
  return mix64(epoch_word + index * 0x9e3779b97f4a7c15ULL);
}

#if COHORT_WITH_CUDA
/// Writes the permutation of [0, count) for `epoch_word` (or the identity when !shuffle) to
/// `permutation`, then entries [count, padded_count) as permutation[i mod count]. `permutation`
/// holds max(count, padded_count) entries: the whole permutation is written even when only the
/// first padded_count < count are used (LastBatch::drop). Enqueued on `stream`; the sort's
/// temporaries come from `resource` in stream order.
void cuda_permutation(std::int64_t* permutation, std::uint64_t count, std::uint64_t padded_count,
                      std::uint64_t epoch_word, bool shuffle, MemoryResource& resource,
                      const Stream& stream);

/// destination row j = source row indices[j], rows of `row_bytes` bytes, enqueued on `stream`.
void cuda_gather_rows(const std::int64_t* indices, std::uint32_t rows, const void* source,
                      void* destination, std::size_t row_bytes, const Stream& stream);
#endif

}  // namespace cohort::detail
