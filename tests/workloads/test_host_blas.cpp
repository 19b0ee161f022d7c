// The host GEMM runs the kernels the CPU can (Note [OpenBLAS kernels] in host_blas.cpp), and they
// compute what a plain loop computes. The benchmarks' work on a Math: real-valued fills, GEMM work
// shaped to the FLOPs asked for, one math mode.

#include <layers/host_blas.hpp>
#include <layers/math.hpp>

#include <cohort/core/float16.hpp>
#include <cohort/core/stream.hpp>
#include <cohort/core/tensor_view.hpp>

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

namespace {

TEST(HostBlas, NamesTheKernelFamiliesWithoutAvx2) {
  for (const char* older :
       {"Prescott", "PRESCOTT", "Core2", "Nehalem", "Sandybridge", "Barcelona"}) {
    EXPECT_TRUE(layers::host_blas_kernels_lack_avx2(older)) << older;
  }
  for (const char* newer : {"Haswell", "SkylakeX", "Cooperlake", "SapphireRapids", "Zen"}) {
    EXPECT_FALSE(layers::host_blas_kernels_lack_avx2(newer)) << newer;
  }
}

TEST(HostBlas, RunsKernelsWithTheCpusVectorWidth) {
  if (layers::host_blas_kernels_set_by_user()) {
    GTEST_SKIP() << "OPENBLAS_CORETYPE is set: the user's kernels stand";
  }
  const std::string wanted = layers::host_blas_kernels_for_this_cpu();
  if (wanted.empty()) GTEST_SKIP() << "this CPU has no AVX2 with FMA";
  const std::string running = layers::host_blas_kernels();
  EXPECT_FALSE(layers::host_blas_kernels_lack_avx2(running))
      << "OpenBLAS runs its " << running << " kernels on a CPU with " << wanted << "'s features";
  EXPECT_NE(layers::describe_host_blas().find(running + " kernels"), std::string::npos)
      << layers::describe_host_blas();
}

TEST(HostBlas, GemmAgreesWithAPlainLoopOnOddShapes) {
  layers::Math math(cohort::Stream::create(cohort::Device::host()));
  EXPECT_NE(layers::describe_host_blas().find("1 thread per rank"), std::string::npos)
      << layers::describe_host_blas();
  constexpr std::size_t m = 37, n = 129, k = 67;
  std::mt19937 generator(7);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> a(m * k), b(n * k);
  for (float& value : a) value = uniform(generator);
  for (float& value : b) value = uniform(generator);
  std::vector<float> c(m * n, 0.0f);
  // C [m, n] = A [m, k] . B^T, B [n, k]: the forward shape of a linear layer.
  math.gemm(layers::Transpose::no, layers::Transpose::yes, static_cast<int>(m), static_cast<int>(n),
            static_cast<int>(k), 1.0f, a.data(), b.data(), 0.0f, c.data());
  math.stream().synchronize();
  for (std::size_t i = 0; i < m; ++i) {
    for (std::size_t j = 0; j < n; ++j) {
      double expected = 0.0;
      for (std::size_t p = 0; p < k; ++p) {
        expected += static_cast<double>(a[i * k + p]) * static_cast<double>(b[j * k + p]);
      }
      ASSERT_NEAR(c[i * n + j], expected, 1e-4 * k) << i << ", " << j;
    }
  }
}

TEST(MathWork, FillUniformWritesBoundedSeededValuesInBothDtypes) {
  layers::Math math(cohort::Stream::create(cohort::Device::host()));
  constexpr std::size_t kCount = 4096;
  constexpr float kBound = 0.25f;
  std::vector<float> first(kCount), again(kCount), other(kCount);
  const auto view = [](std::vector<float>& values) {
    return cohort::TensorView::of(values.data(), values.size(), cohort::Device::host());
  };
  math.fill_uniform(view(first), kBound, 5);
  math.fill_uniform(view(again), kBound, 5);
  math.fill_uniform(view(other), kBound, 6);
  EXPECT_EQ(first, again) << "the same seed must give the same values on every rank";
  EXPECT_NE(first, other);
  double sum = 0.0, sum_of_squares = 0.0;
  std::size_t zeros = 0;
  for (float value : first) {
    ASSERT_LE(std::abs(value), kBound) << value;
    zeros += value == 0.0f ? 1 : 0;
    sum += static_cast<double>(value);
    sum_of_squares += static_cast<double>(value) * static_cast<double>(value);
  }
  EXPECT_LT(zeros, 4u);
  // Uniform in [-b, b]: mean 0, variance b^2 / 3 (4096 samples: within a few standard errors).
  EXPECT_NEAR(sum / kCount, 0.0, 0.02);
  EXPECT_NEAR(sum_of_squares / kCount, static_cast<double>(kBound * kBound) / 3.0, 0.004);

  std::vector<cohort::bfloat16> halves(kCount);
  math.fill_uniform(cohort::TensorView::of(halves.data(), halves.size(), cohort::Device::host()),
                    kBound, 5);
  for (std::size_t i = 0; i < kCount; ++i) {
    // bf16 rounds to 8 significant bits: within 2^-8 of the f32 value, relatively.
    ASSERT_NEAR(static_cast<float>(halves[i]), first[i], std::abs(first[i]) / 256.0f + 1e-30f) << i;
  }
}

TEST(MathWork, GemmWorkShapeCoversTheFlopsAskedFor) {
  for (double flops : {1e8, 7.3e8, 4.1e9, 2.5e10, 3.3e11}) {
    const layers::GemmWorkShape shape = layers::gemm_work_shape(flops);
    ASSERT_GT(shape.repeats, 0) << flops;
    EXPECT_EQ(shape.depth % 8, 0) << flops;
    EXPECT_LE(shape.depth, 4096) << flops;
    const double done = 2.0 * shape.side * shape.side * shape.depth * shape.repeats;
    EXPECT_NEAR(done / flops, 1.0, 0.05) << flops << " FLOPs: " << shape.repeats << " x ["
                                         << shape.side << ", " << shape.depth << "]";
  }
  EXPECT_EQ(layers::gemm_work_shape(1e5).repeats, 0) << "below a few MFLOP nothing is launched";
}

TEST(MathWork, MathModeIsFp32UntilSetAndNamesItself) {
  layers::Math math(cohort::Stream::create(cohort::Device::host()));
  EXPECT_EQ(math.math_mode(), layers::MathMode::fp32);
  math.set_math_mode(layers::MathMode::tf32);
  EXPECT_EQ(math.math_mode(), layers::MathMode::tf32);
  EXPECT_STREQ(layers::to_string(layers::MathMode::fp32), "fp32");
  EXPECT_STREQ(layers::to_string(layers::MathMode::tf32), "tf32");
}

}  // namespace
