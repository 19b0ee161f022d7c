#include <cohort/version.hpp>

#include <gtest/gtest.h>

#include <string>

namespace {

TEST(Version, LibraryMatchesHeaders) {
  const std::string expected = std::to_string(COHORT_VERSION_MAJOR) + "." +
                               std::to_string(COHORT_VERSION_MINOR) + "." +
                               std::to_string(COHORT_VERSION_PATCH);
  EXPECT_EQ(std::string(cohort::version()), expected);
  EXPECT_EQ(std::string(COHORT_VERSION_STRING), expected);
}

}  // namespace
