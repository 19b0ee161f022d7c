// The host CNN layers: each layer's gradients against central finite differences of the scalar
// sum(r * layer(inputs)) with seeded random r, in both layouts where the layout matters.

#include <layers/cnn_ops.hpp>
#include <layers/math.hpp>

#include <cohort/core/error.hpp>
#include <cohort/core/float16.hpp>

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace {

using layers::CnnOps;
using layers::ConvGeometry;
using layers::Layout;
using layers::Shape4;

std::vector<float> random_values(std::size_t count, std::uint64_t seed, float low = -1.0f,
                                 float high = 1.0f) {
  std::mt19937_64 generator(seed);
  std::uniform_real_distribution<float> uniform(low, high);
  std::vector<float> values(count);
  for (float& value : values) value = uniform(generator);
  return values;
}

double dot(const std::vector<float>& a, const std::vector<float>& b) {
  double sum = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) sum += double{a[i]} * double{b[i]};
  return sum;
}

cohort::TensorView view(std::vector<float>& values) {
  return std::span<float>(values);
}

/// Checks `analytic` (d objective / d input) against central differences of `objective`, which
/// reads `input`. Every entry for small inputs, a spread of them otherwise.
void expect_gradient(const std::function<double()>& objective, std::vector<float>& input,
                     const std::vector<float>& analytic, const std::string& what,
                     float step = 1e-2f, double tolerance = 2e-2) {
  ASSERT_EQ(input.size(), analytic.size()) << what;
  const std::size_t stride = std::max<std::size_t>(1, input.size() / 64);
  for (std::size_t i = 0; i < input.size(); i += stride) {
    const float saved = input[i];
    input[i] = saved + step;
    const double up = objective();
    input[i] = saved - step;
    const double down = objective();
    input[i] = saved;
    const double numeric = (up - down) / (2.0 * double{step});
    EXPECT_NEAR(analytic[i], numeric, tolerance * std::max(1.0, std::abs(numeric)))
        << what << " entry " << i;
  }
}

class CnnLayers : public ::testing::TestWithParam<Layout> {
 protected:
  cohort::Stream stream_ = cohort::Stream::create(cohort::Device::host());
  layers::Math math_{stream_};
  CnnOps ops_{math_, GetParam()};
};

void check_convolution(CnnOps& ops, const ConvGeometry& g, std::uint64_t seed) {
  std::vector<float> x = random_values(g.input.count(), seed);
  std::vector<float> w = random_values(g.weight_count(), seed + 1);
  const std::vector<float> r = random_values(g.output().count(), seed + 2);
  std::vector<float> y(g.output().count());
  auto objective = [&] {
    ops.conv_forward(g, view(x), view(w), view(y));
    ops.math().stream().synchronize();
    return dot(y, r);
  };
  std::vector<float> dy = r, dx(x.size()), dw(w.size());
  ops.conv_backward_data(g, view(dy), view(w), view(dx));
  ops.conv_backward_filter(g, view(x), view(dy), view(dw));
  ops.math().stream().synchronize();
  const std::string name = "conv k" + std::to_string(g.kernel) + " s" + std::to_string(g.stride);
  expect_gradient(objective, x, dx, name + " dx");
  expect_gradient(objective, w, dw, name + " dw");
}

TEST_P(CnnLayers, ConvolutionGradientsMatchFiniteDifferences) {
  check_convolution(
      ops_, {.input = {2, 3, 6, 5}, .filters = 4, .kernel = 3, .stride = 1, .padding = 1}, 1);
  check_convolution(
      ops_, {.input = {3, 2, 7, 7}, .filters = 5, .kernel = 3, .stride = 2, .padding = 1}, 2);
  check_convolution(
      ops_, {.input = {2, 4, 6, 6}, .filters = 3, .kernel = 1, .stride = 2, .padding = 0}, 3);
}

TEST_P(CnnLayers, ConvolutionOfAKnownImage) {
  // One 3x3 image, one all-ones filter, padding 1: each output is the sum of its neighbourhood.
  ConvGeometry g{.input = {1, 1, 3, 3}, .filters = 1, .kernel = 3, .stride = 1, .padding = 1};
  std::vector<float> x = {1, 2, 3, 4, 5, 6, 7, 8, 9}, w(9, 1.0f), y(9);
  ops_.conv_forward(g, view(x), view(w), view(y));
  stream_.synchronize();
  EXPECT_EQ(y, (std::vector<float>{12, 21, 16, 27, 45, 33, 24, 39, 28}));
}

TEST_P(CnnLayers, BatchNormGradientsMatchFiniteDifferences) {
  const Shape4 shape{4, 3, 3, 2};
  constexpr int kGroup = 2;
  std::vector<float> x = random_values(shape.count(), 11, -2.0f, 2.0f);
  std::vector<float> gamma = random_values(3, 12, 0.5f, 1.5f), beta = random_values(3, 13);
  const std::vector<float> r = random_values(shape.count(), 14);
  std::vector<float> y(shape.count()), mean(6), inv_std(6);
  auto objective = [&] {
    ops_.batch_norm_forward(shape, kGroup, x.data(), gamma.data(), beta.data(), y.data(),
                            mean.data(), inv_std.data());
    stream_.synchronize();
    return dot(y, r);
  };
  objective();
  // Each group's output is normalised per channel.
  std::vector<float> dx(x.size()), dgamma(3), dbeta(3);
  ops_.batch_norm_backward(shape, kGroup, x.data(), r.data(), gamma.data(), mean.data(),
                           inv_std.data(), dx.data(), dgamma.data(), dbeta.data());
  stream_.synchronize();
  expect_gradient(objective, x, dx, "batch norm dx", 1e-2f, 3e-2);
  expect_gradient(objective, gamma, dgamma, "batch norm dgamma");
  expect_gradient(objective, beta, dbeta, "batch norm dbeta");
  EXPECT_THROW(ops_.batch_norm_forward({3, 3, 3, 2}, kGroup, x.data(), gamma.data(), beta.data(),
                                       y.data(), mean.data(), inv_std.data()),
               cohort::InvalidArgument);
}

TEST_P(CnnLayers, ReluResidualAndPoolGradientsMatchFiniteDifferences) {
  const Shape4 shape{2, 3, 4, 3};
  std::vector<float> a = random_values(shape.count(), 21), b = random_values(shape.count(), 22);
  for (float& value : a) value += value > 0 ? 0.05f : -0.05f;  // away from ReLU's kink
  const std::vector<float> r = random_values(static_cast<std::size_t>(shape.n * shape.c), 23);
  // pooled = pool(relu(a) + b): relu, the residual add and the pool, end to end.
  std::vector<float> activation(shape.count()), pooled(r.size());
  auto objective = [&] {
    ops_.relu(a.data(), activation.data(), activation.size());
    ops_.add_into(b.data(), activation.data(), activation.size());
    ops_.global_average_pool(shape, activation.data(), pooled.data());
    stream_.synchronize();
    return dot(pooled, r);
  };
  objective();
  std::vector<float> d_sum(shape.count()), relu_out(shape.count());
  ops_.global_average_pool_backward(shape, r.data(), d_sum.data());
  ops_.relu(a.data(), relu_out.data(), relu_out.size());
  stream_.synchronize();
  std::vector<float> da = d_sum;  // the residual add passes the gradient to both inputs
  math_.relu_backward(da.data(), relu_out.data(), da.size());
  stream_.synchronize();
  expect_gradient(objective, b, d_sum, "residual add / pool db", 1e-2f);
  expect_gradient(objective, a, da, "relu da", 1e-2f);
}

TEST_P(CnnLayers, LinearAndSoftmaxCrossEntropyGradientsMatchFiniteDifferences) {
  constexpr int kRows = 3, kIn = 5, kClasses = 4;
  std::vector<float> x = random_values(kRows * kIn, 31), w = random_values(kClasses * kIn, 32);
  std::vector<float> bias = random_values(kClasses, 33);
  std::vector<std::int32_t> labels = {2, 0, 3};
  std::vector<float> logits(kRows * kClasses), grad(kRows * kClasses);
  double stats[2] = {0.0, 0.0};
  auto objective = [&] {
    math_.gemm(layers::Transpose::no, layers::Transpose::yes, kRows, kClasses, kIn, 1.0f, x.data(),
               w.data(), 0.0f, logits.data());
    math_.bias_activation(logits.data(), bias.data(), kRows, kClasses, false);
    stats[0] = 0.0;
    math_.softmax_cross_entropy(logits.data(), labels.data(), kRows, kClasses, 1.0f, grad.data(),
                                stats);
    stream_.synchronize();
    return stats[0];
  };
  objective();
  std::vector<float> dw(w.size()), dbias(bias.size()), dx(x.size());
  math_.gemm(layers::Transpose::yes, layers::Transpose::no, kClasses, kIn, kRows, 1.0f, grad.data(),
             x.data(), 0.0f, dw.data());
  math_.column_sums(grad.data(), kRows, kClasses, dbias.data());
  math_.gemm(layers::Transpose::no, layers::Transpose::no, kRows, kIn, kClasses, 1.0f, grad.data(),
             w.data(), 0.0f, dx.data());
  stream_.synchronize();
  expect_gradient(objective, w, dw, "linear dw", 1e-2f);
  expect_gradient(objective, bias, dbias, "linear dbias", 1e-2f);
  expect_gradient(objective, x, dx, "linear dx", 1e-2f);
}

TEST_P(CnnLayers, RejectsMismatchedViews) {
  ConvGeometry g{.input = {1, 2, 4, 4}, .filters = 2, .kernel = 3, .stride = 1, .padding = 1};
  std::vector<float> x(g.input.count()), w(g.weight_count() - 1), y(g.output().count());
  EXPECT_THROW(ops_.conv_forward(g, view(x), view(w), view(y)), cohort::InvalidArgument);
  std::vector<cohort::bfloat16> half_w(g.weight_count());
  EXPECT_THROW(ops_.conv_forward(g, view(x), std::span<cohort::bfloat16>(half_w), view(y)),
               cohort::InvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(Host, CnnLayers, ::testing::Values(Layout::nchw, Layout::nhwc),
                         [](const ::testing::TestParamInfo<Layout>& test) {
                           return test.param == Layout::nchw ? std::string("nchw")
                                                             : std::string("nhwc");
                         });

}  // namespace
