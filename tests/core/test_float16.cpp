#include <cohort/core/float16.hpp>

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>

#if COHORT_WITH_CUDA
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#endif

namespace {

template <typename T>
float to_float(std::uint16_t bits) {
  return static_cast<float>(T::from_bits(bits));
}

template <typename T>
std::uint16_t bits_of(float value) {
  return T(value).bits;
}

bool is_nan_half(std::uint16_t bits) {
  return (bits & 0x7C00u) == 0x7C00u && (bits & 0x3FFu);
}
bool is_nan_bfloat16(std::uint16_t bits) {
  return (bits & 0x7F80u) == 0x7F80u && (bits & 0x7Fu);
}

// Every finite value converts back to itself, and every midpoint between two neighbours rounds to
// the even one, with the floats just either side going to the nearer neighbour.
template <typename T>
void check_exhaustively(std::uint16_t largest_finite, bool (*is_nan)(std::uint16_t)) {
  for (std::uint32_t bits = 0; bits <= 0xFFFFu; ++bits) {
    const auto raw = static_cast<std::uint16_t>(bits);
    const float value = to_float<T>(raw);
    if (is_nan(raw)) {
      EXPECT_TRUE(std::isnan(value)) << bits;
      EXPECT_TRUE(is_nan(bits_of<T>(value))) << bits;
      continue;
    }
    if (raw == 0x8000u) {
      EXPECT_EQ(bits_of<T>(value), 0x8000u);  // negative zero keeps its sign
      continue;
    }
    ASSERT_EQ(bits_of<T>(value), raw) << "round trip of " << bits;
  }
  for (std::uint16_t sign : {std::uint16_t{0}, std::uint16_t{0x8000}}) {
    for (std::uint16_t low = 0; low < largest_finite; ++low) {
      const auto a = static_cast<std::uint16_t>(sign | low);
      const auto b = static_cast<std::uint16_t>(sign | (low + 1));
      const float fa = to_float<T>(a);
      const float fb = to_float<T>(b);
      const double exact_middle = (static_cast<double>(fa) + static_cast<double>(fb)) / 2.0;
      const auto middle = static_cast<float>(exact_middle);
      ASSERT_EQ(static_cast<double>(middle), exact_middle) << "midpoint not exact";
      const std::uint16_t even = (low & 1u) == 0 ? a : b;
      ASSERT_EQ(bits_of<T>(middle), even) << "tie at " << middle;
      const float toward_a = std::nextafter(middle, fa);
      const float toward_b = std::nextafter(middle, fb);
      ASSERT_EQ(bits_of<T>(toward_a), a) << toward_a;
      ASSERT_EQ(bits_of<T>(toward_b), b) << toward_b;
    }
  }
}

TEST(Half, ExhaustiveRoundTripAndRoundToNearestEven) {
  check_exhaustively<cohort::half>(0x7BFFu, is_nan_half);
}

TEST(BFloat16, ExhaustiveRoundTripAndRoundToNearestEven) {
  check_exhaustively<cohort::bfloat16>(0x7F7Fu, is_nan_bfloat16);
}

TEST(Half, OverflowUnderflowAndSpecialValues) {
  EXPECT_EQ(bits_of<cohort::half>(65504.0f), 0x7BFFu);
  EXPECT_EQ(bits_of<cohort::half>(65519.99f), 0x7BFFu);
  EXPECT_EQ(bits_of<cohort::half>(65520.0f), 0x7C00u);  // ties away from the largest finite (odd)
  EXPECT_EQ(bits_of<cohort::half>(1e10f), 0x7C00u);
  EXPECT_EQ(bits_of<cohort::half>(-1e10f), 0xFC00u);
  EXPECT_EQ(bits_of<cohort::half>(std::numeric_limits<float>::infinity()), 0x7C00u);
  EXPECT_EQ(bits_of<cohort::half>(std::ldexp(1.0f, -25)), 0x0000u);  // tie to even zero
  EXPECT_EQ(bits_of<cohort::half>(std::nextafter(std::ldexp(1.0f, -25), 1.0f)), 0x0001u);
  EXPECT_EQ(bits_of<cohort::half>(1e-30f), 0x0000u);
  EXPECT_EQ(bits_of<cohort::half>(std::nanf("")), 0x7FFFu);
  EXPECT_EQ(to_float<cohort::half>(0x3C00u), 1.0f);
  EXPECT_EQ(to_float<cohort::half>(0x0001u), std::ldexp(1.0f, -24));
}

TEST(BFloat16, OverflowAndSpecialValues) {
  EXPECT_EQ(bits_of<cohort::bfloat16>(1.0f), 0x3F80u);
  EXPECT_EQ(bits_of<cohort::bfloat16>(std::numeric_limits<float>::max()), 0x7F80u);
  EXPECT_EQ(bits_of<cohort::bfloat16>(-std::numeric_limits<float>::infinity()), 0xFF80u);
  EXPECT_EQ(bits_of<cohort::bfloat16>(std::nanf("")), 0x7FFFu);
  EXPECT_EQ(to_float<cohort::bfloat16>(0xC000u), -2.0f);
}

#if COHORT_WITH_CUDA
std::uint16_t raw_bits(__half value) {
  return static_cast<__half_raw>(value).x;
}
std::uint16_t raw_bits(__nv_bfloat16 value) {
  return static_cast<__nv_bfloat16_raw>(value).x;
}

TEST(Float16, BitForBitWithCudaHostConversions) {
  static_assert(sizeof(__half) == sizeof(cohort::half));
  static_assert(sizeof(__nv_bfloat16) == sizeof(cohort::bfloat16));
  std::mt19937 generator(20261202);
  std::uniform_int_distribution<std::uint32_t> any_bits;
  for (int i = 0; i < 2'000'000; ++i) {
    const std::uint32_t bits = any_bits(generator);
    float value;
    std::memcpy(&value, &bits, sizeof(value));
    ASSERT_EQ(bits_of<cohort::half>(value), raw_bits(__float2half_rn(value))) << value;
    ASSERT_EQ(bits_of<cohort::bfloat16>(value), raw_bits(__float2bfloat16_rn(value))) << value;
  }
  for (std::uint32_t bits = 0; bits <= 0xFFFFu; ++bits) {
    const auto raw = static_cast<std::uint16_t>(bits);
    __half_raw half_raw;
    half_raw.x = raw;
    const __half cuda_half = half_raw;
    __nv_bfloat16_raw bfloat16_raw;
    bfloat16_raw.x = raw;
    const __nv_bfloat16 cuda_bfloat16 = bfloat16_raw;
    const float ours_half = to_float<cohort::half>(raw);
    const float theirs_half = __half2float(cuda_half);
    if (!std::isnan(theirs_half)) {
      ASSERT_EQ(ours_half, theirs_half) << bits;
    }
    const float theirs_bfloat16 = __bfloat162float(cuda_bfloat16);
    if (!std::isnan(theirs_bfloat16)) {
      ASSERT_EQ(to_float<cohort::bfloat16>(raw), theirs_bfloat16) << bits;
    }
  }
}
#endif

}  // namespace
