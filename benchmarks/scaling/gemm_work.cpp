#include "scaling/gemm_work.hpp"

#include <cohort/core/error.hpp>

#if COHORT_WITH_CUDA
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#endif

#include <algorithm>
#include <cmath>
#include <string>

namespace scaling {

#if COHORT_WITH_CUDA
namespace {

constexpr int kSide = 1024;
constexpr int kMaxDepth = 4096;

void cublas_check(cublasStatus_t status, const char* what) {
  COHORT_CHECK(
      status == CUBLAS_STATUS_SUCCESS, cohort::Error,
      std::string(what) + " failed: cuBLAS status " + std::to_string(static_cast<int>(status)));
}

}  // namespace

struct GemmWork::Cuda {
  cublasHandle_t handle = nullptr;
  cohort::Buffer a, b, c;
  cudaDataType_t data = CUDA_R_32F;
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  ~Cuda() {
    if (handle != nullptr) cublasDestroy(handle);
  }
};
#else
struct GemmWork::Cuda {};
#endif

GemmWork::GemmWork(layers::Math& math, Precision precision) : math_(math), precision_(precision) {
  if (math.device().is_host()) {
    COHORT_EXPECTS(precision == Precision::fp32,
                   std::string("--precision ") + to_string(precision) +
                       ": real compute on host ranks is OpenBLAS, which computes in fp32 only");
    return;
  }
#if COHORT_WITH_CUDA
  cuda_ = std::make_unique<Cuda>();
  cublas_check(cublasCreate(&cuda_->handle), "cublasCreate");
  cublas_check(
      cublasSetStream(cuda_->handle, static_cast<cudaStream_t>(math.stream().native_handle())),
      "cublasSetStream");
  std::size_t element = 4;
  switch (precision) {
    case Precision::fp32:
      cuda_->compute = CUBLAS_COMPUTE_32F;
      break;
    case Precision::tf32:
      cuda_->compute = CUBLAS_COMPUTE_32F_FAST_TF32;
      break;
    case Precision::bf16:
      cuda_->data = CUDA_R_16BF;
      cuda_->compute = CUBLAS_COMPUTE_32F;
      element = 2;
      break;
    case Precision::fp16:
      cuda_->data = CUDA_R_16F;
      cuda_->compute = CUBLAS_COMPUTE_32F;
      element = 2;
      break;
  }
  cuda_->a = math.allocate_bytes(static_cast<std::size_t>(kSide) * kMaxDepth * element);
  cuda_->b = math.allocate_bytes(static_cast<std::size_t>(kSide) * kMaxDepth * element);
  cuda_->c = math.allocate_bytes(static_cast<std::size_t>(kSide) * kSide * element);
#endif
}

GemmWork::~GemmWork() = default;

void GemmWork::run(double flops) {
  if (math_.device().is_host()) {
    math_.gemm_work(flops);
    return;
  }
#if COHORT_WITH_CUDA
  const double per_unit_depth = 2.0 * kSide * kSide;
  if (flops < per_unit_depth * 8) return;  // below a few MFLOP: nothing worth launching
  const double depth_total = flops / per_unit_depth;
  const int repeats = static_cast<int>(std::ceil(depth_total / kMaxDepth));
  const int depth = std::max(8, static_cast<int>(std::lround(depth_total / repeats / 8.0)) * 8);
  const float alpha = 1.0f, beta = 0.0f;
  for (int i = 0; i < repeats; ++i) {
    cublas_check(cublasGemmEx(cuda_->handle, CUBLAS_OP_N, CUBLAS_OP_N, kSide, kSide, depth, &alpha,
                              cuda_->b.data(), cuda_->data, kSide, cuda_->a.data(), cuda_->data,
                              depth, &beta, cuda_->c.data(), cuda_->data, kSide, cuda_->compute,
                              CUBLAS_GEMM_DEFAULT),
                 "cublasGemmEx");
  }
#else
  (void)flops;
#endif
}

const char* GemmWork::describe(Precision precision, bool gpu) {
  if (!gpu) return "OpenBLAS FP32";
  switch (precision) {
    case Precision::fp32:
      return "cuBLAS FP32";
    case Precision::tf32:
      return "cuBLAS TF32 (FP32 data on tensor cores)";
    case Precision::bf16:
      return "cuBLAS BF16 on tensor cores, FP32 accumulation";
    case Precision::fp16:
      return "cuBLAS FP16 on tensor cores, FP32 accumulation";
  }
  return "?";
}

const char* to_string(Precision precision) {
  switch (precision) {
    case Precision::fp32:
      return "fp32";
    case Precision::tf32:
      return "tf32";
    case Precision::bf16:
      return "bf16";
    case Precision::fp16:
      return "fp16";
  }
  return "?";
}

}  // namespace scaling
