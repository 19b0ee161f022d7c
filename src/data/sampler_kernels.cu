// CUDA side of DistributedSampler: the permutation (Thrust's sort_by_key of hashed keys, Note
// [Sampler permutation] in distributed_sampler.cpp) and the row gather, on the sampler's stream.

#include "sampler_keys.hpp"

#include <cohort/core/detail/cuda_check.hpp>
#include <cohort/core/detail/cuda_device_scope.hpp>

#include <thrust/execution_policy.h>
#include <thrust/for_each.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/sequence.h>
#include <thrust/sort.h>
#include <thrust/system/system_error.h>
#include <thrust/transform.h>

#include <cuda_runtime.h>

#include <string>

namespace cohort::detail {

// Note [Sampler launches]
// Thrust and CUB ask the current device for its properties and launch on it, so each entry point
// binds the sampler stream's device first (whatever the calling thread has current, and without
// creating a context on GPU 0 for a thread that had none). A launch's failure is Thrust's own
// exception, thrown by the algorithm that launched, which is turned into a CudaError naming the
// step; never cudaGetLastError after the fact, which would report any earlier unrelated error as
// the sampler's (Note [Launch errors] in kernels/cuda_kernels.cu).

namespace {

/// Runs `body` (Thrust algorithms on `stream`) with the stream's device current; a Thrust failure
/// becomes a CudaError naming `what`.
template <typename Body>
void on_stream_device(const Stream& stream, const char* what, Body&& body) {
  const CudaDeviceScope scope(stream.device().index());
  try {
    body(static_cast<cudaStream_t>(stream.native_handle()));
  } catch (const thrust::system_error& error) {
    COHORT_FAIL(CudaError, std::string("DistributedSampler, ") + what + ": " + error.what());
  }
}

/// Thrust's temporary-storage allocator on a cohort resource, in stream order on the sampler's
/// stream: Thrust frees its temporaries on that stream too, after the work that used them.
class StreamOrderedAllocator {
 public:
  using value_type = char;
  StreamOrderedAllocator(MemoryResource& resource, const Stream& stream)
      : resource_(&resource), stream_(&stream) {}
  char* allocate(std::ptrdiff_t bytes) {
    return static_cast<char*>(resource_->allocate(static_cast<std::size_t>(bytes), *stream_));
  }
  void deallocate(char* pointer, std::size_t bytes) {
    resource_->deallocate(pointer, bytes, *stream_);
  }

 private:
  MemoryResource* resource_;
  const Stream* stream_;
};

struct KeyOf {
  std::uint64_t epoch_word;
  __device__ std::uint64_t operator()(std::uint64_t index) const {
    return sample_key(epoch_word, index);
  }
};

struct Wrap {
  std::int64_t* permutation;
  std::uint64_t count;
  __device__ void operator()(std::uint64_t i) const { permutation[i] = permutation[i % count]; }
};

/// Copies row i / words_per_row of the batch, one word at a time.
template <typename Word>
struct GatherWords {
  const std::int64_t* indices;
  const Word* source;
  Word* destination;
  std::size_t words_per_row;
  __device__ void operator()(std::size_t i) const {
    const std::size_t row = i / words_per_row;
    const std::size_t column = i - row * words_per_row;
    destination[i] = source[static_cast<std::size_t>(indices[row]) * words_per_row + column];
  }
};

template <typename Word>
void gather_words(const std::int64_t* indices, std::uint32_t rows, const void* source,
                  void* destination, std::size_t row_bytes, cudaStream_t stream) {
  const std::size_t words = row_bytes / sizeof(Word);
  thrust::for_each_n(thrust::cuda::par_nosync.on(stream), thrust::counting_iterator<std::size_t>(0),
                     words * rows,
                     GatherWords<Word>{indices, static_cast<const Word*>(source),
                                       static_cast<Word*>(destination), words});
}

}  // namespace

void cuda_permutation(std::int64_t* permutation, std::uint64_t count, std::uint64_t padded_count,
                      std::uint64_t epoch_word, bool shuffle, MemoryResource& resource,
                      const Stream& stream) {
  on_stream_device(stream, "computing the permutation", [&](cudaStream_t cuda_stream) {
    StreamOrderedAllocator allocator(resource, stream);
    auto policy = thrust::cuda::par_nosync(allocator).on(cuda_stream);
    thrust::sequence(policy, permutation, permutation + count, std::int64_t{0});
    if (shuffle) {
      auto* keys =
          static_cast<std::uint64_t*>(resource.allocate(count * sizeof(std::uint64_t), stream));
      thrust::transform(policy, thrust::counting_iterator<std::uint64_t>(0),
                        thrust::counting_iterator<std::uint64_t>(count), keys, KeyOf{epoch_word});
      thrust::sort_by_key(policy, keys, keys + count, permutation);
      resource.deallocate(keys, count * sizeof(std::uint64_t), stream);
    }
    if (padded_count > count) {
      thrust::for_each(policy, thrust::counting_iterator<std::uint64_t>(count),
                       thrust::counting_iterator<std::uint64_t>(padded_count),
                       Wrap{permutation, count});
    }
  });
}

void cuda_gather_rows(const std::int64_t* indices, std::uint32_t rows, const void* source,
                      void* destination, std::size_t row_bytes, const Stream& stream) {
  on_stream_device(stream, "gathering a batch's rows", [&](cudaStream_t cuda_stream) {
    if (row_bytes % 8 == 0) {
      gather_words<std::uint64_t>(indices, rows, source, destination, row_bytes, cuda_stream);
    } else if (row_bytes % 4 == 0) {
      gather_words<std::uint32_t>(indices, rows, source, destination, row_bytes, cuda_stream);
    } else {
      gather_words<unsigned char>(indices, rows, source, destination, row_bytes, cuda_stream);
    }
  });
}

}  // namespace cohort::detail
