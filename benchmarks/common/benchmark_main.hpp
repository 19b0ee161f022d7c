#pragma once

/// @file
/// The `main` of cohort's Google Benchmark programs (optim_bench, memory_bench, store_bench),
/// under the command-line convention of every cohort program (tools/common/cli_checks.hpp):
/// `--help` says what the program measures and lists Google Benchmark's flags with their
/// defaults; an argument Google Benchmark does not take is a usage error (exit 2, with the flag
/// it most likely meant); `--benchmark_out` is checked before anything runs.

namespace cohort::bench {

/// Runs the registered benchmarks. `name` and `description` are the program's; `examples` the
/// lines of its usage, one per line.
int benchmark_main(int argc, char** argv, const char* name, const char* description,
                   const char* examples);

}  // namespace cohort::bench
