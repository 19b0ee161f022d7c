#pragma once

// The reduction at the heart of the shared-memory collectives: element i of the result is
// sources[0][i] (op) sources[1][i] (op) ..., always in source order, so every rank that reduces
// the same elements gets the same bits. 16-bit floats accumulate in f32 and round once; avg
// divides the sum by the number of ranks (integers truncate toward zero, as on the other
// backends).

#include <cohort/comm/types.hpp>

#include <algorithm>
#include <cstddef>
#include <type_traits>

namespace cohort::detail {

template <typename T>
using Accumulator =
    std::conditional_t<std::is_same_v<T, half> || std::is_same_v<T, bfloat16>, float, T>;

/// Reduces `count` elements of each of `ranks` sources (`source(r)` points at the first of source
/// r's) into `out`, and into `copy` too when it is not null. `out` and `copy` may alias a source
/// element for element (each block of the result is written after every source's block is read),
/// but not shifted.
template <typename T, typename Source>
void reduce_sources(const Source& source, int ranks, std::size_t count, ReduceOp op, T* out,
                    T* copy) {
  using A = Accumulator<T>;
  constexpr std::size_t kBlock = 1024;  // 4 KiB of f32 accumulators on the stack
  A acc[kBlock];
  for (std::size_t begin = 0; begin < count; begin += kBlock) {
    const std::size_t n = std::min(kBlock, count - begin);
    const T* first = source(0) + begin;
    for (std::size_t i = 0; i < n; ++i) {
      acc[i] = static_cast<A>(first[i]);
    }
    for (int r = 1; r < ranks; ++r) {
      const T* src = source(r) + begin;
      switch (op) {
        case ReduceOp::sum:
        case ReduceOp::avg:
          for (std::size_t i = 0; i < n; ++i) {
            acc[i] = static_cast<A>(acc[i] + static_cast<A>(src[i]));
          }
          break;
        case ReduceOp::min:
          for (std::size_t i = 0; i < n; ++i) {
            const A v = static_cast<A>(src[i]);
            acc[i] = v < acc[i] ? v : acc[i];
          }
          break;
        case ReduceOp::max:
          for (std::size_t i = 0; i < n; ++i) {
            const A v = static_cast<A>(src[i]);
            acc[i] = acc[i] < v ? v : acc[i];
          }
          break;
      }
    }
    if (op == ReduceOp::avg) {
      const A divisor = static_cast<A>(ranks);
      for (std::size_t i = 0; i < n; ++i) {
        acc[i] = static_cast<A>(acc[i] / divisor);
      }
    }
    T* dst = out + begin;
    for (std::size_t i = 0; i < n; ++i) {
      dst[i] = static_cast<T>(acc[i]);
    }
    if (copy != nullptr) {
      std::copy(dst, dst + n, copy + begin);
    }
  }
}

}  // namespace cohort::detail
