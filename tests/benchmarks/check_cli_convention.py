#!/usr/bin/env python3
"""One command-line convention across cohort's programs (tools/common/cli_checks.hpp):

- `--help` exits 0 and starts with what the program does, and shows the defaults;
- a usage error exits 2 (never CLI11's 105-109, never 1), names the program and what was wrong,
  and guesses the flag or value a slip away ("did you mean");
- a flag that does not apply is refused, and an output path is checked before the run.

    check_cli_convention.py BUILD_DIR SOURCE_DIR
"""
import os
import subprocess
import sys
import time

BUILD = os.path.abspath(sys.argv[1])
SOURCE = os.path.abspath(sys.argv[2])
failures = []

# program -> (path, a default --help must show, a near-miss flag, the flag it means)
PROGRAMS = {
    "scaling_bench": ("benchmarks/scaling_bench", "[default: mlp]", "--workloda", "--workload"),
    "allreduce_bench": ("benchmarks/allreduce_bench", "[default: 32M]", "--maxbytse", "--maxbytes"),
    "checkpoint_bench": ("benchmarks/checkpoint_bench", "[default: 4000000]", "--elemnts", "--elements"),
    "ddp_bench": ("benchmarks/ddp_bench", "[default: 11]", "--repetitons", "--repetitions"),
    "optim_bench": ("benchmarks/optim_bench", "[1]", "--benchmark_filtr=Host", "--benchmark_filter"),
    "memory_bench": ("benchmarks/memory_bench", "[1]", "--benchmark_repetitons=2",
                     "--benchmark_repetitions"),
    "store_bench": ("benchmarks/store_bench", "[1]", "--benchmark_fromat=json", "--benchmark_format"),
    "cohort-doctor": ("tools/cohort-doctor/cohort-doctor", "[default: 64M]", "--colective",
                      "--collective"),
    "cohort-store": ("tools/cohort-store/cohort-store", "[default: 29500]", "--prot", "--port"),
    "train_mlp": ("examples/train_mlp/train_mlp", "[default: 300]", "--hiden", "--hidden"),
    "train_cnn": ("examples/train_cnn/train_cnn", "[default: adamw]", "--widht", "--width"),
}


def run(path, *args, timeout=60):
    environment = {k: v for k, v in os.environ.items() if not k.startswith("COHORT_")}
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
        environment.pop(name, None)
    begin = time.monotonic()
    result = subprocess.run([path, *args], capture_output=True, text=True, timeout=timeout,
                            env=environment, stdin=subprocess.DEVNULL)
    result.seconds = time.monotonic() - begin
    return result


def expect(condition, what, result=None):
    if condition:
        print("ok   " + what)
        return
    print("FAIL " + what)
    if result is not None:
        print("     exit %d\n     stdout: %s\n     stderr: %s" % (
            result.returncode, result.stdout[-1200:], result.stderr[-800:]))
    failures.append(what)


def usage_error(name, path, args, words):
    result = run(path, *args)
    expect(result.returncode == 2 and result.stderr.startswith(name + ": ") and
           all(w in result.stderr for w in words),
           "%s %s: exit 2, '%s: ...' naming %s" % (name, " ".join(args), name, words), result)
    return result


def main():
    found = 0
    for name, (relative, default, slip, meant) in PROGRAMS.items():
        path = os.path.join(BUILD, relative)
        if not os.path.exists(path):
            print("skip %s: not built here" % name)
            continue
        found += 1
        result = run(path, "--help")
        first = result.stdout.splitlines()[0] if result.stdout else ""
        expect(result.returncode == 0 and first.startswith(name + ": ") and len(first) > len(name) + 20,
               "%s --help: exit 0, starts with what it does" % name, result)
        expect(default in result.stdout, "%s --help shows the defaults (%s)" % (name, default), result)
        usage_error(name, path, ["--no-such-flag"], ["--no-such-flag", "--help"])
        usage_error(name, path, [slip], ["did you mean " + meant + "?"])
    expect(found >= 8, "the programs were found in %s (%d)" % (BUILD, found))

    # Values a slip away from an allowed one.
    bench = os.path.join(BUILD, "benchmarks/scaling_bench")
    if os.path.exists(bench):
        usage_error("scaling_bench", bench, ["--workload", "resnet"], ["did you mean resnet50?"])
        # Output paths are checked before the run, and the plot's format from its name.
        result = usage_error("scaling_bench", bench, ["--json", "/nonexistent/dir/r.json"], ["--json"])
        expect(result.seconds < 10, "scaling_bench refuses a bad --json at once (%.1f s)" % result.seconds)
        usage_error("scaling_bench", bench, ["--plot", os.path.join(BUILD, "scaling.jpg")],
                    ["does not end in .png, .pdf, .svg"])
        # Flags that do not apply to what runs.
        usage_error("scaling_bench", bench, ["--workload", "resnet50", "--hidden", "64"],
                    ["--hidden", "applies only to --workload mlp"])
        usage_error("scaling_bench", bench, ["--compute", "real", "--sim-tflops", "5"],
                    ["--sim-tflops", "simulated"])
    mlp = os.path.join(BUILD, "examples/train_mlp/train_mlp")
    if os.path.exists(mlp):
        usage_error("train_mlp", mlp, ["--optimizer", "adam"], ["did you mean adamw?"])
        usage_error("train_mlp", mlp, ["--json", "/nonexistent/dir/r.json"], ["--json"])
    store = os.path.join(BUILD, "benchmarks/store_bench")
    if os.path.exists(store):
        usage_error("store_bench", store, ["--benchmark_out=/nonexistent/dir/out.json"],
                    ["--benchmark_out", "does not exist"])

    # The plot script, alone: argparse's usage errors exit 2 too, and a bad name is said plainly.
    plot = os.path.join(SOURCE, "tools/plot_scaling.py")
    result = subprocess.run([sys.executable, plot, "--help"], capture_output=True, text=True)
    expect(result.returncode == 0 and "scaling_bench" in result.stdout, "plot_scaling.py --help", result)
    result = subprocess.run([sys.executable, plot, "/nonexistent.json", "out.jpg"],
                            capture_output=True, text=True)
    expect(result.returncode == 2 and "Traceback" not in result.stderr and ".png" in result.stderr,
           "plot_scaling.py refuses an output it cannot write, without a traceback", result)

    if failures:
        sys.exit("%d check(s) failed:\n  %s" % (len(failures), "\n  ".join(failures)))
    print("every program follows the convention")


if __name__ == "__main__":
    main()
