#pragma once

// Private to the kernels: the C++ types behind the dtypes a step supports, shared by the host
// loops and the CUDA launches.

#include <cohort/core/dtype.hpp>
#include <cohort/core/error.hpp>
#include <cohort/core/float16.hpp>

#include <string>

namespace cohort::kernels::detail {

/// Calls `fn(Param{}, Grad{})` for the supported pairs: grads in the params' dtype or in f32,
/// params in f32, bf16 or f16.
template <typename Fn>
void visit_step_types(DType param, DType grad, Fn&& fn) {
  const bool grad_f32 = grad == DType::f32;
  if (param == DType::f32 && grad_f32) {
    fn(float{}, float{});
  } else if (param == DType::bf16 && grad == DType::bf16) {
    fn(bfloat16{}, bfloat16{});
  } else if (param == DType::bf16 && grad_f32) {
    fn(bfloat16{}, float{});
  } else if (param == DType::f16 && grad == DType::f16) {
    fn(half{}, half{});
  } else if (param == DType::f16 && grad_f32) {
    fn(half{}, float{});
  } else {
    COHORT_FAIL(InvalidArgument,
                "an optimizer step takes f32, bf16 or f16 params with grads of "
                "the same dtype or f32, not " +
                    std::string(to_string(param)) + " params with " + std::string(to_string(grad)) +
                    " grads");
  }
}

/// Calls `fn(T{})` for f32, bf16 and f16.
template <typename Fn>
void visit_float_type(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::f32:
      fn(float{});
      return;
    case DType::bf16:
      fn(bfloat16{});
      return;
    case DType::f16:
      fn(half{});
      return;
    default:
      break;
  }
  COHORT_FAIL(InvalidArgument,
              "expected an f32, bf16 or f16 view, got " + std::string(to_string(dtype)));
}

}  // namespace cohort::kernels::detail
