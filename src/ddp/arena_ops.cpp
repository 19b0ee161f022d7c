#include "arena_ops.hpp"

#include <cohort/core/error.hpp>
#include <cohort/core/float16.hpp>

#if COHORT_WITH_CUDA
#include <cohort/core/detail/cuda_device_scope.hpp>
#include <cohort/kernels/launch.hpp>
#endif

namespace cohort::detail {

namespace {

bool supported_conversion(DType from, DType to) {
  const bool narrow = from == DType::f32 && (to == DType::bf16 || to == DType::f16);
  const bool widen = to == DType::f32 && (from == DType::bf16 || from == DType::f16);
  return narrow || widen;
}

template <typename From, typename To>
void convert_loop(const void* input, void* output, std::size_t count) {
  const auto* in = static_cast<const From*>(input);
  auto* out = static_cast<To*>(output);
  for (std::size_t i = 0; i < count; ++i) {
    out[i] = To(static_cast<float>(in[i]));
  }
}

void host_convert(const void* input, DType from, void* output, DType to, std::size_t count) {
  if (from == DType::f32 && to == DType::bf16) {
    convert_loop<float, bfloat16>(input, output, count);
  } else if (from == DType::f32 && to == DType::f16) {
    convert_loop<float, half>(input, output, count);
  } else if (from == DType::bf16) {
    convert_loop<bfloat16, float>(input, output, count);
  } else {
    convert_loop<half, float>(input, output, count);
  }
}

}  // namespace

void convert(TensorView input, TensorView output, const Stream& stream) {
  COHORT_EXPECTS_EQ(input.count(), output.count(), "convert needs views of equal counts");
  COHORT_EXPECTS(supported_conversion(input.dtype(), output.dtype()),
                 "no conversion from " + std::string(to_string(input.dtype())) + " to " +
                     std::string(to_string(output.dtype())));
  if (input.count() == 0) {
    return;
  }
  if (stream.device().is_host()) {
    stream.enqueue([in = input.data(), from = input.dtype(), out = output.data(),
                    to = output.dtype(),
                    count = input.count()] { host_convert(in, from, out, to, count); });
    return;
  }
#if COHORT_WITH_CUDA
  const CudaDeviceScope scope(stream.device().index());
  kernels::cuda::cast(input, output, stream.native_handle());
#else
  COHORT_FAIL(InvalidArgument, "cannot convert memory on " + stream.device().to_string() +
                                   ": cohort was built without CUDA");
#endif
}

}  // namespace cohort::detail
