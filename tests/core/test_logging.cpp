#include <cohort/core/logging.hpp>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

using ::testing::HasSubstr;

TEST(Logging, ParsesLevelNamesCaseInsensitively) {
  EXPECT_EQ(cohort::parse_log_level("error"), cohort::LogLevel::error);
  EXPECT_EQ(cohort::parse_log_level("WARN"), cohort::LogLevel::warn);
  EXPECT_EQ(cohort::parse_log_level("warning"), cohort::LogLevel::warn);
  EXPECT_EQ(cohort::parse_log_level("Info"), cohort::LogLevel::info);
  EXPECT_EQ(cohort::parse_log_level("debug"), cohort::LogLevel::debug);
  EXPECT_EQ(cohort::parse_log_level("verbose"), std::nullopt);
  EXPECT_EQ(cohort::parse_log_level(""), std::nullopt);
}

TEST(Logging, LineHasTimeRankLevelAndMessage) {
  const std::string line = cohort::format_log_line(cohort::LogLevel::info, 3, "bucket 2 ready");
  const std::regex pattern(
      R"(\[cohort \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z rank 3 INFO\] bucket 2 ready)");
  EXPECT_TRUE(std::regex_match(line, pattern)) << line;
  EXPECT_THAT(cohort::format_log_line(cohort::LogLevel::warn, -1, "x"), HasSubstr(" rank - WARN]"));
}

TEST(Logging, LevelFiltersMessagesAndSkipsTheirEvaluation) {
  const cohort::LogLevel saved = cohort::log_level();
  cohort::set_log_level(cohort::LogLevel::warn);
  int evaluated = 0;
  auto count = [&] { return ++evaluated; };
  ::testing::internal::CaptureStderr();
  COHORT_LOG(info) << "hidden " << count();
  COHORT_LOG(warn) << "shown " << count();
  const std::string output = ::testing::internal::GetCapturedStderr();
  cohort::set_log_level(saved);
  EXPECT_EQ(evaluated, 1);
  EXPECT_THAT(output, HasSubstr("WARN] shown 1"));
  EXPECT_EQ(output.find("hidden"), std::string::npos);
}

TEST(Logging, ThreadRankOverridesProcessRank) {
  cohort::set_process_log_rank(7);
  EXPECT_EQ(cohort::log_rank(), 7);
  int seen_in_thread = -2;
  std::thread([&] {
    cohort::set_thread_log_rank(2);
    seen_in_thread = cohort::log_rank();
  }).join();
  EXPECT_EQ(seen_in_thread, 2);
  EXPECT_EQ(cohort::log_rank(), 7);
  cohort::set_process_log_rank(-1);
}

TEST(Logging, LinesFromManyThreadsStayWhole) {
  const cohort::LogLevel saved = cohort::log_level();
  cohort::set_log_level(cohort::LogLevel::info);
  constexpr int kThreads = 8;
  constexpr int kLines = 200;
  ::testing::internal::CaptureStderr();
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([t] {
      cohort::set_thread_log_rank(t);
      for (int i = 0; i < kLines; ++i) {
        COHORT_LOG(info) << "thread " << t << " line " << i << " end";
      }
    });
  }
  for (auto& thread : threads) {
    thread.join();
  }
  const std::string output = ::testing::internal::GetCapturedStderr();
  cohort::set_log_level(saved);

  std::istringstream lines(output);
  std::string line;
  int count = 0;
  const std::regex whole(R"(\[cohort \S+ rank (\d) INFO\] thread (\d) line \d+ end)");
  while (std::getline(lines, line)) {
    std::smatch match;
    ASSERT_TRUE(std::regex_match(line, match, whole)) << line;
    EXPECT_EQ(match[1], match[2]) << line;
    ++count;
  }
  EXPECT_EQ(count, kThreads * kLines);
}

}  // namespace
