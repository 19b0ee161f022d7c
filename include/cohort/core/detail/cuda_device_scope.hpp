#pragma once

/// @file
/// `CudaDeviceScope`: makes a CUDA device current for a scope; `RelaxedCaptureScope`: the calling
/// thread in relaxed graph-capture mode for a scope. Only for code built with CUDA.

#include <cohort/core/detail/cuda_check.hpp>

#include <cuda_runtime_api.h>

namespace cohort::detail {

/// Whether the primary context of CUDA device `device` is active in this process
/// (cuDevicePrimaryCtxGetState, reached through the runtime's driver entry point, so nothing
/// links libcuda). False when the driver cannot tell. Never creates a context.
bool primary_context_active(int device) noexcept;

// Note [Restoring an unbound thread]
// A thread that never chose a device still answers 0 to cudaGetDevice: the runtime does not say
// whether 0 was set or is only the default. Setting a device creates its primary context (CUDA
// 12 and later), so putting back a 0 that was never chosen creates a context on GPU 0 (about
// 0.5 GiB) in the process of every rank that ran the scope on a fresh thread (the checkpoint
// writer, a thread that drops the last handle of an event, a user's thread). So a scope puts the
// previous device back only when that device's primary context is active in the process: a
// thread that chose device d with cudaSetDevice made d's context active then, so its choice is
// always restored, and a 0 that was only the default is restored when GPU 0 is in use anyway
// (no context is created) and otherwise left alone: the thread stays on the device the scope
// bound, which is the device cohort's work on it belongs to. PyTorch's device guard decides the
// same way (c10::cuda::MaybeSetDevice). A thread-local "bound by cohort" flag would not do: it
// cannot see a device the program chose itself, through CUDA or through another library.

/// Sets `device` current, putting the previous device back on exit (the thread's binding is
/// state the caller owns) unless that would create a context the process does not have (Note
/// [Restoring an unbound thread]).
class CudaDeviceScope {
 public:
  explicit CudaDeviceScope(int device) {
    COHORT_CUDA_TRY(cudaGetDevice(&previous_));
    if (previous_ != device) {
      COHORT_CUDA_TRY(cudaSetDevice(device));
      changed_ = true;
    }
  }
  ~CudaDeviceScope() {
    if (changed_ && primary_context_active(previous_)) {
      COHORT_CUDA_CHECK_NOEXCEPT(cudaSetDevice(previous_));
    }
  }
  CudaDeviceScope(const CudaDeviceScope&) = delete;
  CudaDeviceScope& operator=(const CudaDeviceScope&) = delete;

 private:
  int previous_ = 0;
  bool changed_ = false;
};

/// Puts the calling thread in cudaStreamCaptureModeRelaxed for the scope, so that a query made
/// in it neither fails nor invalidates a global-mode capture another thread is recording (Note
/// [Queries during a capture] in cohort/core/detail/query_status.hpp). Only for calls that are
/// no part of any capture.
class RelaxedCaptureScope {
 public:
  RelaxedCaptureScope() noexcept {
    changed_ = cudaThreadExchangeStreamCaptureMode(&mode_) == cudaSuccess;
  }
  ~RelaxedCaptureScope() {
    if (changed_) {
      (void)cudaThreadExchangeStreamCaptureMode(&mode_);
    }
  }
  RelaxedCaptureScope(const RelaxedCaptureScope&) = delete;
  RelaxedCaptureScope& operator=(const RelaxedCaptureScope&) = delete;

 private:
  cudaStreamCaptureMode mode_ = cudaStreamCaptureModeRelaxed;
  bool changed_ = false;
};

}  // namespace cohort::detail
