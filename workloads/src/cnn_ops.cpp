// layers::CnnOps on the host: im2col (here im2row: one row per output pixel) with OpenBLAS, and
// plain loops, each enqueued on the host stream. The GPU side is cnn_cudnn.cpp.

#include <layers/cnn_ops.hpp>

#include "cnn_device.hpp"

#include <cohort/core/error.hpp>

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <string>

namespace layers {

Shape4 ConvGeometry::output() const noexcept {
  return {input.n, filters, (input.h + 2 * padding - kernel) / stride + 1,
          (input.w + 2 * padding - kernel) / stride + 1};
}

std::size_t ConvGeometry::weight_count() const noexcept {
  return static_cast<std::size_t>(filters) * static_cast<std::size_t>(input.c) *
         static_cast<std::size_t>(kernel) * static_cast<std::size_t>(kernel);
}

double ConvGeometry::forward_flops() const noexcept {
  const Shape4 out = output();
  return 2.0 * static_cast<double>(out.count()) * input.c * kernel * kernel;
}

namespace {

struct Strides {
  std::size_t n, c, h, w;
};

Strides activation_strides(const Shape4& s, Layout layout) {
  const auto c = static_cast<std::size_t>(s.c), h = static_cast<std::size_t>(s.h),
             w = static_cast<std::size_t>(s.w);
  if (layout == Layout::nchw) return {c * h * w, h * w, w, 1};
  return {h * w * c, 1, w * c, c};
}

/// Where (c, kh, kw) sits in a filter's row of c x k x k values: the column of the im2row matrix.
Strides filter_strides(int channels, int kernel, Layout layout) {
  const auto c = static_cast<std::size_t>(channels), k = static_cast<std::size_t>(kernel);
  if (layout == Layout::nchw) return {c * k * k, k * k, k, 1};
  return {k * k * c, 1, k * c, c};
}

/// Calls fn(row, column, input offset or -1 for padding) for every entry of samples
/// [first, first + count) of the im2row matrix [count x out_h x out_w, c x k x k].
template <typename Fn>
void for_each_patch_entry(const ConvGeometry& g, Layout layout, int first, int count, Fn&& fn) {
  const Shape4 out = g.output();
  const Strides in = activation_strides(g.input, layout);
  const Strides filter = filter_strides(g.input.c, g.kernel, layout);
  std::size_t row = 0;
  for (int n = first; n < first + count; ++n) {
    for (int oh = 0; oh < out.h; ++oh) {
      for (int ow = 0; ow < out.w; ++ow, ++row) {
        for (int c = 0; c < g.input.c; ++c) {
          for (int kh = 0; kh < g.kernel; ++kh) {
            const int ih = oh * g.stride - g.padding + kh;
            for (int kw = 0; kw < g.kernel; ++kw) {
              const int iw = ow * g.stride - g.padding + kw;
              const std::size_t column = static_cast<std::size_t>(c) * filter.c +
                                         static_cast<std::size_t>(kh) * filter.h +
                                         static_cast<std::size_t>(kw) * filter.w;
              const bool inside = ih >= 0 && ih < g.input.h && iw >= 0 && iw < g.input.w;
              const std::ptrdiff_t offset =
                  inside ? static_cast<std::ptrdiff_t>(static_cast<std::size_t>(n) * in.n +
                                                       static_cast<std::size_t>(c) * in.c +
                                                       static_cast<std::size_t>(ih) * in.h +
                                                       static_cast<std::size_t>(iw) * in.w)
                         : -1;
              fn(row, column, offset);
            }
          }
        }
      }
    }
  }
}

/// The im2row matrix of samples [first, first + count) of x.
void im2row(const ConvGeometry& g, Layout layout, const float* x, int first, int count,
            std::vector<float>& columns) {
  const std::size_t width =
      static_cast<std::size_t>(g.input.c) * static_cast<std::size_t>(g.kernel * g.kernel);
  const Shape4 out = g.output();
  columns.resize(static_cast<std::size_t>(count) * static_cast<std::size_t>(out.h * out.w) * width);
  for_each_patch_entry(g, layout, first, count,
                       [&](std::size_t row, std::size_t column, std::ptrdiff_t offset) {
                         columns[row * width + column] = offset < 0 ? 0.0f : x[offset];
                       });
}

/// dx += the im2row matrix's entries scattered back to the pixels they came from.
void row2im_add(const ConvGeometry& g, Layout layout, const std::vector<float>& columns, int first,
                int count, float* dx) {
  const std::size_t width =
      static_cast<std::size_t>(g.input.c) * static_cast<std::size_t>(g.kernel * g.kernel);
  for_each_patch_entry(g, layout, first, count,
                       [&](std::size_t row, std::size_t column, std::ptrdiff_t offset) {
                         if (offset >= 0) dx[offset] += columns[row * width + column];
                       });
}

struct GemmSizes {
  int pixels;  ///< output pixels per sample
  int width;   ///< c x k x k: a filter's values, an im2row row
};

GemmSizes gemm_sizes(const ConvGeometry& g) {
  const Shape4 out = g.output();
  return {out.h * out.w, g.input.c * g.kernel * g.kernel};
}

void check_group(const Shape4& shape, int group) {
  COHORT_EXPECTS(group > 0 && shape.n % group == 0,
                 "batch norm: the batch of " + std::to_string(shape.n) +
                     " is not a multiple of the statistics group of " + std::to_string(group));
}

const float* f32(const cohort::TensorView& view) {
  return static_cast<const float*>(view.data());
}
float* f32_mutable(const cohort::TensorView& view) {
  return static_cast<float*>(view.data());
}

}  // namespace

CnnOps::CnnOps(Math& math, Layout layout)
    : math_(&math), layout_(layout), columns_(std::make_shared<std::vector<float>>()) {
  if (!math.device().is_host()) device_ = make_device_cnn_ops(math, layout);
}

CnnOps::~CnnOps() = default;

void CnnOps::check_conv(const ConvGeometry& g, const cohort::TensorView& a, std::size_t a_count,
                        const cohort::TensorView& b, std::size_t b_count,
                        const cohort::TensorView& c, std::size_t c_count, const char* what) const {
  COHORT_EXPECTS(g.input.n > 0 && g.input.c > 0 && g.filters > 0 && g.kernel > 0 && g.stride > 0 &&
                     g.padding >= 0 && g.output().h > 0 && g.output().w > 0,
                 std::string(what) + ": the convolution's geometry is empty or negative");
  const std::string name = what;
  for (const auto& [view, count] :
       {std::pair{&a, a_count}, std::pair{&b, b_count}, std::pair{&c, c_count}}) {
    COHORT_EXPECTS(view->device() == math_->device(),
                   name + ": a view is on " + view->device().to_string() + ", the layer on " +
                       math_->device().to_string());
    COHORT_EXPECTS(view->dtype() == a.dtype(), name + ": the views' dtypes differ");
    COHORT_EXPECTS_EQ(view->count(), count, name + ": a view has the wrong number of elements");
  }
  const bool bf16_on_gpu = a.dtype() == cohort::DType::bf16 && !math_->device().is_host();
  COHORT_EXPECTS(a.dtype() == cohort::DType::f32 || bf16_on_gpu,
                 name + ": convolutions take f32 views (bf16 on GPUs), not " +
                     std::string(cohort::to_string(a.dtype())));
}

void CnnOps::conv_forward(const ConvGeometry& g, const cohort::TensorView& x,
                          const cohort::TensorView& w, const cohort::TensorView& y) {
  check_conv(g, x, g.input.count(), w, g.weight_count(), y, g.output().count(), "conv_forward");
  if (device_) return device_->conv_forward(g, x, w, y);
  math_->stream().enqueue([g, layout = layout_, columns = columns_, x = f32(x), w = f32(w),
                           y = f32_mutable(y)] {
    const auto [pixels, width] = gemm_sizes(g);
    if (layout == Layout::nhwc) {  // y [n pixels, filters] = rows [n pixels, width] . w^T
      im2row(g, layout, x, 0, g.input.n, *columns);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, g.input.n * pixels, g.filters, width,
                  1.0f, columns->data(), width, w, width, 0.0f, y, g.filters);
      return;
    }
    for (int n = 0; n < g.input.n; ++n) {  // y_n [filters, pixels] = w . rows_n^T
      im2row(g, layout, x, n, 1, *columns);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, g.filters, pixels, width, 1.0f, w, width,
                  columns->data(), width, 0.0f,
                  y + static_cast<std::size_t>(n) * static_cast<std::size_t>(g.filters * pixels),
                  pixels);
    }
  });
}

void CnnOps::conv_backward_data(const ConvGeometry& g, const cohort::TensorView& dy,
                                const cohort::TensorView& w, const cohort::TensorView& dx) {
  check_conv(g, dy, g.output().count(), w, g.weight_count(), dx, g.input.count(),
             "conv_backward_data");
  if (device_) return device_->conv_backward_data(g, dy, w, dx);
  math_->stream().enqueue([g, layout = layout_, columns = columns_, dy = f32(dy), w = f32(w),
                           dx = f32_mutable(dx)] {
    const auto [pixels, width] = gemm_sizes(g);
    std::fill(dx, dx + g.input.count(), 0.0f);
    const int samples = layout == Layout::nhwc ? g.input.n : 1;
    for (int first = 0; first < g.input.n; first += samples) {
      columns->resize(static_cast<std::size_t>(samples * pixels) * static_cast<std::size_t>(width));
      const float* dy_first =
          dy + static_cast<std::size_t>(first) * static_cast<std::size_t>(g.filters * pixels);
      if (layout == Layout::nhwc) {  // rows [n pixels, width] = dy [n pixels, filters] . w
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, samples * pixels, width, g.filters,
                    1.0f, dy_first, g.filters, w, width, 0.0f, columns->data(), width);
      } else {  // rows_n [pixels, width] = dy_n^T [pixels, filters] . w
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, pixels, width, g.filters, 1.0f,
                    dy_first, pixels, w, width, 0.0f, columns->data(), width);
      }
      row2im_add(g, layout, *columns, first, samples, dx);
    }
  });
}

void CnnOps::conv_backward_filter(const ConvGeometry& g, const cohort::TensorView& x,
                                  const cohort::TensorView& dy, const cohort::TensorView& dw) {
  check_conv(g, x, g.input.count(), dy, g.output().count(), dw, g.weight_count(),
             "conv_backward_filter");
  if (device_) return device_->conv_backward_filter(g, x, dy, dw);
  math_->stream().enqueue([g, layout = layout_, columns = columns_, x = f32(x), dy = f32(dy),
                           dw = f32_mutable(dw)] {
    const auto [pixels, width] = gemm_sizes(g);
    if (layout == Layout::nhwc) {  // dw [filters, width] = dy^T [filters, n pixels] . rows
      im2row(g, layout, x, 0, g.input.n, *columns);
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, g.filters, width, g.input.n * pixels,
                  1.0f, dy, g.filters, columns->data(), width, 0.0f, dw, width);
      return;
    }
    for (int n = 0; n < g.input.n; ++n) {  // dw += dy_n [filters, pixels] . rows_n
      im2row(g, layout, x, n, 1, *columns);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, g.filters, width, pixels, 1.0f,
                  dy + static_cast<std::size_t>(n) * static_cast<std::size_t>(g.filters * pixels),
                  pixels, columns->data(), width, n == 0 ? 0.0f : 1.0f, dw, width);
    }
  });
}

namespace {

/// Calls fn(offset) for every element of channel c of samples [first, first + count).
template <typename Fn>
void for_each_in_channel(const Shape4& s, Layout layout, int c, int first, int count, Fn&& fn) {
  const Strides st = activation_strides(s, layout);
  for (int n = first; n < first + count; ++n) {
    for (int h = 0; h < s.h; ++h) {
      for (int w = 0; w < s.w; ++w) {
        fn(static_cast<std::size_t>(n) * st.n + static_cast<std::size_t>(c) * st.c +
           static_cast<std::size_t>(h) * st.h + static_cast<std::size_t>(w) * st.w);
      }
    }
  }
}

}  // namespace

void CnnOps::batch_norm_forward(const Shape4& shape, int group, const float* x, const float* gamma,
                                const float* beta, float* y, float* saved_mean,
                                float* saved_inv_std) {
  check_group(shape, group);
  if (device_) {
    return device_->batch_norm_forward(shape, group, x, gamma, beta, y, saved_mean, saved_inv_std);
  }
  math_->stream().enqueue([=, layout = layout_] {
    const double m = static_cast<double>(group) * shape.h * shape.w;
    for (int g = 0; g < shape.n / group; ++g) {
      for (int c = 0; c < shape.c; ++c) {
        double sum = 0.0, squares = 0.0;
        for_each_in_channel(shape, layout, c, g * group, group, [&](std::size_t i) {
          const double value = x[i];
          sum += value;
          squares += value * value;
        });
        const double mean = sum / m;
        const double variance = std::max(squares / m - mean * mean, 0.0);
        const auto slot = static_cast<std::size_t>(g * shape.c + c);
        saved_mean[slot] = static_cast<float>(mean);
        saved_inv_std[slot] =
            static_cast<float>(1.0 / std::sqrt(variance + double{kBatchNormEpsilon}));
        const float scale = gamma[c] * saved_inv_std[slot];
        const float shift = beta[c] - saved_mean[slot] * scale;
        for_each_in_channel(shape, layout, c, g * group, group,
                            [&](std::size_t i) { y[i] = x[i] * scale + shift; });
      }
    }
  });
}

void CnnOps::batch_norm_backward(const Shape4& shape, int group, const float* x, const float* dy,
                                 const float* gamma, const float* saved_mean,
                                 const float* saved_inv_std, float* dx, float* dgamma,
                                 float* dbeta) {
  check_group(shape, group);
  if (device_) {
    return device_->batch_norm_backward(shape, group, x, dy, gamma, saved_mean, saved_inv_std, dx,
                                        dgamma, dbeta);
  }
  math_->stream().enqueue([=, layout = layout_] {
    const double m = static_cast<double>(group) * shape.h * shape.w;
    std::fill(dgamma, dgamma + shape.c, 0.0f);
    std::fill(dbeta, dbeta + shape.c, 0.0f);
    for (int g = 0; g < shape.n / group; ++g) {
      for (int c = 0; c < shape.c; ++c) {
        const auto slot = static_cast<std::size_t>(g * shape.c + c);
        const double mean = saved_mean[slot], inv_std = saved_inv_std[slot];
        double sum_dy = 0.0, sum_dy_xhat = 0.0;
        for_each_in_channel(shape, layout, c, g * group, group, [&](std::size_t i) {
          const double gradient = dy[i];
          sum_dy += gradient;
          sum_dy_xhat += gradient * (double{x[i]} - mean) * inv_std;
        });
        dbeta[c] += static_cast<float>(sum_dy);
        dgamma[c] += static_cast<float>(sum_dy_xhat);
        const double scale = double{gamma[c]} * inv_std / m;
        for_each_in_channel(shape, layout, c, g * group, group, [&](std::size_t i) {
          const double xhat = (double{x[i]} - mean) * inv_std;
          dx[i] = static_cast<float>(scale * (m * double{dy[i]} - sum_dy - xhat * sum_dy_xhat));
        });
      }
    }
  });
}

void CnnOps::relu(const float* x, float* y, std::size_t count) {
  if (device_) return device_->relu(x, y, count);
  math_->stream().enqueue([=] {
    for (std::size_t i = 0; i < count; ++i) y[i] = std::max(x[i], 0.0f);
  });
}

void CnnOps::add_into(const float* a, float* out, std::size_t count) {
  if (device_) return device_->add_into(a, out, count);
  math_->stream().enqueue([=] {
    for (std::size_t i = 0; i < count; ++i) out[i] += a[i];
  });
}

void CnnOps::global_average_pool(const Shape4& shape, const float* x, float* y) {
  if (device_) return device_->global_average_pool(shape, x, y);
  math_->stream().enqueue([=, layout = layout_] {
    const double pixels = static_cast<double>(shape.h) * shape.w;
    for (int n = 0; n < shape.n; ++n) {
      for (int c = 0; c < shape.c; ++c) {
        double sum = 0.0;
        for_each_in_channel(shape, layout, c, n, 1, [&](std::size_t i) { sum += double{x[i]}; });
        y[static_cast<std::size_t>(n * shape.c + c)] = static_cast<float>(sum / pixels);
      }
    }
  });
}

void CnnOps::global_average_pool_backward(const Shape4& shape, const float* dy, float* dx) {
  if (device_) return device_->global_average_pool_backward(shape, dy, dx);
  math_->stream().enqueue([=, layout = layout_] {
    const float scale = 1.0f / static_cast<float>(shape.h * shape.w);
    for (int n = 0; n < shape.n; ++n) {
      for (int c = 0; c < shape.c; ++c) {
        const float value = dy[static_cast<std::size_t>(n * shape.c + c)] * scale;
        for_each_in_channel(shape, layout, c, n, 1, [&](std::size_t i) { dx[i] = value; });
      }
    }
  });
}

}  // namespace layers

#if !COHORT_LAYERS_WITH_CUDNN
namespace layers {
std::unique_ptr<DeviceCnnOps> make_device_cnn_ops(Math& math, Layout) {
  COHORT_FAIL(cohort::InvalidArgument, "CNN layers on " + math.device().to_string() +
                                           ": this build has no cuDNN (host ranks work)");
}
}  // namespace layers
#endif
