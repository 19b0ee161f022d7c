#include "common/benchmark_main.hpp"

#include <benchmark/benchmark.h>
#include <cli_checks.hpp>

#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

namespace cohort::bench {

namespace {

/// Google Benchmark's flags (1.7), their defaults and what they do.
struct Flag {
  const char* name;
  const char* value;
  const char* fallback;
  const char* help;
};
constexpr Flag kFlags[] = {
    {"--benchmark_filter", "REGEX", "all", "run the benchmarks whose names match"},
    {"--benchmark_list_tests", "BOOL", "false", "list the benchmarks and exit"},
    {"--benchmark_min_time", "SECONDS", "0.5", "run each benchmark at least this long"},
    {"--benchmark_repetitions", "N", "1", "repeat each benchmark N times"},
    {"--benchmark_report_aggregates_only", "BOOL", "false",
     "report only the mean, median and spread of the repetitions"},
    {"--benchmark_display_aggregates_only", "BOOL", "false",
     "display only the aggregates (the file gets every repetition)"},
    {"--benchmark_enable_random_interleaving", "BOOL", "false",
     "interleave the repetitions of different benchmarks"},
    {"--benchmark_format", "FORMAT", "console", "console, json or csv"},
    {"--benchmark_out", "FILE", "none", "also write the results to FILE"},
    {"--benchmark_out_format", "FORMAT", "json", "console, json or csv"},
    {"--benchmark_color", "WHEN", "auto", "auto, true or false"},
    {"--benchmark_counters_tabular", "BOOL", "false", "counters as columns"},
    {"--benchmark_time_unit", "UNIT", "per benchmark", "ns, us, ms or s"},
    {"--benchmark_context", "KEY=VALUE,...", "none", "extra context for the report"},
    {"--benchmark_perf_counters", "NAME,...", "none", "libpfm counters to read"},
    {"--v", "LEVEL", "0", "verbosity"},
};

void print_help(const char* name, const char* description, const char* examples) {
  std::printf(
      "%s\n\nUsage: %s [FLAG=VALUE]...\n%s\nOptions (Google Benchmark's), with their "
      "defaults:\n  %-42s %s\n",
      description, name, examples, "-h,--help", "print this help and exit");
  for (const Flag& flag : kFlags) {
    const std::string left = std::string(flag.name) + "=" + flag.value;
    std::printf("  %-42s %s [%s]\n", left.c_str(), flag.help, flag.fallback);
  }
}

}  // namespace

int benchmark_main(int argc, char** argv, const char* name, const char* description,
                   const char* examples) {
  std::vector<std::string> names;
  for (const Flag& flag : kFlags) names.emplace_back(flag.name);
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg(argv[i]);
    if (arg == "-h" || arg == "--help") {
      print_help(name, description, examples);
      return 0;
    }
    // Checked before anything runs: the program would otherwise end without its file.
    const std::string_view out_flag = "--benchmark_out=";
    if (arg.starts_with(out_flag)) {
      std::string path(arg.substr(out_flag.size()));
      const std::string problem = cli::writable_file()(path);
      if (!problem.empty()) {
        std::fprintf(stderr, "%s: --benchmark_out: %s\nRun '%s --help' for the options.\n", name,
                     problem.c_str(), name);
        return 2;
      }
    }
  }
  benchmark::Initialize(&argc, argv, [] {});
  if (argc > 1) {
    std::string message;
    for (int i = 1; i < argc; ++i) {
      const std::string arg(argv[i]);
      std::string text = "unknown argument '" + arg + "'";
      const std::string guess = cli::nearest(arg.substr(0, arg.find('=')), names);
      if (!guess.empty()) text += " (did you mean " + guess + "?)";
      message += (message.empty() ? "" : "; ") + text;
    }
    std::fprintf(stderr, "%s: %s\nRun '%s --help' for the options.\n", name, message.c_str(), name);
    return 2;
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

}  // namespace cohort::bench
