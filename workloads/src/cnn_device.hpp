#pragma once

// The device side of layers::CnnOps: an interface that cnn_cudnn.cpp implements with cuDNN.
// CnnOps has validated the arguments before it calls any of these. Only cnn_ops.cpp and
// cnn_cudnn.cpp include this file.

#include <layers/cnn_ops.hpp>

#include <memory>

namespace layers {

class DeviceCnnOps {
 public:
  virtual ~DeviceCnnOps() = default;
  virtual void conv_forward(const ConvGeometry& g, const cohort::TensorView& x,
                            const cohort::TensorView& w, const cohort::TensorView& y) = 0;
  virtual void conv_backward_data(const ConvGeometry& g, const cohort::TensorView& dy,
                                  const cohort::TensorView& w, const cohort::TensorView& dx) = 0;
  virtual void conv_backward_filter(const ConvGeometry& g, const cohort::TensorView& x,
                                    const cohort::TensorView& dy, const cohort::TensorView& dw) = 0;
  virtual void batch_norm_forward(const Shape4& shape, int group, const float* x,
                                  const float* gamma, const float* beta, float* y,
                                  float* saved_mean, float* saved_inv_std) = 0;
  virtual void batch_norm_backward(const Shape4& shape, int group, const float* x, const float* dy,
                                   const float* gamma, const float* saved_mean,
                                   const float* saved_inv_std, float* dx, float* dgamma,
                                   float* dbeta) = 0;
  virtual void relu(const float* x, float* y, std::size_t count) = 0;
  virtual void add_into(const float* a, float* out, std::size_t count) = 0;
  virtual void global_average_pool(const Shape4& shape, const float* x, float* y) = 0;
  virtual void global_average_pool_backward(const Shape4& shape, const float* dy, float* dx) = 0;
};

/// cuDNN layers on `math`'s GPU and stream.
/// @throws InvalidArgument when this build has no cuDNN.
std::unique_ptr<DeviceCnnOps> make_device_cnn_ops(Math& math, Layout layout);

}  // namespace layers
