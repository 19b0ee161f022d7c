#include <cohort/core/device.hpp>
#include <cohort/core/dtype.hpp>

#include <gtest/gtest.h>

#include <string>

namespace {

TEST(DType, SizesAndNamesRoundTrip) {
  const std::pair<cohort::DType, std::size_t> expected[] = {
      {cohort::DType::f32, 4},  {cohort::DType::f64, 8}, {cohort::DType::f16, 2},
      {cohort::DType::bf16, 2}, {cohort::DType::i32, 4}, {cohort::DType::i64, 8},
      {cohort::DType::u8, 1}};
  for (const auto& [dtype, size] : expected) {
    EXPECT_EQ(cohort::size_of(dtype), size) << cohort::to_string(dtype);
    EXPECT_EQ(cohort::parse_dtype(cohort::to_string(dtype)), dtype);
  }
  EXPECT_EQ(std::size(cohort::kAllDTypes), std::size(expected));
}

TEST(DType, ParsesAliasesAndRejectsUnknownNames) {
  EXPECT_EQ(cohort::parse_dtype("float"), cohort::DType::f32);
  EXPECT_EQ(cohort::parse_dtype("bfloat16"), cohort::DType::bf16);
  EXPECT_EQ(cohort::parse_dtype("half"), cohort::DType::f16);
  EXPECT_EQ(cohort::parse_dtype("int64"), cohort::DType::i64);
  EXPECT_EQ(cohort::parse_dtype("f8"), std::nullopt);
  EXPECT_EQ(cohort::parse_dtype("F32"), std::nullopt);
}

TEST(DType, TypeMappingAgreesWithSizes) {
  for (cohort::DType dtype : cohort::kAllDTypes) {
    const std::size_t size = cohort::visit_dtype(dtype, [](auto value) {
      using T = decltype(value);
      EXPECT_EQ(cohort::dtype_of<T>(), cohort::dtype_of<T>());
      return sizeof(T);
    });
    EXPECT_EQ(size, cohort::size_of(dtype)) << cohort::to_string(dtype);
    const cohort::DType round_trip =
        cohort::visit_dtype(dtype, [](auto value) { return cohort::dtype_of<decltype(value)>(); });
    EXPECT_EQ(round_trip, dtype);
  }
  EXPECT_TRUE(cohort::is_floating_point(cohort::DType::bf16));
  EXPECT_FALSE(cohort::is_floating_point(cohort::DType::u8));
}

TEST(Device, NamesAndEquality) {
  EXPECT_EQ(cohort::Device::host().to_string(), "host");
  EXPECT_EQ(cohort::Device::cuda(3).to_string(), "cuda:3");
  EXPECT_EQ(cohort::Device::cuda(1), cohort::Device::cuda(1));
  EXPECT_NE(cohort::Device::cuda(1), cohort::Device::cuda(2));
  EXPECT_NE(cohort::Device::cuda(0), cohort::Device::host());
  EXPECT_TRUE(cohort::Device::host().is_host());
  EXPECT_TRUE(cohort::Device::cuda(0).is_cuda());
}

TEST(Device, CountIsNeverNegativeAndZeroComesWithAReason) {
  const int count = cohort::cuda_device_count();
  EXPECT_GE(count, 0);
  if (count == 0) {
    EXPECT_FALSE(cohort::cuda_unavailable_reason().empty());
  } else {
    EXPECT_TRUE(cohort::built_with_cuda());
    EXPECT_TRUE(cohort::cuda_unavailable_reason().empty());
  }
  if (!cohort::built_with_cuda()) {
    EXPECT_EQ(count, 0);
  }
}

}  // namespace
