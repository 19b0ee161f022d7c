// layers::CnnOps on a GPU: cuDNN's convolutions (algorithms from cuDNN's heuristics, chosen once
// per shape, dtype and math mode, Note [Convolution algorithms]), batch norm, activation, tensor
// add and pooling, on the Math's stream, with workspaces from the Math's device pool.

#include "cnn_device.hpp"

#include <cohort/core/detail/cuda_device_scope.hpp>
#include <cohort/core/error.hpp>

#include <cudnn.h>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <tuple>

namespace layers {
namespace {

void cudnn_try(cudnnStatus_t status, const char* call) {
  COHORT_CHECK(status == CUDNN_STATUS_SUCCESS, cohort::CudaError,
               std::string(call) + " failed: " + cudnnGetErrorString(status));
}
#define LAYERS_CUDNN_TRY(call) cudnn_try((call), #call)

cudnnTensorFormat_t format_of(Layout layout) {
  return layout == Layout::nchw ? CUDNN_TENSOR_NCHW : CUDNN_TENSOR_NHWC;
}

cudnnDataType_t data_type_of(cohort::DType dtype) {
  return dtype == cohort::DType::bf16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT;
}

/// An owned cuDNN tensor descriptor.
class Tensor {
 public:
  Tensor(const Shape4& shape, Layout layout, cudnnDataType_t type = CUDNN_DATA_FLOAT) {
    LAYERS_CUDNN_TRY(cudnnCreateTensorDescriptor(&desc_));
    LAYERS_CUDNN_TRY(cudnnSetTensor4dDescriptor(desc_, format_of(layout), type, shape.n, shape.c,
                                                shape.h, shape.w));
  }
  ~Tensor() { cudnnDestroyTensorDescriptor(desc_); }
  Tensor(const Tensor&) = delete;
  Tensor& operator=(const Tensor&) = delete;
  cudnnTensorDescriptor_t get() const noexcept { return desc_; }

 private:
  cudnnTensorDescriptor_t desc_ = nullptr;
};

/// A flat f32 vector as a [1, 1, 1, count] tensor, for element-wise operations.
Tensor flat(std::size_t count) {
  COHORT_EXPECTS(count <= 0x7fffffff,
                 "cuDNN element-wise operations take fewer than 2^31 elements");
  return Tensor({1, 1, 1, static_cast<int>(count)}, Layout::nchw);
}

// Note [Convolution algorithms]
// Each convolution shape is planned once: cuDNN's heuristics (the _v7 queries) rank every
// algorithm for each direction (forward, backward data, backward filter), and the plan takes the
// first that (1) runs (status success), (2) computes in the Math's mode, and (3) needs at most
// CnnOps::kWorkspaceLimitBytes of workspace. (2): in fp32 mode the descriptor asks for
// CUDNN_FMA_MATH and only FMA algorithms are taken, so no TF32 creeps in; in tf32 mode the
// descriptor allows tensor cores (cuDNN's default math), as PyTorch's allow_tf32 does; bf16 data
// runs on tensor cores. (3): FFT and Winograd variants can ask for gigabytes, which the device
// pool would then hold for the whole run. Each direction keeps its own convolution descriptor,
// set to the math type cuDNN reported for the algorithm chosen: an algorithm runs with the math
// type it was ranked for, and the three directions may choose differently.

/// The descriptors and algorithms of one convolution shape and dtype, found once.
struct ConvPlan {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  // One per direction, each with the math type of its algorithm (Note [Convolution algorithms]).
  cudnnConvolutionDescriptor_t forward_conv = nullptr, data_conv = nullptr, filter_conv = nullptr;
  cudnnConvolutionFwdAlgo_t forward{};
  cudnnConvolutionBwdDataAlgo_t backward_data{};
  cudnnConvolutionBwdFilterAlgo_t backward_filter{};
  std::size_t forward_bytes = 0, backward_data_bytes = 0, backward_filter_bytes = 0;
  ConvPlan() = default;
  ConvPlan(const ConvPlan&) = delete;
  ConvPlan& operator=(const ConvPlan&) = delete;
  ~ConvPlan() {
    cudnnDestroyTensorDescriptor(x);
    cudnnDestroyTensorDescriptor(y);
    cudnnDestroyFilterDescriptor(w);
    cudnnDestroyConvolutionDescriptor(forward_conv);
    cudnnDestroyConvolutionDescriptor(data_conv);
    cudnnDestroyConvolutionDescriptor(filter_conv);
  }
};

/// The math type a convolution descriptor asks for: FMA only for f32 in fp32 mode, tensor cores
/// (TF32) allowed for f32 in tf32 mode, tensor cores for bf16.
cudnnMathType_t requested_math(cohort::DType dtype, MathMode mode) {
  if (dtype == cohort::DType::bf16) return CUDNN_TENSOR_OP_MATH;
  return mode == MathMode::tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
}

/// The first algorithm cuDNN's heuristics rank that runs, computes as `requested` allows and fits
/// the workspace limit (Note [Convolution algorithms]).
template <typename Perf>
Perf first_usable(const Perf* results, int count, cudnnMathType_t requested, const char* what,
                  const std::string& shape) {
  std::size_t smallest_over = 0;
  for (int i = 0; i < count; ++i) {
    const Perf& perf = results[i];
    if (perf.status != CUDNN_STATUS_SUCCESS) continue;
    if (requested == CUDNN_FMA_MATH && perf.mathType != CUDNN_FMA_MATH) continue;
    if (perf.memory > CnnOps::kWorkspaceLimitBytes) {
      smallest_over = smallest_over == 0 ? perf.memory : std::min(smallest_over, perf.memory);
      continue;
    }
    return perf;
  }
  std::ostringstream message;
  message << "cuDNN offers no usable " << what << " algorithm for " << shape << " in "
          << (requested == CUDNN_FMA_MATH ? "FP32 FMA math" : "this math mode")
          << " within the workspace limit of " << (CnnOps::kWorkspaceLimitBytes >> 20) << " MiB";
  if (smallest_over > 0) message << " (the smallest needs " << (smallest_over >> 20) << " MiB)";
  COHORT_FAIL(cohort::CudaError, message.str());
}

/// A convolution descriptor for `g`, with `math` as its math type.
cudnnConvolutionDescriptor_t make_conv(const ConvGeometry& g, cudnnMathType_t math) {
  cudnnConvolutionDescriptor_t conv = nullptr;
  LAYERS_CUDNN_TRY(cudnnCreateConvolutionDescriptor(&conv));
  // f32 accumulation for both dtypes.
  LAYERS_CUDNN_TRY(cudnnSetConvolution2dDescriptor(conv, g.padding, g.padding, g.stride, g.stride,
                                                   1, 1, CUDNN_CROSS_CORRELATION,
                                                   CUDNN_DATA_FLOAT));
  LAYERS_CUDNN_TRY(cudnnSetConvolutionMathType(conv, math));
  return conv;
}

class CudnnOps final : public DeviceCnnOps {
 public:
  /// Made, used and destroyed with `math`'s device current (OnMathDevice, below).
  CudnnOps(Math& math, Layout layout) : math_(&math), layout_(layout) {
    LAYERS_CUDNN_TRY(cudnnCreate(&handle_));
    LAYERS_CUDNN_TRY(
        cudnnSetStream(handle_, static_cast<cudaStream_t>(math.stream().native_handle())));
    LAYERS_CUDNN_TRY(cudnnCreateActivationDescriptor(&relu_));
    LAYERS_CUDNN_TRY(
        cudnnSetActivationDescriptor(relu_, CUDNN_ACTIVATION_RELU, CUDNN_NOT_PROPAGATE_NAN, 0.0));
    LAYERS_CUDNN_TRY(cudnnCreatePoolingDescriptor(&pool_));
  }
  ~CudnnOps() override {
    cudnnDestroyPoolingDescriptor(pool_);
    cudnnDestroyActivationDescriptor(relu_);
    cudnnDestroy(handle_);
  }
  CudnnOps(const CudnnOps&) = delete;
  CudnnOps& operator=(const CudnnOps&) = delete;

  void conv_forward(const ConvGeometry& g, const cohort::TensorView& x, const cohort::TensorView& w,
                    const cohort::TensorView& y) override {
    ConvPlan& plan = plan_for(g, x.dtype());
    void* workspace = workspace_of(plan.forward_bytes);
    LAYERS_CUDNN_TRY(cudnnConvolutionForward(handle_, &kOne, plan.x, x.data(), plan.w, w.data(),
                                             plan.forward_conv, plan.forward, workspace,
                                             plan.forward_bytes, &kZero, plan.y, y.data()));
  }

  void conv_backward_data(const ConvGeometry& g, const cohort::TensorView& dy,
                          const cohort::TensorView& w, const cohort::TensorView& dx) override {
    ConvPlan& plan = plan_for(g, dy.dtype());
    void* workspace = workspace_of(plan.backward_data_bytes);
    LAYERS_CUDNN_TRY(cudnnConvolutionBackwardData(
        handle_, &kOne, plan.w, w.data(), plan.y, dy.data(), plan.data_conv, plan.backward_data,
        workspace, plan.backward_data_bytes, &kZero, plan.x, dx.data()));
  }

  void conv_backward_filter(const ConvGeometry& g, const cohort::TensorView& x,
                            const cohort::TensorView& dy, const cohort::TensorView& dw) override {
    ConvPlan& plan = plan_for(g, x.dtype());
    void* workspace = workspace_of(plan.backward_filter_bytes);
    LAYERS_CUDNN_TRY(cudnnConvolutionBackwardFilter(
        handle_, &kOne, plan.x, x.data(), plan.y, dy.data(), plan.filter_conv, plan.backward_filter,
        workspace, plan.backward_filter_bytes, &kZero, plan.w, dw.data()));
  }

  /// Calls `fn(g, data, parameters, offset, stats)` for each group of `group` samples: the
  /// group's tensor and per-channel parameter descriptors, the group's first element and its
  /// first saved statistic.
  template <typename Fn>
  void for_each_group(const Shape4& shape, int group, Fn&& fn) const {
    const Shape4 part{group, shape.c, shape.h, shape.w};
    const Tensor data(part, layout_);
    const Tensor parameters({1, shape.c, 1, 1}, Layout::nchw);
    for (int g = 0; g < shape.n / group; ++g) {
      fn(g, data, parameters, static_cast<std::size_t>(g) * part.count(),
         static_cast<std::size_t>(g * shape.c));
    }
  }

  // Batch norm over groups: one cuDNN call per group of samples, which are contiguous in both
  // layouts; the parameter gradients accumulate over the groups (beta 1 after the first).
  void batch_norm_forward(const Shape4& shape, int group, const float* x, const float* gamma,
                          const float* beta, float* y, float* saved_mean,
                          float* saved_inv_std) override {
    for_each_group(
        shape, group,
        [&](int, const Tensor& data, const Tensor& parameters, std::size_t offset,
            std::size_t stats) {
          LAYERS_CUDNN_TRY(cudnnBatchNormalizationForwardTraining(
              handle_, CUDNN_BATCHNORM_SPATIAL, &kOne, &kZero, data.get(), x + offset, data.get(),
              y + offset, parameters.get(), gamma, beta, 1.0, nullptr, nullptr,
              double{CnnOps::kBatchNormEpsilon}, saved_mean + stats, saved_inv_std + stats));
        });
  }

  void batch_norm_backward(const Shape4& shape, int group, const float* x, const float* dy,
                           const float* gamma, const float* saved_mean, const float* saved_inv_std,
                           float* dx, float* dgamma, float* dbeta) override {
    for_each_group(
        shape, group,
        [&](int g, const Tensor& data, const Tensor& parameters, std::size_t offset,
            std::size_t stats) {
          LAYERS_CUDNN_TRY(cudnnBatchNormalizationBackward(
              handle_, CUDNN_BATCHNORM_SPATIAL, &kOne, &kZero, &kOne, g == 0 ? &kZero : &kOne,
              data.get(), x + offset, data.get(), dy + offset, data.get(), dx + offset,
              parameters.get(), gamma, dgamma, dbeta, double{CnnOps::kBatchNormEpsilon},
              saved_mean + stats, saved_inv_std + stats));
        });
  }

  void relu(const float* x, float* y, std::size_t count) override {
    const Tensor all = flat(count);
    LAYERS_CUDNN_TRY(
        cudnnActivationForward(handle_, relu_, &kOne, all.get(), x, &kZero, all.get(), y));
  }

  void add_into(const float* a, float* out, std::size_t count) override {
    const Tensor all = flat(count);
    LAYERS_CUDNN_TRY(cudnnAddTensor(handle_, &kOne, all.get(), a, &kOne, all.get(), out));
  }

  void global_average_pool(const Shape4& shape, const float* x, float* y) override {
    LAYERS_CUDNN_TRY(cudnnSetPooling2dDescriptor(pool_, CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING,
                                                 CUDNN_NOT_PROPAGATE_NAN, shape.h, shape.w, 0, 0,
                                                 shape.h, shape.w));
    const Tensor input(shape, layout_);
    const Tensor pooled({shape.n, shape.c, 1, 1}, layout_);
    LAYERS_CUDNN_TRY(
        cudnnPoolingForward(handle_, pool_, &kOne, input.get(), x, &kZero, pooled.get(), y));
  }

  void global_average_pool_backward(const Shape4& shape, const float* dy, float* dx) override {
    // dx = dy / (h w), broadcast over h and w: cudnnAddTensor broadcasts dimensions of size 1.
    const Tensor pooled({shape.n, shape.c, 1, 1}, layout_);
    const Tensor input(shape, layout_);
    const float scale = 1.0f / static_cast<float>(shape.h * shape.w);
    LAYERS_CUDNN_TRY(cudnnAddTensor(handle_, &scale, pooled.get(), dy, &kZero, input.get(), dx));
  }

 private:
  static constexpr float kOne = 1.0f;
  static constexpr float kZero = 0.0f;

  ConvPlan& plan_for(const ConvGeometry& g, cohort::DType dtype) {
    const MathMode mode = math_->math_mode();
    const auto key =
        std::make_tuple(g.input.n, g.input.c, g.input.h, g.input.w, g.filters, g.kernel, g.stride,
                        g.padding, static_cast<int>(dtype), static_cast<int>(mode));
    auto found = plans_.find(key);
    if (found != plans_.end()) return *found->second;
    // Kept only when complete: a shape that cannot be planned throws again next time.
    auto planned = std::make_unique<ConvPlan>();
    ConvPlan& plan = *planned;
    const cudnnDataType_t type = data_type_of(dtype);
    const Shape4 out = g.output();
    LAYERS_CUDNN_TRY(cudnnCreateTensorDescriptor(&plan.x));
    LAYERS_CUDNN_TRY(cudnnSetTensor4dDescriptor(plan.x, format_of(layout_), type, g.input.n,
                                                g.input.c, g.input.h, g.input.w));
    LAYERS_CUDNN_TRY(cudnnCreateTensorDescriptor(&plan.y));
    LAYERS_CUDNN_TRY(
        cudnnSetTensor4dDescriptor(plan.y, format_of(layout_), type, out.n, out.c, out.h, out.w));
    LAYERS_CUDNN_TRY(cudnnCreateFilterDescriptor(&plan.w));
    LAYERS_CUDNN_TRY(cudnnSetFilter4dDescriptor(plan.w, type, format_of(layout_), g.filters,
                                                g.input.c, g.kernel, g.kernel));
    // Note [Convolution algorithms]: rank with the requested math type, then run each direction
    // with the math type of the algorithm it takes.
    const cudnnMathType_t requested = requested_math(dtype, mode);
    const std::string shape = describe(g, dtype);
    plan.forward_conv = make_conv(g, requested);
    plan.data_conv = make_conv(g, requested);
    plan.filter_conv = make_conv(g, requested);
    int returned = 0;
    cudnnConvolutionFwdAlgoPerf_t forward[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    LAYERS_CUDNN_TRY(cudnnGetConvolutionForwardAlgorithm_v7(
        handle_, plan.x, plan.w, plan.forward_conv, plan.y, CUDNN_CONVOLUTION_FWD_ALGO_COUNT,
        &returned, forward));
    const auto best_forward =
        first_usable(forward, returned, requested, "forward convolution", shape);
    plan.forward = best_forward.algo;
    plan.forward_bytes = best_forward.memory;
    LAYERS_CUDNN_TRY(cudnnSetConvolutionMathType(plan.forward_conv, best_forward.mathType));
    cudnnConvolutionBwdDataAlgoPerf_t data[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
    LAYERS_CUDNN_TRY(cudnnGetConvolutionBackwardDataAlgorithm_v7(
        handle_, plan.w, plan.y, plan.data_conv, plan.x, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT,
        &returned, data));
    const auto best_data =
        first_usable(data, returned, requested, "backward-data convolution", shape);
    plan.backward_data = best_data.algo;
    plan.backward_data_bytes = best_data.memory;
    LAYERS_CUDNN_TRY(cudnnSetConvolutionMathType(plan.data_conv, best_data.mathType));
    cudnnConvolutionBwdFilterAlgoPerf_t filter[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
    LAYERS_CUDNN_TRY(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
        handle_, plan.x, plan.y, plan.filter_conv, plan.w, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT,
        &returned, filter));
    const auto best_filter =
        first_usable(filter, returned, requested, "backward-filter convolution", shape);
    plan.backward_filter = best_filter.algo;
    plan.backward_filter_bytes = best_filter.memory;
    LAYERS_CUDNN_TRY(cudnnSetConvolutionMathType(plan.filter_conv, best_filter.mathType));
    return *plans_.emplace(key, std::move(planned)).first->second;
  }

  /// "[32, 64, 56, 56] * 256 filters 1x1 stride 1 pad 0, f32", for messages.
  static std::string describe(const ConvGeometry& g, cohort::DType dtype) {
    std::ostringstream text;  // (not operator+: GCC 12 warns falsely on a long chain of them)
    text << "[" << g.input.n << ", " << g.input.c << ", " << g.input.h << ", " << g.input.w
         << "] * " << g.filters << " filters " << g.kernel << "x" << g.kernel << " stride "
         << g.stride << " pad " << g.padding << ", " << cohort::to_string(dtype);
    return text.str();
  }

  /// A workspace of at least `bytes`, grown (in stream order) when a larger one is needed.
  void* workspace_of(std::size_t bytes) {
    if (bytes == 0) return nullptr;
    if (workspace_.size_bytes() < bytes) workspace_ = math_->allocate_scratch(bytes);
    return workspace_.data();
  }

  Math* math_;
  Layout layout_;
  cudnnHandle_t handle_ = nullptr;
  cudnnActivationDescriptor_t relu_ = nullptr;
  cudnnPoolingDescriptor_t pool_ = nullptr;
  std::map<std::tuple<int, int, int, int, int, int, int, int, int, int>, std::unique_ptr<ConvPlan>>
      plans_;
  cohort::Buffer workspace_;
};

}  // namespace

/// CudnnOps with its Math's device bound for each call and put back after it (Note [Layers keep
/// the caller's device] in math.cpp): cuDNN runs on the current device, and the caller's stays
/// the caller's.
class OnMathDevice final : public DeviceCnnOps {
 public:
  OnMathDevice(Math& math, Layout layout) : device_(math.device().index()) {
    const cohort::detail::CudaDeviceScope scope(device_);
    ops_ = std::make_unique<CudnnOps>(math, layout);
  }
  ~OnMathDevice() override {
    const cohort::detail::CudaDeviceScope scope(device_);
    ops_.reset();
  }
  OnMathDevice(const OnMathDevice&) = delete;
  OnMathDevice& operator=(const OnMathDevice&) = delete;

  void conv_forward(const ConvGeometry& g, const cohort::TensorView& x, const cohort::TensorView& w,
                    const cohort::TensorView& y) override {
    const cohort::detail::CudaDeviceScope scope(device_);
    ops_->conv_forward(g, x, w, y);
  }
  void conv_backward_data(const ConvGeometry& g, const cohort::TensorView& dy,
                          const cohort::TensorView& w, const cohort::TensorView& dx) override {
    const cohort::detail::CudaDeviceScope scope(device_);
    ops_->conv_backward_data(g, dy, w, dx);
  }
  void conv_backward_filter(const ConvGeometry& g, const cohort::TensorView& x,
                            const cohort::TensorView& dy, const cohort::TensorView& dw) override {
    const cohort::detail::CudaDeviceScope scope(device_);
    ops_->conv_backward_filter(g, x, dy, dw);
  }
  void batch_norm_forward(const Shape4& shape, int group, const float* x, const float* gamma,
                          const float* beta, float* y, float* saved_mean,
                          float* saved_inv_std) override {
    const cohort::detail::CudaDeviceScope scope(device_);
    ops_->batch_norm_forward(shape, group, x, gamma, beta, y, saved_mean, saved_inv_std);
  }
  void batch_norm_backward(const Shape4& shape, int group, const float* x, const float* dy,
                           const float* gamma, const float* saved_mean, const float* saved_inv_std,
                           float* dx, float* dgamma, float* dbeta) override {
    const cohort::detail::CudaDeviceScope scope(device_);
    ops_->batch_norm_backward(shape, group, x, dy, gamma, saved_mean, saved_inv_std, dx, dgamma,
                              dbeta);
  }
  void relu(const float* x, float* y, std::size_t count) override {
    const cohort::detail::CudaDeviceScope scope(device_);
    ops_->relu(x, y, count);
  }
  void add_into(const float* a, float* out, std::size_t count) override {
    const cohort::detail::CudaDeviceScope scope(device_);
    ops_->add_into(a, out, count);
  }
  void global_average_pool(const Shape4& shape, const float* x, float* y) override {
    const cohort::detail::CudaDeviceScope scope(device_);
    ops_->global_average_pool(shape, x, y);
  }
  void global_average_pool_backward(const Shape4& shape, const float* dy, float* dx) override {
    const cohort::detail::CudaDeviceScope scope(device_);
    ops_->global_average_pool_backward(shape, dy, dx);
  }

 private:
  int device_;
  std::unique_ptr<CudnnOps> ops_;
};

std::unique_ptr<DeviceCnnOps> make_device_cnn_ops(Math& math, Layout layout) {
  return std::make_unique<OnMathDevice>(math, layout);
}

}  // namespace layers
