// The CUDA launches of the kernels: the functors of optimizer_math.hpp over device arrays, with
// 16-byte loads for f32 arrays (8-byte for 16-bit ones) when every array is aligned, a
// grid-stride loop, and a grid sized by the kernel's occupancy (Note [Grid size]). Everything
// CUDA-side of the kernels is in this one file: nvcc is slow, and the kernels share their helpers.
//
// Callers make the stream's device current before calling (the optimizer does).

#include "dispatch.hpp"

#include <cohort/core/detail/cuda_check.hpp>
#include <cohort/kernels/launch.hpp>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>
#include <cub/block/block_reduce.cuh>

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace cohort::kernels {
namespace {

constexpr int kThreads = 256;
constexpr std::size_t kVector = 4;  // elements per vector access

// ---- conversions (CUDA's intrinsics; bit-identical to cohort::half and cohort::bfloat16) ----

__device__ inline float to_float(float value) {
  return value;
}
__device__ inline float to_float(bfloat16 value) {
  return __bfloat162float(__ushort_as_bfloat16(value.bits));
}
__device__ inline float to_float(half value) {
  return __half2float(__ushort_as_half(value.bits));
}

template <typename T>
__device__ inline T from_float(float value) {
  if constexpr (std::is_same_v<T, float>) {
    return value;
  } else if constexpr (std::is_same_v<T, bfloat16>) {
    return bfloat16::from_bits(__bfloat16_as_ushort(__float2bfloat16_rn(value)));
  } else {
    return half::from_bits(__half_as_ushort(__float2half_rn(value)));
  }
}

// ---- vector access: 4 elements, one 16-byte (f32) or 8-byte (16-bit) load or store ----

template <typename T>
__device__ inline void load4(const T* base, std::size_t index, float (&out)[kVector]) {
  if constexpr (std::is_same_v<T, float>) {
    const float4 v = *reinterpret_cast<const float4*>(base + index);
    out[0] = v.x;
    out[1] = v.y;
    out[2] = v.z;
    out[3] = v.w;
  } else {
    const uint2 raw = *reinterpret_cast<const uint2*>(base + index);
    out[0] = to_float(T::from_bits(static_cast<std::uint16_t>(raw.x & 0xFFFFu)));
    out[1] = to_float(T::from_bits(static_cast<std::uint16_t>(raw.x >> 16)));
    out[2] = to_float(T::from_bits(static_cast<std::uint16_t>(raw.y & 0xFFFFu)));
    out[3] = to_float(T::from_bits(static_cast<std::uint16_t>(raw.y >> 16)));
  }
}

template <typename T>
__device__ inline void store4(T* base, std::size_t index, const float (&values)[kVector]) {
  if constexpr (std::is_same_v<T, float>) {
    *reinterpret_cast<float4*>(base + index) =
        make_float4(values[0], values[1], values[2], values[3]);
  } else {
    uint2 raw;
    raw.x = static_cast<unsigned>(from_float<T>(values[0]).bits) |
            (static_cast<unsigned>(from_float<T>(values[1]).bits) << 16);
    raw.y = static_cast<unsigned>(from_float<T>(values[2]).bits) |
            (static_cast<unsigned>(from_float<T>(values[3]).bits) << 16);
    *reinterpret_cast<uint2*>(base + index) = raw;
  }
}

template <typename T>
bool vector_aligned(const T* pointer) {
  return reinterpret_cast<std::uintptr_t>(pointer) % (kVector * sizeof(T)) == 0;
}

// Note [Grid size]
// A grid-stride kernel needs just enough blocks to fill the device once: as many as can be
// resident at the same time. That number depends on the kernel (its registers and shared
// memory: the AdamW steps need 40-44 registers, which leaves room for 5-6 blocks of 256 threads
// per sm_90 SM, not the 8 a register-light kernel gets), so it is asked of the occupancy API for
// each kernel, once per device, and cached.
constexpr int kMaxDevices = 64;

int multiprocessor_count(int device) {
  static std::array<std::atomic<int>, kMaxDevices> cache{};
  auto& slot = cache.at(static_cast<std::size_t>(device));
  int count = slot.load(std::memory_order_relaxed);
  if (count == 0) {
    COHORT_CUDA_TRY(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device));
    slot.store(count, std::memory_order_relaxed);
  }
  return count;
}

/// Enough blocks of `Kernel` for `work_items` threads, at most as many as can be resident on the
/// current device at once (the loops are grid-stride).
template <auto Kernel>
unsigned grid_for(std::size_t work_items) {
  static std::array<std::atomic<int>, kMaxDevices> resident_per_sm{};
  int device = 0;
  COHORT_CUDA_TRY(cudaGetDevice(&device));
  auto& slot = resident_per_sm.at(static_cast<std::size_t>(device));
  int per_sm = slot.load(std::memory_order_relaxed);
  if (per_sm == 0) {
    COHORT_CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, Kernel, kThreads, 0));
    per_sm = per_sm > 0 ? per_sm : 1;
    slot.store(per_sm, std::memory_order_relaxed);
  }
  const std::size_t wanted = (work_items + kThreads - 1) / kThreads;
  const auto limit =
      static_cast<std::size_t>(multiprocessor_count(device)) * static_cast<std::size_t>(per_sm);
  const std::size_t blocks = wanted < limit ? wanted : limit;
  return static_cast<unsigned>(blocks > 0 ? blocks : 1);
}

// Note [Launch errors]
// A launch is checked by the status cudaLaunchKernelEx returns for it, never by
// cudaGetLastError afterwards: that returns (and clears) whatever error any earlier call left
// pending, so an ignored out-of-memory elsewhere would be reported as this kernel's failure.
/// Launches `Kernel` on `grid` blocks of `block` threads on `stream`; throws CudaError naming
/// `name`.
template <auto Kernel, typename... Args>
void launch(const char* name, unsigned grid, unsigned block, cudaStream_t stream, Args&&... args) {
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(grid);
  config.blockDim = dim3(block);
  config.stream = stream;
  const cudaError_t status = cudaLaunchKernelEx(&config, Kernel, std::forward<Args>(args)...);
  if (status != cudaSuccess) {
    (void)cudaGetLastError();  // this launch's own error, which the runtime also left pending
    COHORT_FAIL(CudaError, std::string("launching ") + name + ": " +
                               ::cohort::detail::describe_cuda_error("cudaLaunchKernelEx", status));
  }
}

// ---- the fused optimizer step ----

template <typename Update, typename Param, typename Grad>
__global__ void __launch_bounds__(kThreads)
    step_kernel(Param* params, const Grad* grads, float* master, float* state0, float* state1,
                std::size_t count, bool vectorized, Update update, const StepScalars* scalars) {
  const StepScalars s = *scalars;
  if (s.skip != 0) {
    return;
  }
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  const std::size_t thread = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::size_t groups = vectorized ? count / kVector : 0;
  for (std::size_t group = thread; group < groups; group += stride) {
    const std::size_t i = group * kVector;
    float p[kVector];
    float g[kVector];
    float a[kVector] = {};
    float b[kVector] = {};
    if (master != nullptr) {
      load4(master, i, p);
    } else {
      load4(params, i, p);
    }
    load4(grads, i, g);
    if (state0 != nullptr) {
      load4(state0, i, a);
    }
    if (state1 != nullptr) {
      load4(state1, i, b);
    }
#pragma unroll
    for (std::size_t k = 0; k < kVector; ++k) {
      update(p[k], g[k] * s.grad_multiplier, a[k], b[k], s);
    }
    if (state0 != nullptr) {
      store4(state0, i, a);
    }
    if (state1 != nullptr) {
      store4(state1, i, b);
    }
    if (master != nullptr) {
      store4(master, i, p);
    }
    store4(params, i, p);
  }
  for (std::size_t i = groups * kVector + thread; i < count; i += stride) {
    float p = master != nullptr ? master[i] : to_float(params[i]);
    float a = state0 != nullptr ? state0[i] : 0.0f;
    float b = state1 != nullptr ? state1[i] : 0.0f;
    update(p, to_float(grads[i]) * s.grad_multiplier, a, b, s);
    if (state0 != nullptr) {
      state0[i] = a;
    }
    if (state1 != nullptr) {
      state1[i] = b;
    }
    if (master != nullptr) {
      master[i] = p;
    }
    params[i] = from_float<Param>(p);
  }
}

template <typename Update, typename Param, typename Grad>
void launch_step(const StepArrays& arrays, Update update, const StepScalars* scalars,
                 cudaStream_t stream) {
  auto* params = static_cast<Param*>(arrays.params.data());
  const auto* grads = static_cast<const Grad*>(arrays.grads.data());
  const std::size_t count = arrays.params.count();
  const bool vectorized = vector_aligned(params) && vector_aligned(grads) &&
                          vector_aligned(arrays.master) && vector_aligned(arrays.state0) &&
                          vector_aligned(arrays.state1);
  const std::size_t work = vectorized ? count / kVector + count % kVector : count;
  constexpr auto kernel = step_kernel<Update, Param, Grad>;
  launch<kernel>("the optimizer step", grid_for<kernel>(work), kThreads, stream, params, grads,
                 arrays.master, arrays.state0, arrays.state1, count, vectorized, update, scalars);
}

// ---- gradient statistics: sum of squares of finite values, count of the others ----

template <typename T>
__global__ void __launch_bounds__(kThreads)
    grad_stats_kernel(const T* grads, std::size_t count, bool vectorized, GradStats* stats) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  const std::size_t thread = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  float sum = 0.0f;
  unsigned nonfinite = 0;
  auto add = [&](float value) {
    if (is_finite(value)) {
      sum += value * value;
    } else {
      ++nonfinite;
    }
  };
  const std::size_t groups = vectorized ? count / kVector : 0;
  for (std::size_t group = thread; group < groups; group += stride) {
    float values[kVector];
    load4(grads, group * kVector, values);
#pragma unroll
    for (std::size_t k = 0; k < kVector; ++k) {
      add(values[k]);
    }
  }
  for (std::size_t i = groups * kVector + thread; i < count; i += stride) {
    add(to_float(grads[i]));
  }
  using Reduce = cub::BlockReduce<double, kThreads>;
  __shared__ typename Reduce::TempStorage storage;
  const double block_sum = Reduce(storage).Sum(static_cast<double>(sum));
  __syncthreads();
  const double block_nonfinite = Reduce(storage).Sum(static_cast<double>(nonfinite));
  if (threadIdx.x == 0) {
    atomicAdd(&stats->sum_of_squares, block_sum);
    if (block_nonfinite > 0.0) {
      atomicAdd(&stats->nonfinite, block_nonfinite);
    }
  }
}

// ---- scalars and casts ----

__global__ void prepare_kernel(StepScalars* scalars, LossScalerState* scaler, PrepareArgs args) {
  prepare_step(*scalars, scaler, args);
}

/// `to[i] = from[i]` converted, 4 elements per access when both arrays are vector-aligned. The
/// one cast kernel: the optimizers' master-weight copies and the wire compression of
/// DataParallel's buckets both use it.
template <typename From, typename To>
__global__ void __launch_bounds__(kThreads)
    cast_kernel(const From* from, To* to, std::size_t count, bool vectorized) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  const std::size_t thread = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::size_t groups = vectorized ? count / kVector : 0;
  for (std::size_t group = thread; group < groups; group += stride) {
    float values[kVector];
    load4(from, group * kVector, values);
    store4(to, group * kVector, values);
  }
  for (std::size_t i = groups * kVector + thread; i < count; i += stride) {
    to[i] = from_float<To>(to_float(from[i]));
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    add_kernel(const T* from, T* to, std::size_t count, bool vectorized) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  const std::size_t thread = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::size_t groups = vectorized ? count / kVector : 0;
  for (std::size_t group = thread; group < groups; group += stride) {
    float a[kVector];
    float b[kVector];
    load4(to, group * kVector, a);
    load4(from, group * kVector, b);
#pragma unroll
    for (std::size_t k = 0; k < kVector; ++k) {
      a[k] += b[k];
    }
    store4(to, group * kVector, a);
  }
  for (std::size_t i = groups * kVector + thread; i < count; i += stride) {
    to[i] = from_float<T>(to_float(to[i]) + to_float(from[i]));
  }
}

}  // namespace

namespace cuda {

void optimizer_step(const StepArrays& arrays, const UpdateHyper& hyper, const StepScalars* scalars,
                    void* stream) {
  check_step_arrays(arrays, hyper);
  if (arrays.params.count() == 0) {
    return;
  }
  auto* cuda_stream = static_cast<cudaStream_t>(stream);
  detail::visit_step_types(arrays.params.dtype(), arrays.grads.dtype(), [&](auto p, auto g) {
    using Param = decltype(p);
    using Grad = decltype(g);
    if (hyper.rule == UpdateRule::adamw) {
      launch_step<AdamWUpdate, Param, Grad>(arrays, AdamWUpdate{hyper.adamw}, scalars, cuda_stream);
    } else {
      launch_step<SgdUpdate, Param, Grad>(arrays, SgdUpdate{hyper.sgd}, scalars, cuda_stream);
    }
  });
}

void grad_stats(const TensorView& grads, GradStats* stats, void* stream) {
  if (grads.count() == 0) {
    return;
  }
  detail::visit_float_type(grads.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const auto* data = static_cast<const T*>(grads.data());
    const std::size_t count = grads.count();
    const bool vectorized = vector_aligned(data);
    const std::size_t work = vectorized ? count / kVector + count % kVector : count;
    constexpr auto kernel = grad_stats_kernel<T>;
    launch<kernel>("the gradient statistics", grid_for<kernel>(work), kThreads,
                   static_cast<cudaStream_t>(stream), data, count, vectorized, stats);
  });
}

void prepare_step(StepScalars* scalars, LossScalerState* scaler, const PrepareArgs& args,
                  void* stream) {
  launch<prepare_kernel>("the step's scalars", 1, 1, static_cast<cudaStream_t>(stream), scalars,
                         scaler, args);
}

void cast(const TensorView& from, const TensorView& to, void* stream) {
  COHORT_EXPECTS_EQ(from.count(), to.count(), "a cast needs views of the same count");
  if (from.count() == 0) {
    return;
  }
  detail::visit_float_type(from.dtype(), [&](auto from_tag) {
    detail::visit_float_type(to.dtype(), [&](auto to_tag) {
      using From = decltype(from_tag);
      using To = decltype(to_tag);
      const auto* input = static_cast<const From*>(from.data());
      auto* output = static_cast<To*>(to.data());
      const std::size_t count = from.count();
      const bool vectorized = vector_aligned(input) && vector_aligned(output);
      const std::size_t work = vectorized ? count / kVector + count % kVector : count;
      constexpr auto kernel = cast_kernel<From, To>;
      launch<kernel>("a cast", grid_for<kernel>(work), kThreads, static_cast<cudaStream_t>(stream),
                     input, output, count, vectorized);
    });
  });
}

void add(const TensorView& from, const TensorView& to, void* stream) {
  COHORT_EXPECTS_EQ(from.count(), to.count(), "an add needs views of the same count");
  COHORT_EXPECTS(from.dtype() == to.dtype(), "an add needs views of the same dtype");
  if (from.count() == 0) {
    return;
  }
  detail::visit_float_type(from.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const auto* input = static_cast<const T*>(from.data());
    auto* output = static_cast<T*>(to.data());
    const std::size_t count = from.count();
    const bool vectorized = vector_aligned(input) && vector_aligned(output);
    const std::size_t work = vectorized ? count / kVector + count % kVector : count;
    constexpr auto kernel = add_kernel<T>;
    launch<kernel>("an add", grid_for<kernel>(work), kThreads, static_cast<cudaStream_t>(stream),
                   input, output, count, vectorized);
  });
}

}  // namespace cuda
}  // namespace cohort::kernels
