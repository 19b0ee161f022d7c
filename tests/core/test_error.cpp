#include <cohort/core/error.hpp>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>

#include <string>

namespace {

using ::testing::HasSubstr;

std::string message_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const cohort::Error& error) {
    return error.what();
  }
  return "<nothing thrown>";
}

TEST(Error, HierarchyLetsCallersCatchByKind) {
  EXPECT_THROW(throw cohort::TimeoutError("t"), cohort::Error);
  EXPECT_THROW(throw cohort::OutOfMemory("m"), cohort::Error);
  EXPECT_THROW(throw cohort::CudaError("c"), cohort::Error);
  EXPECT_THROW(throw cohort::NcclError("n"), cohort::Error);
  EXPECT_THROW(throw cohort::InvalidArgument("i"), std::runtime_error);
}

TEST(Error, ExpectsThrowsInvalidArgumentWithMessageFileAndLine) {
  const int line = __LINE__ + 1;
  auto fail = [] { COHORT_EXPECTS(1 + 1 == 3, "arithmetic is " + std::string("broken")); };
  EXPECT_THROW(fail(), cohort::InvalidArgument);
  const std::string text = message_of(fail);
  EXPECT_THAT(text, HasSubstr("cohort: arithmetic is broken"));
  EXPECT_THAT(text, HasSubstr("test_error.cpp:" + std::to_string(line)));
}

TEST(Error, ExpectsPassesSilentlyAndEvaluatesMessageOnlyOnFailure) {
  int evaluated = 0;
  auto message = [&] {
    ++evaluated;
    return std::string("never");
  };
  COHORT_EXPECTS(true, message());
  EXPECT_EQ(evaluated, 0);
}

TEST(Error, ComparisonChecksPrintBothValues) {
  const int rank = 4;
  const int world_size = 4;
  const std::string text =
      message_of([&] { COHORT_EXPECTS_LT(rank, world_size, "rank must be below world size"); });
  EXPECT_THAT(text, HasSubstr("expected rank < world_size, but got 4 and 4"));
  EXPECT_THAT(text, HasSubstr("rank must be below world size"));

  const std::string strings =
      message_of([] { COHORT_EXPECTS_EQ(std::string("f32"), std::string(""), ""); });
  EXPECT_THAT(strings, HasSubstr("\"f32\" and \"\""));
}

TEST(Error, CheckAndFailThrowTheNamedType) {
  EXPECT_THROW(COHORT_CHECK(false, cohort::TimeoutError, "late"), cohort::TimeoutError);
  EXPECT_THROW(COHORT_FAIL(cohort::OutOfMemory, "full"), cohort::OutOfMemory);
  EXPECT_NO_THROW(COHORT_CHECK(true, cohort::TimeoutError, "late"));
}

}  // namespace
