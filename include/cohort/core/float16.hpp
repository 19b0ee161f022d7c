#pragma once

/// @file
/// 16-bit floating-point storage types, `cohort::half` (IEEE binary16) and `cohort::bfloat16`
/// (bfloat16), usable in host code and in CUDA kernels.
///
/// They are storage types: arithmetic converts to float. Their bits are those of CUDA's `__half`
/// and `__nv_bfloat16`, so arrays of either may be reinterpreted as the other, and conversion from
/// float rounds to nearest even as CUDA's `__float2half_rn` and `__float2bfloat16_rn` do (tested
/// bit for bit against CUDA's headers). No CUDA header is needed to use them.

#include <cohort/core/host_device.hpp>

#include <cstdint>
#include <cstring>

namespace cohort {
namespace detail {

COHORT_HOST_DEVICE inline std::uint32_t float_bits(float value) {
  std::uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

COHORT_HOST_DEVICE inline float bits_float(std::uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

/// float -> binary16, round to nearest even; NaN becomes the canonical quiet NaN 0x7FFF (as CUDA
/// does), overflow becomes infinity.
COHORT_HOST_DEVICE inline std::uint16_t float_to_half_bits(float value) {
  const std::uint32_t bits = float_bits(value);
  const std::uint32_t sign = (bits >> 16) & 0x8000u;
  const std::uint32_t exponent = (bits >> 23) & 0xFFu;
  std::uint32_t mantissa = bits & 0x7FFFFFu;

  if (exponent == 0xFFu) {  // infinity or NaN
    return static_cast<std::uint16_t>(mantissa != 0 ? 0x7FFFu : (sign | 0x7C00u));
  }
  // Unbiased exponent, rebiased for binary16 (bias 15).
  const int half_exponent = static_cast<int>(exponent) - 127 + 15;
  if (half_exponent >= 0x1F) {  // too large: infinity
    return static_cast<std::uint16_t>(sign | 0x7C00u);
  }
  if (half_exponent <= 0) {  // subnormal in binary16, or zero
    if (half_exponent < -10) {
      return static_cast<std::uint16_t>(sign);  // rounds to zero
    }
    mantissa |= 0x800000u;  // implicit leading one
    const int shift = 14 - half_exponent;
    const std::uint32_t half_mantissa = mantissa >> shift;
    const std::uint32_t remainder = mantissa & ((1u << shift) - 1u);
    const std::uint32_t halfway = 1u << (shift - 1);
    std::uint32_t result = half_mantissa;
    if (remainder > halfway || (remainder == halfway && (half_mantissa & 1u) != 0)) {
      ++result;  // may carry into the smallest normal: still the right bits
    }
    return static_cast<std::uint16_t>(sign | result);
  }
  std::uint32_t result = (static_cast<std::uint32_t>(half_exponent) << 10) | (mantissa >> 13);
  const std::uint32_t remainder = mantissa & 0x1FFFu;
  if (remainder > 0x1000u || (remainder == 0x1000u && (result & 1u) != 0)) {
    ++result;  // may carry into the exponent, up to infinity: still the right bits
  }
  return static_cast<std::uint16_t>(sign | result);
}

/// binary16 -> float, exact.
COHORT_HOST_DEVICE inline float half_bits_to_float(std::uint16_t half_bits) {
  const std::uint32_t sign = (static_cast<std::uint32_t>(half_bits) & 0x8000u) << 16;
  const std::uint32_t exponent = (half_bits >> 10) & 0x1Fu;
  std::uint32_t mantissa = half_bits & 0x3FFu;
  if (exponent == 0x1Fu) {
    return bits_float(sign | 0x7F800000u | (mantissa << 13));
  }
  if (exponent == 0) {
    if (mantissa == 0) {
      return bits_float(sign);
    }
    // Subnormal: normalise.
    int shift = 0;
    while ((mantissa & 0x400u) == 0) {
      mantissa <<= 1;
      ++shift;
    }
    mantissa &= 0x3FFu;
    const std::uint32_t float_exponent = static_cast<std::uint32_t>(127 - 15 + 1 - shift);
    return bits_float(sign | (float_exponent << 23) | (mantissa << 13));
  }
  return bits_float(sign | ((exponent + 127u - 15u) << 23) | (mantissa << 13));
}

/// float -> bfloat16, round to nearest even; NaN becomes the canonical quiet NaN 0x7FFF.
COHORT_HOST_DEVICE inline std::uint16_t float_to_bfloat16_bits(float value) {
  const std::uint32_t bits = float_bits(value);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) {
    return 0x7FFFu;
  }
  const std::uint32_t rounding = 0x7FFFu + ((bits >> 16) & 1u);
  return static_cast<std::uint16_t>((bits + rounding) >> 16);
}

COHORT_HOST_DEVICE inline float bfloat16_bits_to_float(std::uint16_t bfloat16_bits) {
  return bits_float(static_cast<std::uint32_t>(bfloat16_bits) << 16);
}

}  // namespace detail

/// IEEE 754 binary16, bit-compatible with CUDA's `__half`.
struct alignas(2) half {
  std::uint16_t bits = 0;

  half() = default;
  COHORT_HOST_DEVICE explicit half(float value) : bits(detail::float_to_half_bits(value)) {}
  COHORT_HOST_DEVICE explicit operator float() const { return detail::half_bits_to_float(bits); }
  COHORT_HOST_DEVICE static half from_bits(std::uint16_t raw) {
    half h;
    h.bits = raw;
    return h;
  }
};

/// bfloat16 (8-bit exponent, 7-bit mantissa), bit-compatible with CUDA's `__nv_bfloat16`.
struct alignas(2) bfloat16 {
  std::uint16_t bits = 0;

  bfloat16() = default;
  COHORT_HOST_DEVICE explicit bfloat16(float value) : bits(detail::float_to_bfloat16_bits(value)) {}
  COHORT_HOST_DEVICE explicit operator float() const {
    return detail::bfloat16_bits_to_float(bits);
  }
  COHORT_HOST_DEVICE static bfloat16 from_bits(std::uint16_t raw) {
    bfloat16 b;
    b.bits = raw;
    return b;
  }
};

static_assert(sizeof(half) == 2 && alignof(half) == 2);
static_assert(sizeof(bfloat16) == 2 && alignof(bfloat16) == 2);

}  // namespace cohort
