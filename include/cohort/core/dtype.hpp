#pragma once

/// @file
/// Element types of buffers and collectives.

#include <cohort/core/float16.hpp>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <type_traits>

namespace cohort {

enum class DType : std::uint8_t { f32, f64, f16, bf16, i32, i64, u8 };

/// Every dtype, in declaration order (for typed sweeps in tests and benchmarks).
inline constexpr DType kAllDTypes[] = {DType::f32, DType::f64, DType::f16, DType::bf16,
                                       DType::i32, DType::i64, DType::u8};

/// Bytes per element.
constexpr std::size_t size_of(DType dtype) noexcept {
  switch (dtype) {
    case DType::f32:
      return 4;
    case DType::f64:
      return 8;
    case DType::f16:
      return 2;
    case DType::bf16:
      return 2;
    case DType::i32:
      return 4;
    case DType::i64:
      return 8;
    case DType::u8:
      return 1;
  }
  return 0;
}

/// "f32", "f64", "f16", "bf16", "i32", "i64", "u8".
constexpr std::string_view to_string(DType dtype) noexcept {
  switch (dtype) {
    case DType::f32:
      return "f32";
    case DType::f64:
      return "f64";
    case DType::f16:
      return "f16";
    case DType::bf16:
      return "bf16";
    case DType::i32:
      return "i32";
    case DType::i64:
      return "i64";
    case DType::u8:
      return "u8";
  }
  return "unknown";
}

constexpr bool is_floating_point(DType dtype) noexcept {
  return dtype == DType::f32 || dtype == DType::f64 || dtype == DType::f16 || dtype == DType::bf16;
}

/// Parses a name as `to_string` writes it; also accepts the common aliases float, double, half,
/// bfloat16, int32, int64, uint8. Returns nullopt for anything else.
std::optional<DType> parse_dtype(std::string_view text) noexcept;

/// The dtype of a C++ element type: `dtype_of<float>() == DType::f32`.
template <typename T>
struct DTypeOf;
template <>
struct DTypeOf<float> {
  static constexpr DType value = DType::f32;
};
template <>
struct DTypeOf<double> {
  static constexpr DType value = DType::f64;
};
template <>
struct DTypeOf<half> {
  static constexpr DType value = DType::f16;
};
template <>
struct DTypeOf<bfloat16> {
  static constexpr DType value = DType::bf16;
};
template <>
struct DTypeOf<std::int32_t> {
  static constexpr DType value = DType::i32;
};
template <>
struct DTypeOf<std::int64_t> {
  static constexpr DType value = DType::i64;
};
template <>
struct DTypeOf<std::uint8_t> {
  static constexpr DType value = DType::u8;
};

template <typename T>
constexpr DType dtype_of() noexcept {
  return DTypeOf<T>::value;
}

/// `value` as an element of type T: through float, rounding to nearest even, for `half` and
/// `bfloat16`; as `static_cast` converts it otherwise. With `to_double`, a way to write and read
/// the elements of any dtype in code written once for all (`visit_dtype`).
template <typename T>
T from_double(double value) {
  if constexpr (std::is_same_v<T, half> || std::is_same_v<T, bfloat16>) {
    return T(static_cast<float>(value));
  } else {
    return static_cast<T>(value);
  }
}

/// An element's value as a double, exact for every element type.
template <typename T>
double to_double(T value) {
  if constexpr (std::is_same_v<T, half> || std::is_same_v<T, bfloat16>) {
    return static_cast<double>(static_cast<float>(value));
  } else {
    return static_cast<double>(value);
  }
}

/// Calls `fn(T{})` with the C++ type of `dtype`: a single switch that the rest of the code reuses
/// instead of writing its own.
template <typename Fn>
decltype(auto) visit_dtype(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::f32:
      return fn(float{});
    case DType::f64:
      return fn(double{});
    case DType::f16:
      return fn(half{});
    case DType::bf16:
      return fn(bfloat16{});
    case DType::i32:
      return fn(std::int32_t{});
    case DType::i64:
      return fn(std::int64_t{});
    case DType::u8:
      return fn(std::uint8_t{});
  }
  return fn(std::uint8_t{});
}

}  // namespace cohort
