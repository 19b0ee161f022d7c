// The host loops of the kernels: the functors of optimizer_math.hpp over plain arrays. Built with
// -fno-math-errno (kernels/CMakeLists.txt) so that the compiler vectorizes sqrtf in the f32 step.

#include "dispatch.hpp"

#include <cohort/kernels/launch.hpp>

#include <cstddef>
#include <type_traits>

namespace cohort::kernels {
namespace {

template <typename T>
float to_float(T value) {
  if constexpr (std::is_same_v<T, float>) {
    return value;
  } else {
    return static_cast<float>(value);
  }
}

template <typename T>
T from_float(float value) {
  if constexpr (std::is_same_v<T, float>) {
    return value;
  } else {
    return T(value);
  }
}

// One loop per combination, with no test per element for arrays that are absent, so that the
// f32 loops vectorize.
template <bool kMaster, bool kState0, bool kState1, typename Update, typename Param, typename Grad>
void step_loop(Param* __restrict params, const Grad* __restrict grads, float* __restrict master,
               float* __restrict state0, float* __restrict state1, std::size_t count,
               const Update update, const StepScalars scalars) {
  const float multiplier = scalars.grad_multiplier;
  for (std::size_t i = 0; i < count; ++i) {
    float p;
    if constexpr (kMaster) {
      p = master[i];
    } else {
      p = to_float(params[i]);
    }
    const float g = to_float(grads[i]) * multiplier;
    float a = 0.0f;
    float b = 0.0f;
    if constexpr (kState0) {
      a = state0[i];
    }
    if constexpr (kState1) {
      b = state1[i];
    }
    update(p, g, a, b, scalars);
    if constexpr (kState0) {
      state0[i] = a;
    }
    if constexpr (kState1) {
      state1[i] = b;
    }
    if constexpr (kMaster) {
      master[i] = p;
    }
    params[i] = from_float<Param>(p);
  }
}

template <bool kMaster, typename Param, typename Grad>
void step_typed(const StepArrays& arrays, const UpdateHyper& hyper, const StepScalars& scalars) {
  auto* params = static_cast<Param*>(arrays.params.data());
  const auto* grads = static_cast<const Grad*>(arrays.grads.data());
  const std::size_t count = arrays.params.count();
  if (hyper.rule == UpdateRule::adamw) {
    step_loop<kMaster, true, true>(params, grads, arrays.master, arrays.state0, arrays.state1,
                                   count, AdamWUpdate{hyper.adamw}, scalars);
  } else if (arrays.state0 != nullptr) {
    step_loop<kMaster, true, false>(params, grads, arrays.master, arrays.state0, nullptr, count,
                                    SgdUpdate{hyper.sgd}, scalars);
  } else {
    step_loop<kMaster, false, false>(params, grads, arrays.master, nullptr, nullptr, count,
                                     SgdUpdate{hyper.sgd}, scalars);
  }
}

}  // namespace

void check_step_dtypes(DType params, DType grads) {
  detail::visit_step_types(params, grads, [](auto, auto) {});
}

void check_step_arrays(const StepArrays& arrays, const UpdateHyper& hyper) {
  COHORT_EXPECTS_EQ(arrays.params.count(), arrays.grads.count(),
                    "params and grads of an optimizer step must have the same count");
  detail::visit_step_types(arrays.params.dtype(), arrays.grads.dtype(), [](auto, auto) {});
  const bool needs_master = arrays.params.dtype() != DType::f32;
  COHORT_EXPECTS(!needs_master || arrays.params.count() == 0 || arrays.master != nullptr,
                 "16-bit params need fp32 master weights");
  COHORT_EXPECTS(needs_master || arrays.master == nullptr,
                 "f32 params are their own master weights");
  if (arrays.params.count() == 0) {
    return;
  }
  if (hyper.rule == UpdateRule::adamw) {
    COHORT_EXPECTS(arrays.state0 != nullptr && arrays.state1 != nullptr,
                   "AdamW needs both moments");
  } else {
    COHORT_EXPECTS((hyper.sgd.momentum != 0.0f) == (arrays.state0 != nullptr),
                   "SGD has a momentum buffer exactly when momentum is not 0");
  }
}

namespace host {

void optimizer_step(const StepArrays& arrays, const UpdateHyper& hyper,
                    const StepScalars& scalars) {
  check_step_arrays(arrays, hyper);
  if (scalars.skip != 0 || arrays.params.count() == 0) {
    return;
  }
  detail::visit_step_types(arrays.params.dtype(), arrays.grads.dtype(), [&](auto p, auto g) {
    using Param = decltype(p);
    using Grad = decltype(g);
    if constexpr (std::is_same_v<Param, float>) {
      step_typed<false, Param, Grad>(arrays, hyper, scalars);
    } else {
      step_typed<true, Param, Grad>(arrays, hyper, scalars);
    }
  });
}

GradStats grad_stats(const TensorView& grads) {
  GradStats stats;
  detail::visit_float_type(grads.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const auto* data = static_cast<const T*>(grads.data());
    // Blocks of float partial sums, added in double: the GPU kernel's precision, at host speed.
    constexpr std::size_t kBlock = 4096;
    for (std::size_t begin = 0; begin < grads.count(); begin += kBlock) {
      const std::size_t end = begin + kBlock < grads.count() ? begin + kBlock : grads.count();
      float partial = 0.0f;
      std::size_t nonfinite = 0;
      for (std::size_t i = begin; i < end; ++i) {
        const float value = to_float(data[i]);
        if (is_finite(value)) {
          partial += value * value;
        } else {
          ++nonfinite;
        }
      }
      stats.sum_of_squares += static_cast<double>(partial);
      stats.nonfinite += static_cast<double>(nonfinite);
    }
  });
  return stats;
}

void cast(const TensorView& from, const TensorView& to) {
  COHORT_EXPECTS_EQ(from.count(), to.count(), "a cast needs views of the same count");
  detail::visit_float_type(from.dtype(), [&](auto from_tag) {
    detail::visit_float_type(to.dtype(), [&](auto to_tag) {
      using From = decltype(from_tag);
      using To = decltype(to_tag);
      const auto* source = static_cast<const From*>(from.data());
      auto* destination = static_cast<To*>(to.data());
      for (std::size_t i = 0; i < from.count(); ++i) {
        destination[i] = from_float<To>(to_float(source[i]));
      }
    });
  });
}

void add(const TensorView& from, const TensorView& to) {
  COHORT_EXPECTS_EQ(from.count(), to.count(), "an add needs views of the same count");
  COHORT_EXPECTS(from.dtype() == to.dtype(), "an add needs views of the same dtype");
  detail::visit_float_type(from.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const auto* source = static_cast<const T*>(from.data());
    auto* destination = static_cast<T*>(to.data());
    for (std::size_t i = 0; i < from.count(); ++i) {
      destination[i] = from_float<T>(to_float(destination[i]) + to_float(source[i]));
    }
  });
}

}  // namespace host
}  // namespace cohort::kernels
