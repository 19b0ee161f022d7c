// layers::Math: cuBLAS and the kernels of math_kernels.cu on a GPU; OpenBLAS and loops, enqueued
// on the host stream, on the host.

#include <layers/host_blas.hpp>
#include <layers/math.hpp>

#include "random.hpp"

#include <cohort/core/error.hpp>
#include <cohort/core/float16.hpp>
#include <cohort/memory/device_pool.hpp>
#include <cohort/memory/host_resource.hpp>

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#if COHORT_WITH_CUDA
#include "math_kernels.hpp"

#include <cohort/core/detail/cuda_device_scope.hpp>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#endif

namespace layers {

#if COHORT_WITH_CUDA
namespace {

void cublas_try(cublasStatus_t status, const char* call) {
  COHORT_CHECK(status == CUBLAS_STATUS_SUCCESS, cohort::CudaError,
               std::string(call) + " failed: " + cublasGetStatusName(status) + ": " +
                   cublasGetStatusString(status));
}

void cuda_try(cudaError_t error, const char* call) {
  COHORT_CHECK(
      error == cudaSuccess, cohort::CudaError,
      std::string(call) + " failed: " + cudaGetErrorName(error) + ": " + cudaGetErrorString(error));
}

cublasOperation_t as_cublas(Transpose transpose) {
  return transpose == Transpose::yes ? CUBLAS_OP_T : CUBLAS_OP_N;
}

}  // namespace

// Note [Layers keep the caller's device]
// Math binds its stream's device for each call that reaches CUDA or cuBLAS, and puts the
// caller's device back after it (cohort::detail::CudaDeviceScope): a layer built or run for one
// GPU never leaves the calling thread on that GPU, and works whichever device the caller has
// current. The cuDNN layers (cnn_cudnn.cpp) do the same.
struct Math::Cuda {
  int device = 0;
  cublasHandle_t handle = nullptr;
  cudaStream_t stream = nullptr;
  ~Cuda() {
    if (handle != nullptr) {
      const cohort::detail::CudaDeviceScope scope(device);
      cublasDestroy(handle);
    }
  }
};
#else
struct Math::Cuda {};
#endif

namespace {

CBLAS_TRANSPOSE as_cblas(Transpose transpose) {
  return transpose == Transpose::yes ? CblasTrans : CblasNoTrans;
}

// The GEMM shape gemm_work repeats: [side, side] x [side, k], k at most kMaxDepth.
constexpr int kMaxDepth = 4096;

}  // namespace

Math::Math(cohort::Stream stream) : stream_(std::move(stream)) {
  if (device().is_host()) {
    use_one_blas_thread();  // Note [OpenBLAS kernels] in host_blas.cpp
    resource_ = std::make_shared<cohort::HostResource>();
    return;
  }
#if COHORT_WITH_CUDA
  cohort::DevicePoolOptions options;
  options.device = device().index();
  resource_ = cohort::make_device_pool_resource(options);
  cuda_ = std::make_unique<Cuda>();
  cuda_->device = device().index();
  // Note [Layers keep the caller's device]
  const cohort::detail::CudaDeviceScope scope(cuda_->device);
  cublas_try(cublasCreate(&cuda_->handle), "cublasCreate");
  cuda_->stream = static_cast<cudaStream_t>(stream_.native_handle());
  cublas_try(cublasSetStream(cuda_->handle, cuda_->stream), "cublasSetStream");
#else
  COHORT_FAIL(cohort::InvalidArgument,
              "layers::Math on " + device().to_string() + ": this build has no CUDA");
#endif
}

Math::~Math() = default;

const char* to_string(MathMode mode) noexcept {
  return mode == MathMode::tf32 ? "tf32" : "fp32";
}

void Math::set_math_mode(MathMode mode) {
  mode_ = mode;
#if COHORT_WITH_CUDA
  if (cuda_) {
    // cublasSgemm follows the handle's math mode: TF32 tensor cores only when asked for.
    cublas_try(cublasSetMathMode(cuda_->handle, mode == MathMode::tf32 ? CUBLAS_TF32_TENSOR_OP_MATH
                                                                       : CUBLAS_DEFAULT_MATH),
               "cublasSetMathMode");
  }
#endif
}

cohort::Buffer Math::allocate_floats(std::size_t count, cohort::MemoryCategory category) {
  return allocate_bytes(count * sizeof(float), category);
}

cohort::Buffer Math::allocate_scratch(std::size_t bytes) {
  return cohort::Buffer(resource_, bytes, stream_, cohort::MemoryCategory::activations);
}

cohort::Buffer Math::allocate_bytes(std::size_t bytes, cohort::MemoryCategory category) {
  cohort::Buffer buffer(resource_, std::max<std::size_t>(bytes, 16), category);
  if (device().is_host()) {
    std::memset(buffer.data(), 0, buffer.size_bytes());
  } else {
#if COHORT_WITH_CUDA
    const cohort::detail::CudaDeviceScope scope(cuda_->device);
    cuda_try(cudaMemsetAsync(buffer.data(), 0, buffer.size_bytes(), cuda_->stream),
             "cudaMemsetAsync");  // on this stream: later copies on it come after
#endif
  }
  return buffer;
}

void Math::gemm(Transpose transpose_a, Transpose transpose_b, int m, int n, int k, float alpha,
                const float* a, const float* b, float beta, float* c) {
  const int lda = transpose_a == Transpose::yes ? m : k;
  const int ldb = transpose_b == Transpose::yes ? k : n;
  if (device().is_host()) {
    stream_.enqueue([=] {
      cblas_sgemm(CblasRowMajor, as_cblas(transpose_a), as_cblas(transpose_b), m, n, k, alpha, a,
                  lda, b, ldb, beta, c, n);
    });
    return;
  }
#if COHORT_WITH_CUDA
  const cohort::detail::CudaDeviceScope scope(cuda_->device);
  // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: swap the operands.
  cublas_try(cublasSgemm(cuda_->handle, as_cublas(transpose_b), as_cublas(transpose_a), n, m, k,
                         &alpha, b, ldb, a, lda, &beta, c, n),
             "cublasSgemm");
#endif
}

void Math::bias_activation(float* y, const float* bias, int rows, int cols, bool relu) {
  if (device().is_host()) {
    stream_.enqueue([=] {
      for (int r = 0; r < rows; ++r) {
        float* row = y + static_cast<std::size_t>(r) * static_cast<std::size_t>(cols);
        for (int col = 0; col < cols; ++col) {
          const float value = row[col] + bias[col];
          row[col] = relu && value < 0.0f ? 0.0f : value;
        }
      }
    });
    return;
  }
#if COHORT_WITH_CUDA
  const cohort::detail::CudaDeviceScope scope(cuda_->device);
  kernels::bias_activation(y, bias, rows, cols, relu, cuda_->stream);
#endif
}

void Math::relu_backward(float* grad, const float* activation, std::size_t count) {
  if (device().is_host()) {
    stream_.enqueue([=] {
      for (std::size_t i = 0; i < count; ++i) {
        if (activation[i] <= 0.0f) grad[i] = 0.0f;
      }
    });
    return;
  }
#if COHORT_WITH_CUDA
  const cohort::detail::CudaDeviceScope scope(cuda_->device);
  kernels::relu_backward(grad, activation, count, cuda_->stream);
#endif
}

void Math::column_sums(const float* x, int rows, int cols, float* out) {
  if (device().is_host()) {
    stream_.enqueue([=] {
      std::fill(out, out + cols, 0.0f);
      for (int r = 0; r < rows; ++r) {
        const float* row = x + static_cast<std::size_t>(r) * static_cast<std::size_t>(cols);
        for (int col = 0; col < cols; ++col) out[col] += row[col];
      }
    });
    return;
  }
#if COHORT_WITH_CUDA
  const cohort::detail::CudaDeviceScope scope(cuda_->device);
  kernels::column_sums(x, rows, cols, out, cuda_->stream);
#endif
}

void Math::softmax_cross_entropy(const float* logits, const std::int32_t* labels, int rows,
                                 int classes, float grad_scale, float* grad_logits, double* stats) {
  if (device().is_host()) {
    stream_.enqueue([=] {
      for (int r = 0; r < rows; ++r) {
        const float* row = logits + static_cast<std::size_t>(r) * static_cast<std::size_t>(classes);
        const int best = static_cast<int>(std::max_element(row, row + classes) - row);
        const float top = row[best];
        float total = 0.0f;
        for (int c = 0; c < classes; ++c) total += std::exp(row[c] - top);
        const int label = labels[r];
        stats[0] += static_cast<double>(std::log(total) - (row[label] - top));
        if (best == label) stats[1] += 1.0;
        if (grad_logits == nullptr) continue;
        float* grad = grad_logits + static_cast<std::size_t>(r) * static_cast<std::size_t>(classes);
        for (int c = 0; c < classes; ++c) {
          const float p = std::exp(row[c] - top) / total;
          grad[c] = (p - (c == label ? 1.0f : 0.0f)) * grad_scale;
        }
      }
    });
    return;
  }
#if COHORT_WITH_CUDA
  const cohort::detail::CudaDeviceScope scope(cuda_->device);
  kernels::softmax_cross_entropy(logits, labels, rows, classes, grad_scale, grad_logits, stats,
                                 cuda_->stream);
#endif
}

void Math::cast(const cohort::TensorView& from, const cohort::TensorView& to) {
  COHORT_EXPECTS(from.count() == to.count(), "cast between views of " +
                                                 std::to_string(from.count()) + " and " +
                                                 std::to_string(to.count()) + " elements");
  const std::size_t count = from.count();
  const bool f32_to_bf16 = from.dtype() == cohort::DType::f32 && to.dtype() == cohort::DType::bf16;
  const bool bf16_to_f32 = from.dtype() == cohort::DType::bf16 && to.dtype() == cohort::DType::f32;
  COHORT_EXPECTS(f32_to_bf16 || bf16_to_f32 || from.dtype() == to.dtype(),
                 "layers::Math::cast supports f32 <-> bf16 and copies");
  void* destination = to.data();
  const void* source = from.data();
  if (device().is_host()) {
    const std::size_t bytes = from.bytes();
    stream_.enqueue([=] {
      if (f32_to_bf16) {
        const auto* in = static_cast<const float*>(source);
        auto* out = static_cast<cohort::bfloat16*>(destination);
        for (std::size_t i = 0; i < count; ++i) out[i] = cohort::bfloat16(in[i]);
      } else if (bf16_to_f32) {
        const auto* in = static_cast<const cohort::bfloat16*>(source);
        auto* out = static_cast<float*>(destination);
        for (std::size_t i = 0; i < count; ++i) out[i] = static_cast<float>(in[i]);
      } else {
        std::memcpy(destination, source, bytes);
      }
    });
    return;
  }
#if COHORT_WITH_CUDA
  const cohort::detail::CudaDeviceScope scope(cuda_->device);
  if (f32_to_bf16) {
    kernels::f32_to_bf16(static_cast<const float*>(source),
                         static_cast<std::uint16_t*>(destination), count, cuda_->stream);
  } else if (bf16_to_f32) {
    kernels::bf16_to_f32(static_cast<const std::uint16_t*>(source),
                         static_cast<float*>(destination), count, cuda_->stream);
  } else {
    cuda_try(
        cudaMemcpyAsync(destination, source, from.bytes(), cudaMemcpyDeviceToDevice, cuda_->stream),
        "cudaMemcpyAsync");
  }
#endif
}

void Math::zero(void* data, std::size_t bytes) {
  if (device().is_host()) {
    stream_.enqueue([=] { std::memset(data, 0, bytes); });
    return;
  }
#if COHORT_WITH_CUDA
  const cohort::detail::CudaDeviceScope scope(cuda_->device);
  cuda_try(cudaMemsetAsync(data, 0, bytes, cuda_->stream), "cudaMemsetAsync");
#endif
}

void Math::upload(void* device_destination, const void* host_source, std::size_t bytes) {
  if (device().is_host()) {
    stream_.enqueue([=] { std::memcpy(device_destination, host_source, bytes); });
    stream_.synchronize();
    return;
  }
#if COHORT_WITH_CUDA
  const cohort::detail::CudaDeviceScope scope(cuda_->device);
  cuda_try(cudaMemcpyAsync(device_destination, host_source, bytes, cudaMemcpyHostToDevice,
                           cuda_->stream),
           "cudaMemcpyAsync");
  stream_.synchronize();
#endif
}

void Math::download(void* host_destination, const void* device_source, std::size_t bytes) {
  if (device().is_host()) {
    stream_.enqueue([=] { std::memcpy(host_destination, device_source, bytes); });
    stream_.synchronize();
    return;
  }
#if COHORT_WITH_CUDA
  const cohort::detail::CudaDeviceScope scope(cuda_->device);
  cuda_try(cudaMemcpyAsync(host_destination, device_source, bytes, cudaMemcpyDeviceToHost,
                           cuda_->stream),
           "cudaMemcpyAsync");
  stream_.synchronize();
#endif
}

void Math::upload_values(const cohort::TensorView& destination, std::span<const float> values) {
  COHORT_EXPECTS_EQ(destination.count(), values.size(), "upload_values: the sizes differ");
  if (destination.dtype() == cohort::DType::f32) {
    upload(destination.data(), values.data(), destination.bytes());
    return;
  }
  COHORT_EXPECTS(destination.dtype() == cohort::DType::bf16, "upload_values: f32 or bf16 only");
  std::vector<cohort::bfloat16> rounded(values.size());
  std::transform(values.begin(), values.end(), rounded.begin(),
                 [](float value) { return cohort::bfloat16(value); });
  upload(destination.data(), rounded.data(), destination.bytes());
}

std::vector<float> Math::download_values(const cohort::TensorView& source) {
  std::vector<float> values(source.count());
  if (source.dtype() == cohort::DType::f32) {
    download(values.data(), source.data(), source.bytes());
    return values;
  }
  COHORT_EXPECTS(source.dtype() == cohort::DType::bf16, "download_values: f32 or bf16 only");
  std::vector<cohort::bfloat16> raw(source.count());
  download(raw.data(), source.data(), source.bytes());
  std::transform(raw.begin(), raw.end(), values.begin(),
                 [](cohort::bfloat16 value) { return static_cast<float>(value); });
  return values;
}

GemmWorkShape gemm_work_shape(double flops) noexcept {
  // [side, side] x [side, depth] products; a smaller side for small layers.
  GemmWorkShape shape;
  shape.side = flops >= 2.0 * 1024 * 1024 * 256 ? 1024 : 256;
  const double per_unit_depth = 2.0 * shape.side * shape.side;
  if (flops < per_unit_depth * 8) return shape;  // below a few MFLOP: nothing worth launching
  const double depth_total = flops / per_unit_depth;
  shape.repeats = static_cast<int>(std::ceil(depth_total / kMaxDepth));
  shape.depth = std::max(8, static_cast<int>(std::lround(depth_total / shape.repeats / 8.0)) * 8);
  return shape;
}

void Math::fill_uniform(const cohort::TensorView& destination, float bound, std::uint64_t seed) {
  std::vector<float> values(destination.count());
  detail::Generator generator(seed);
  for (float& value : values) {
    value = static_cast<float>((2.0 * generator.uniform() - 1.0) * static_cast<double>(bound));
  }
  upload_values(destination, values);
}

void Math::gemm_work(double flops) {
  const GemmWorkShape shape = gemm_work_shape(flops);
  if (shape.repeats == 0) return;
  if (work_a_.empty()) {
    // Real values, not zeros: a GEMM of zeros can run faster, and draws less power.
    const std::size_t operand = static_cast<std::size_t>(1024) * kMaxDepth;
    work_a_ = allocate_floats(operand);
    work_b_ = allocate_floats(operand);
    work_c_ = allocate_floats(static_cast<std::size_t>(1024) * 1024);
    fill_uniform(cohort::TensorView(work_a_.data(), operand, cohort::DType::f32, device()), 1.0f,
                 1);
    fill_uniform(cohort::TensorView(work_b_.data(), operand, cohort::DType::f32, device()), 1.0f,
                 2);
  }
  const auto* a = static_cast<const float*>(work_a_.data());
  const auto* b = static_cast<const float*>(work_b_.data());
  auto* c = static_cast<float*>(work_c_.data());
  const int side = shape.side;
  const int depth = shape.depth;
  for (int i = 0; i < shape.repeats; ++i) {
    if (device().is_host()) {
      gemm(Transpose::no, Transpose::no, side, side, depth, 1.0f, a, b, 0.0f, c);
      continue;
    }
#if COHORT_WITH_CUDA
    const cohort::detail::CudaDeviceScope scope(cuda_->device);
    const float alpha = 1.0f, beta = 0.0f;
    cublas_try(
        cublasGemmEx(cuda_->handle, CUBLAS_OP_N, CUBLAS_OP_N, side, side, depth, &alpha, b,
                     CUDA_R_32F, side, a, CUDA_R_32F, depth, &beta, c, CUDA_R_32F, side,
                     mode_ == MathMode::tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F,
                     CUBLAS_GEMM_DEFAULT),
        "cublasGemmEx");
#endif
  }
}

void Math::simulate(std::chrono::nanoseconds duration) {
  if (duration.count() <= 0) return;
  if (device().is_host()) {
    stream_.enqueue([duration] { std::this_thread::sleep_for(duration); });
    return;
  }
#if COHORT_WITH_CUDA
  const cohort::detail::CudaDeviceScope scope(cuda_->device);
  kernels::spin(static_cast<std::uint64_t>(duration.count()), cuda_->stream);
#endif
}

}  // namespace layers
