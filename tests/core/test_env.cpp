#include <cohort/core/env.hpp>
#include <cohort/core/error.hpp>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <string>

namespace {

using ::testing::HasSubstr;
using namespace std::chrono_literals;
namespace env = cohort::env;

cohort::EnvLookup lookup_of(std::map<std::string, std::string> values) {
  return [values = std::move(values)](std::string_view name) -> std::optional<std::string> {
    auto found = values.find(std::string(name));
    if (found == values.end()) return std::nullopt;
    return found->second;
  };
}

TEST(EnvBoolean, AcceptsTheUsualSpellingsOfBothValues) {
  for (const char* on : {"1", "true", "TRUE", "Yes", "on"}) {
    EXPECT_TRUE(env::parse_bool("COHORT_X", on)) << on;
  }
  for (const char* off : {"0", "false", "False", "no", "OFF"}) {
    EXPECT_FALSE(env::parse_bool("COHORT_X", off)) << off;
  }
}

TEST(EnvBoolean, RejectsAnythingElseNamingTheVariable) {
  for (const char* bad : {"2", "enable", "y", " 1", "-1", "truee"}) {
    try {
      env::parse_bool("COHORT_DEBUG_COLLECTIVES", bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const cohort::InvalidArgument& error) {
      EXPECT_THAT(error.what(), HasSubstr("COHORT_DEBUG_COLLECTIVES='" + std::string(bad) + "'"));
      EXPECT_THAT(error.what(), HasSubstr("0, false, no or off"));
    }
  }
}

TEST(EnvBoolean, FalseMeansOffAndUnsetOrEmptyMeansTheFallback) {
  // COHORT_DEBUG_COLLECTIVES=false once switched the check on.
  EXPECT_FALSE(
      env::boolean(lookup_of({{"COHORT_DEBUG_COLLECTIVES", "false"}}), env::kDebugCollectives));
  EXPECT_TRUE(
      env::boolean(lookup_of({{"COHORT_DEBUG_COLLECTIVES", "on"}}), env::kDebugCollectives));
  EXPECT_FALSE(env::boolean(lookup_of({}), env::kDebugCollectives));
  EXPECT_TRUE(env::boolean(lookup_of({}), env::kDebugCollectives, true));
  EXPECT_TRUE(
      env::boolean(lookup_of({{"COHORT_DEBUG_COLLECTIVES", ""}}), env::kDebugCollectives, true));
}

TEST(EnvDuration, ParsesSecondsAndUnits) {
  EXPECT_EQ(env::parse_duration("T", "600"), 10min);
  EXPECT_EQ(env::parse_duration("T", "0.5"), 500ms);
  EXPECT_EQ(env::parse_duration("T", "90s"), 90s);
  EXPECT_EQ(env::parse_duration("T", "500ms"), 500ms);
  EXPECT_EQ(env::parse_duration("T", "10m"), 10min);
  EXPECT_EQ(env::parse_duration("T", "1.5h"), 90min);
  EXPECT_EQ(env::parse_duration("T", "1ms"), 1ms);
  EXPECT_EQ(env::parse_duration("T", "720h"), 720h);
}

TEST(EnvDuration, RejectsZeroNegativeNanTinyHugeAndUnknownUnits) {
  // The default range is 1 ms to 30 days (COHORT_TIMEOUT and every other duration variable).
  const std::map<std::string, std::string> cases = {{"", "is not a duration"},
                                                    {"abc", "is not a duration"},
                                                    {"-5", "is negative"},
                                                    {"0", "is zero"},
                                                    {"0ms", "is zero"},
                                                    {"nan", "is not a number"},
                                                    {"inf", "is infinite"},
                                                    {"10 minutes", "has an unknown unit"},
                                                    {"5d", "has an unknown unit"},
                                                    {"0.5ms", "is too short"},
                                                    {"1e-9", "is too short"},
                                                    {"0.0001", "is too short"},
                                                    {"721h", "is too long"},
                                                    {"3000000h", "is too long"},
                                                    {"1e30", "is too long"},
                                                    {"1e400", "is out of range"}};
  for (const auto& [bad, problem] : cases) {
    try {
      env::parse_duration("COHORT_TIMEOUT", bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const cohort::InvalidArgument& error) {
      EXPECT_THAT(error.what(), HasSubstr("COHORT_TIMEOUT='" + bad + "' " + problem));
      EXPECT_THAT(error.what(), HasSubstr("from 1 ms to 30 days"));
    }
  }
}

TEST(EnvDuration, HonoursACallersRange) {
  const env::DurationRange range{1s, 1h};
  EXPECT_EQ(env::parse_duration("T", "1s", range), 1s);
  EXPECT_EQ(env::parse_duration("T", "1h", range), 1h);
  EXPECT_THROW(env::parse_duration("T", "999ms", range), cohort::InvalidArgument);
  EXPECT_THROW(env::parse_duration("T", "61m", range), cohort::InvalidArgument);
}

TEST(EnvText, EmptyCountsAsUnset) {
  EXPECT_EQ(env::text(lookup_of({{"COHORT_STORE", ""}}), env::kStore), std::nullopt);
  EXPECT_EQ(env::text(lookup_of({{"COHORT_STORE", "tcp"}}), env::kStore), "tcp");
}

}  // namespace
