#pragma once

/// @file
/// The kernels' entry points: each operation as a host loop (`kernels::host`, runs now on the
/// calling thread) and as a CUDA launch (`kernels::cuda`, enqueued on a `cudaStream_t` passed as
/// `void*`; only in builds with CUDA). Both run the same functors (optimizer_math.hpp), so a GPU
/// test only has to show that the two agree.
///
/// Views carry their dtype and element count. The CUDA entry points need device-accessible
/// memory; the host ones host-accessible memory.

#include <cohort/core/tensor_view.hpp>
#include <cohort/kernels/optimizer_math.hpp>

namespace cohort::kernels {

/// The arrays of one fused optimizer step; every array has `params.count()` elements.
struct StepArrays {
  TensorView params;        ///< f32, bf16 or f16
  TensorView grads;         ///< the params' dtype, or f32
  float* master = nullptr;  ///< fp32 master weights, for 16-bit params; null for f32 params
  float* state0 = nullptr;  ///< SGD momentum buffer (null without momentum), AdamW first moment
  float* state1 = nullptr;  ///< AdamW second moment
};

/// Throws InvalidArgument unless a step supports params and grads of these dtypes.
void check_step_dtypes(DType params, DType grads);

/// Throws InvalidArgument unless the arrays fit the rule: dtypes, counts, master and state.
void check_step_arrays(const StepArrays& arrays, const UpdateHyper& hyper);

namespace host {

/// One fused step: unless `scalars.skip`, for each element g = grads x grad_multiplier, the
/// update on the fp32 value (the master weight, or the f32 param), then the param written back.
void optimizer_step(const StepArrays& arrays, const UpdateHyper& hyper, const StepScalars& scalars);

/// Sum of squares of the finite values and count of non-finite ones (f32, bf16 or f16).
GradStats grad_stats(const TensorView& grads);

/// `to[i] = from[i]` converted (f32, bf16, f16 both ways; same dtype copies). Same counts.
void cast(const TensorView& from, const TensorView& to);

/// `to[i] += from[i]`, both f32, bf16 or f16 of one dtype, summed in f32 and rounded once. Same
/// counts. (Gradients reduce-scattered into a shard that accumulates them.)
void add(const TensorView& from, const TensorView& to);

}  // namespace host

namespace cuda {

/// As `host::optimizer_step`, reading the scalars from device memory when the kernel runs.
void optimizer_step(const StepArrays& arrays, const UpdateHyper& hyper, const StepScalars* scalars,
                    void* stream);

/// Adds the statistics of `grads` to `*stats` (device memory; zero it first).
void grad_stats(const TensorView& grads, GradStats* stats, void* stream);

/// `prepare_step` on one GPU thread; `scaler` may be null.
void prepare_step(StepScalars* scalars, LossScalerState* scaler, const PrepareArgs& args,
                  void* stream);

/// As `host::cast`, on the device.
void cast(const TensorView& from, const TensorView& to, void* stream);

/// As `host::add`, on the device.
void add(const TensorView& from, const TensorView& to, void* stream);

}  // namespace cuda
}  // namespace cohort::kernels
