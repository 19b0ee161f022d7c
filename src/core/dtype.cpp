#include <cohort/core/dtype.hpp>

#include <array>
#include <utility>

namespace cohort {

std::optional<DType> parse_dtype(std::string_view text) noexcept {
  static constexpr std::array<std::pair<std::string_view, DType>, 14> kNames = {{
      {"f32", DType::f32},
      {"float", DType::f32},
      {"f64", DType::f64},
      {"double", DType::f64},
      {"f16", DType::f16},
      {"half", DType::f16},
      {"bf16", DType::bf16},
      {"bfloat16", DType::bf16},
      {"i32", DType::i32},
      {"int32", DType::i32},
      {"i64", DType::i64},
      {"int64", DType::i64},
      {"u8", DType::u8},
      {"uint8", DType::u8},
  }};
  for (const auto& [name, dtype] : kNames) {
    if (name == text) {
      return dtype;
    }
  }
  return std::nullopt;
}

}  // namespace cohort
