#pragma once

/// @file
/// Global gradient-norm clipping, fused into the optimizer step.
///
///     cohort::GradNorm norm = cohort::clip_grad_norm(optimizer, 1.0f);
///     optimizer.step();                 // gradients scaled by min(1, 1 / (norm + 1e-6))
///     if (log) std::cout << norm.value();

#include <cohort/optim/optimizer.hpp>

namespace cohort {

/// Computes the L2 norm of all the optimizer's gradients across all ranks (sum of squares
/// all-reduced; unscaled by the attached loss scaler), in stream order, and makes the next
/// `optimizer.step()` multiply the gradients by max_norm / (norm + 1e-6) when the norm exceeds
/// `max_norm` (PyTorch's `clip_grad_norm_`). The gradients themselves are not written. For a
/// ZeRO-1 optimizer the gradients are reduce-scattered first (the norm is of the averaged
/// gradients). Returns the norm as a handle; reading it waits for the stream.
/// @throws InvalidArgument when max_norm is not positive.
inline GradNorm clip_grad_norm(Optimizer& optimizer, float max_norm) {
  return optimizer.clip_grad_norm(max_norm);
}

}  // namespace cohort
