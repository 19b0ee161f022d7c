// The cuDNN CNN layers against the host layers: each layer on the same seeded inputs, in both
// layouts (and bf16 convolutions at bf16's tolerance). Skipped without a GPU.

#include <layers/cnn_ops.hpp>
#include <layers/math.hpp>

#include <cohort/core/error.hpp>
#include <cohort/core/float16.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

namespace {

using layers::CnnOps;
using layers::ConvGeometry;
using layers::Layout;
using layers::Shape4;

std::vector<float> random_values(std::size_t count, std::uint64_t seed) {
  std::mt19937_64 generator(seed);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> values(count);
  for (float& value : values) value = uniform(generator);
  return values;
}

/// One set of layers on the GPU and one on the host, and a way to run an operation on both.
class CnnLayersGpu : public ::testing::TestWithParam<Layout> {
 protected:
  void SetUp() override {
    if (cohort::cuda_device_count() == 0) {
      GTEST_SKIP() << "no GPU: " << cohort::cuda_unavailable_reason();
    }
    gpu_math_ = std::make_unique<layers::Math>(cohort::Stream::create(cohort::Device::cuda(0)));
    gpu_ = std::make_unique<CnnOps>(*gpu_math_, GetParam());
  }

  /// A device copy of `values` (f32, or rounded to bf16).
  cohort::Buffer upload(const std::vector<float>& values, cohort::DType dtype = cohort::DType::f32) {
    cohort::Buffer buffer = gpu_math_->allocate_bytes(values.size() * cohort::size_of(dtype));
    gpu_math_->upload_values(view(buffer, values.size(), dtype), values);
    return buffer;
  }
  cohort::TensorView view(cohort::Buffer& buffer, std::size_t count,
                          cohort::DType dtype = cohort::DType::f32) {
    return cohort::TensorView(buffer.data(), count, dtype, gpu_math_->device());
  }
  std::vector<float> download(cohort::Buffer& buffer, std::size_t count,
                              cohort::DType dtype = cohort::DType::f32) {
    return gpu_math_->download_values(view(buffer, count, dtype));
  }
  static void expect_close(const std::vector<float>& gpu, const std::vector<float>& host,
                           double tolerance, const char* what) {
    ASSERT_EQ(gpu.size(), host.size()) << what;
    for (std::size_t i = 0; i < gpu.size(); ++i) {
      ASSERT_NEAR(gpu[i], host[i], tolerance * std::max(1.0, std::abs(double{host[i]})))
          << what << " entry " << i;
    }
  }

  cohort::Stream host_stream_ = cohort::Stream::create(cohort::Device::host());
  layers::Math host_math_{host_stream_};
  CnnOps host_{host_math_, GetParam()};
  std::unique_ptr<layers::Math> gpu_math_;
  std::unique_ptr<CnnOps> gpu_;
};

TEST_P(CnnLayersGpu, ConvolutionsMatchTheHost) {
  for (const cohort::DType dtype : {cohort::DType::f32, cohort::DType::bf16}) {
    // f32 without TF32 agrees to rounding; bf16 inputs agree to bf16's 8 bits of mantissa.
    const double tolerance = dtype == cohort::DType::f32 ? 1e-4 : 3e-2;
    for (const ConvGeometry& g :
         {ConvGeometry{.input = {4, 8, 16, 16}, .filters = 16, .kernel = 3, .stride = 1, .padding = 1},
          ConvGeometry{.input = {2, 16, 15, 15}, .filters = 32, .kernel = 3, .stride = 2, .padding = 1},
          ConvGeometry{.input = {2, 8, 8, 8}, .filters = 16, .kernel = 1, .stride = 2, .padding = 0}}) {
      std::vector<float> x = random_values(g.input.count(), 1), w = random_values(g.weight_count(), 2);
      std::vector<float> dy = random_values(g.output().count(), 3);
      if (dtype == cohort::DType::bf16) {  // the host computes on the same rounded inputs
        for (auto* values : {&x, &w, &dy}) {
          for (float& value : *values) value = static_cast<float>(cohort::bfloat16(value));
        }
      }
      std::vector<float> y(g.output().count()), dx(x.size()), dw(w.size());
      auto span = [](std::vector<float>& v) { return cohort::TensorView(std::span<float>(v)); };
      host_.conv_forward(g, span(x), span(w), span(y));
      host_.conv_backward_data(g, span(dy), span(w), span(dx));
      host_.conv_backward_filter(g, span(x), span(dy), span(dw));
      host_stream_.synchronize();
      cohort::Buffer gx = upload(x, dtype), gw = upload(w, dtype), gdy = upload(dy, dtype);
      cohort::Buffer gy = upload(y, dtype), gdx = upload(dx, dtype), gdw = upload(dw, dtype);
      gpu_->conv_forward(g, view(gx, x.size(), dtype), view(gw, w.size(), dtype), view(gy, y.size(), dtype));
      gpu_->conv_backward_data(g, view(gdy, dy.size(), dtype), view(gw, w.size(), dtype), view(gdx, dx.size(), dtype));
      gpu_->conv_backward_filter(g, view(gx, x.size(), dtype), view(gdy, dy.size(), dtype), view(gdw, dw.size(), dtype));
      expect_close(download(gy, y.size(), dtype), y, tolerance, "forward");
      expect_close(download(gdx, dx.size(), dtype), dx, tolerance, "backward data");
      expect_close(download(gdw, dw.size(), dtype), dw, tolerance, "backward filter");
    }
  }
}

TEST_P(CnnLayersGpu, BatchNormReluAddAndPoolMatchTheHost) {
  const Shape4 shape{8, 6, 5, 4};
  constexpr int kGroup = 4;
  const std::size_t count = shape.count();
  std::vector<float> x = random_values(count, 4), dy = random_values(count, 5), other = random_values(count, 6);
  std::vector<float> gamma = random_values(6, 7), beta = random_values(6, 8);
  std::vector<float> y(count), mean(12), inv_std(12), dx(count), dgamma(6), dbeta(6);
  std::vector<float> relu(count), sum = x, pooled(48), pool_grad(count);
  const std::vector<float> dpooled = random_values(48, 9);
  host_.batch_norm_forward(shape, kGroup, x.data(), gamma.data(), beta.data(), y.data(), mean.data(), inv_std.data());
  host_.batch_norm_backward(shape, kGroup, x.data(), dy.data(), gamma.data(), mean.data(), inv_std.data(),
                            dx.data(), dgamma.data(), dbeta.data());
  host_.relu(x.data(), relu.data(), count);
  host_.add_into(other.data(), sum.data(), count);
  host_.global_average_pool(shape, x.data(), pooled.data());
  host_.global_average_pool_backward(shape, dpooled.data(), pool_grad.data());
  host_stream_.synchronize();

  cohort::Buffer gx = upload(x), gdy = upload(dy), gother = upload(other), ggamma = upload(gamma);
  cohort::Buffer gbeta = upload(beta), gy = upload(y), gmean = upload(mean), ginv = upload(inv_std);
  cohort::Buffer gdx = upload(dx), gdgamma = upload(dgamma), gdbeta = upload(dbeta);
  cohort::Buffer grelu = upload(relu), gsum = upload(x), gpooled = upload(pooled);
  cohort::Buffer gdpooled = upload(dpooled), gpool_grad = upload(pool_grad);
  auto f = [](cohort::Buffer& b) { return static_cast<float*>(b.data()); };
  gpu_->batch_norm_forward(shape, kGroup, f(gx), f(ggamma), f(gbeta), f(gy), f(gmean), f(ginv));
  gpu_->batch_norm_backward(shape, kGroup, f(gx), f(gdy), f(ggamma), f(gmean), f(ginv), f(gdx),
                            f(gdgamma), f(gdbeta));
  gpu_->relu(f(gx), f(grelu), count);
  gpu_->add_into(f(gother), f(gsum), count);
  gpu_->global_average_pool(shape, f(gx), f(gpooled));
  gpu_->global_average_pool_backward(shape, f(gdpooled), f(gpool_grad));
  expect_close(download(gy, count), y, 1e-4, "batch norm forward");
  expect_close(download(gmean, 12), mean, 1e-4, "batch norm mean");
  expect_close(download(ginv, 12), inv_std, 1e-3, "batch norm 1/std");
  expect_close(download(gdx, count), dx, 1e-3, "batch norm dx");
  expect_close(download(gdgamma, 6), dgamma, 1e-3, "batch norm dgamma");
  expect_close(download(gdbeta, 6), dbeta, 1e-4, "batch norm dbeta");
  expect_close(download(grelu, count), relu, 0.0, "relu");
  expect_close(download(gsum, count), sum, 0.0, "residual add");
  expect_close(download(gpooled, 48), pooled, 1e-5, "global average pool");
  expect_close(download(gpool_grad, count), pool_grad, 1e-6, "global average pool backward");
}

INSTANTIATE_TEST_SUITE_P(Gpu, CnnLayersGpu, ::testing::Values(Layout::nchw, Layout::nhwc),
                         [](const ::testing::TestParamInfo<Layout>& test) {
                           return test.param == Layout::nchw ? std::string("nchw") : std::string("nhwc");
                         });

}  // namespace
