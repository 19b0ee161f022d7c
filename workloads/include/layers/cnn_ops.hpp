#pragma once

/// @file
/// `layers::CnnOps`: the layers of a small ResNet-style CNN on one device, in stream order, beside
/// `layers::Math` (which supplies the linear layer and softmax cross-entropy). On a GPU they are
/// cuDNN calls (convolution algorithms chosen once per shape by cuDNN's heuristics, in the Math's
/// `MathMode` and within `kWorkspaceLimitBytes` of workspace, workspaces from the Math's device
/// pool); on the host, im2col with OpenBLAS and plain loops, each enqueued as a task on the host
/// stream.
///
/// Stream contract: as `layers::Math`: every method enqueues on `math.stream()` after the work
/// already there and returns at once; pointers are device pointers on a GPU, host pointers on the
/// host, and must stay alive until the stream has run the work.
///
/// Activations are 4-d tensors [n, c, h, w] stored as `Layout::nchw` or `Layout::nhwc` (channels
/// last, the layout tensor cores prefer). Convolution filters are [filters, c, k, k] for NCHW and
/// [filters, k, k, c] for NHWC, as cuDNN expects. Convolutions take typed views: f32 everywhere,
/// or bf16 tensors with f32 accumulation on a GPU. The other layers are f32.

#include <layers/math.hpp>

#include <cohort/core/tensor_view.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace layers {

class DeviceCnnOps;  // the cuDNN side (src/cnn_device.hpp)

enum class Layout : std::uint8_t { nchw, nhwc };

struct Shape4 {
  int n = 0, c = 0, h = 0, w = 0;
  std::size_t count() const noexcept {
    return static_cast<std::size_t>(n) * static_cast<std::size_t>(c) * static_cast<std::size_t>(h) *
           static_cast<std::size_t>(w);
  }
  bool operator==(const Shape4&) const = default;
};

/// A square convolution without bias (batch norm follows it).
struct ConvGeometry {
  Shape4 input;
  int filters = 1;
  int kernel = 3;
  int stride = 1;
  int padding = 1;
  Shape4 output() const noexcept;
  std::size_t weight_count() const noexcept;
  /// Multiply-adds x 2 of the forward pass over the whole batch.
  double forward_flops() const noexcept;
};

class CnnOps {
 public:
  /// Layers on `math`'s stream and device, for activations in `layout`.
  CnnOps(Math& math, Layout layout = Layout::nchw);
  ~CnnOps();
  CnnOps(const CnnOps&) = delete;
  CnnOps& operator=(const CnnOps&) = delete;

  Layout layout() const noexcept { return layout_; }
  Math& math() const noexcept { return *math_; }

  /// y = conv(x, w). x, w, y: `geometry.input`, weight_count() and output() elements, one dtype.
  /// @throws InvalidArgument for views of the wrong size, device or dtype (bf16 is GPU-only).
  void conv_forward(const ConvGeometry& geometry, const cohort::TensorView& x,
                    const cohort::TensorView& w, const cohort::TensorView& y);
  /// dx = the gradient of conv with respect to x, from dy (overwrites dx).
  void conv_backward_data(const ConvGeometry& geometry, const cohort::TensorView& dy,
                          const cohort::TensorView& w, const cohort::TensorView& dx);
  /// dw = the gradient of conv with respect to w, from x and dy (overwrites dw).
  void conv_backward_filter(const ConvGeometry& geometry, const cohort::TensorView& x,
                            const cohort::TensorView& dy, const cohort::TensorView& dw);

  /// Batch norm in training mode with statistics over groups of `group` consecutive samples
  /// (shape.n a multiple of it; Note [Ghost batch norm] in cnn.hpp): y = gamma (x - mean) /
  /// sqrt(var
  /// + eps) + beta per channel. Writes each group's mean and 1/sqrt(var + eps) to `saved_mean`
  /// and `saved_inv_std` ([shape.n / group, c]) for the backward pass.
  void batch_norm_forward(const Shape4& shape, int group, const float* x, const float* gamma,
                          const float* beta, float* y, float* saved_mean, float* saved_inv_std);
  /// dx, and dgamma and dbeta summed over the groups (all overwritten).
  void batch_norm_backward(const Shape4& shape, int group, const float* x, const float* dy,
                           const float* gamma, const float* saved_mean, const float* saved_inv_std,
                           float* dx, float* dgamma, float* dbeta);

  /// y = max(0, x); y may be x. (Its backward is Math::relu_backward.)
  void relu(const float* x, float* y, std::size_t count);
  /// out += a: the residual connection. (Its backward passes the gradient to both inputs.)
  void add_into(const float* a, float* out, std::size_t count);
  /// y [n, c] = the mean of x over h and w.
  void global_average_pool(const Shape4& shape, const float* x, float* y);
  /// dx = dy [n, c] spread evenly over h and w (overwrites dx).
  void global_average_pool_backward(const Shape4& shape, const float* dy, float* dx);

  static constexpr float kBatchNormEpsilon = 1e-5f;
  /// The most workspace a convolution algorithm may ask for (cuDNN's FFT and Winograd variants
  /// can ask for gigabytes, which the device pool would then hold): a faster algorithm over it is
  /// passed over for the next in cuDNN's ranking.
  static constexpr std::size_t kWorkspaceLimitBytes = std::size_t{512} << 20;

 private:
  void check_conv(const ConvGeometry& geometry, const cohort::TensorView& a, std::size_t a_count,
                  const cohort::TensorView& b, std::size_t b_count, const cohort::TensorView& c,
                  std::size_t c_count, const char* what) const;

  Math* math_;
  Layout layout_;
  std::unique_ptr<DeviceCnnOps> device_;
  std::shared_ptr<std::vector<float>>
      columns_;  // host im2col workspace, used on the stream's thread
};

}  // namespace layers
