// The host GEMM runs the kernels the CPU can (Note [OpenBLAS kernels] in host_blas.cpp), and they
// compute what a plain loop computes.

#include <layers/host_blas.hpp>
#include <layers/math.hpp>

#include <cohort/core/stream.hpp>

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

namespace {

TEST(HostBlas, NamesTheKernelFamiliesWithoutAvx2) {
  for (const char* older : {"Prescott", "PRESCOTT", "Core2", "Nehalem", "Sandybridge", "Barcelona"}) {
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

}  // namespace
