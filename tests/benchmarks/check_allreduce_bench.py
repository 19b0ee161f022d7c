#!/usr/bin/env python3
"""allreduce_bench with nccl-tests' habits, on host ranks: every collective checked, an output
that nccl-tests' parsers read, mean or median, a bandwidth floor with its own exit status, and
every trap of the old program refused or reported.

    check_allreduce_bench.py ALLREDUCE_BENCH OUTPUT_DIR
"""
import json
import os
import re
import subprocess
import sys

failures = []


def run(bench, *args, env=None, timeout=120):
    environment = dict(os.environ)
    for name in list(environment):
        # A launcher's variables would make the program join a launched world.
        if name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE") or name.startswith("COHORT_RANK"):
            del environment[name]
    environment.pop("NCCL_TESTS_MIN_BW", None)
    environment.update(env or {})
    result = subprocess.run([bench, *args], capture_output=True, text=True, timeout=timeout,
                            env=environment)
    return result


def expect(condition, what, result=None):
    if condition:
        print("ok   " + what)
    else:
        print("FAIL " + what)
        if result is not None:
            print("     exit %d\n     stdout: %s\n     stderr: %s" % (
                result.returncode, result.stdout[-1500:], result.stderr[-800:]))
        failures.append(what)


def superbench_busbw(output):
    """The out-of-place busbw of every size but the first, as Microsoft's superbench reads
    nccl-tests (the table starts 4 lines after the 'out-of-place' line and ends at 'Out of
    bounds values'; the busbw is the 6th field from the end)."""
    lines = output.splitlines()
    start = max(i for i, line in enumerate(lines) if "out-of-place" in line)
    end = max(i for i, line in enumerate(lines) if "Out of bounds values" in line)
    values = []
    for line in lines[start + 4:end]:
        fields = re.sub(r" +", " ", line.strip(" ")).split(" ")
        if len(fields) <= 10:
            break
        values.append(float(fields[-6]))
    return values


def awk_average(output):
    """What `grep "# Avg bus bandwidth" | awk '{print $NF}'` prints (FlagPerf's way)."""
    line = next(l for l in output.splitlines() if l.startswith("# Avg bus bandwidth"))
    return float(line.split()[-1])


def table_rows(output):
    """The data lines of nccl-tests' table: 13 fields, the first two integers."""
    rows = []
    for line in output.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        fields = line.split()
        if len(fields) == 13 and fields[0].isdigit() and fields[1].isdigit():
            rows.append(fields)
    return rows


def main(bench, out_dir):
    os.makedirs(out_dir, exist_ok=True)
    report = os.path.join(out_dir, "allreduce.json")

    # nccl-tests' output: only its columns, read by its parsers, and the same numbers as the JSON.
    result = run(bench, "--ranks", "2", "-b", "1K", "-e", "256K", "-f", "4", "-n", "4", "-w", "1",
                 "--format", "nccl-tests", "--json", report)
    expect(result.returncode == 0, "nccl-tests format runs", result)
    rows = table_rows(result.stdout)
    expect(len(rows) == 5 and [int(r[0]) for r in rows] == [1024, 4096, 16384, 65536, 262144],
           "one 13-column line per size, sizes 1K to 256K", result)
    expect(all(r[4] == "-1" for r in rows), "the root column says -1 for all-reduce", result)
    expect("#  Rank  0 Group  0 Pid" in result.stdout and "#  Rank  1 Group  0 Pid" in result.stdout,
           "nccl-tests' device lines, one per rank", result)
    expect("time: the mean of back-to-back iterations" in result.stdout,
           "nccl-tests format times the mean, as nccl-tests does", result)
    with open(report) as handle:
        data = json.load(handle)
    parsed = superbench_busbw(result.stdout)
    from_json = [r["out_of_place"]["busbw_bytes_per_s"] / 1e9 for r in data["records"]][1:]
    expect(len(parsed) == 4 and all(abs(a - b) <= 0.006 + 0.006 * b for a, b in zip(parsed, from_json)),
           "superbench's parser reads the out-of-place busbw the JSON holds (%s vs %s)" % (parsed, from_json),
           result)
    expect(abs(awk_average(result.stdout) - data["average_busbw_bytes_per_s"] / 1e9) < 1e-3,
           "the average bus bandwidth line ends in the number (awk '{print $NF}')", result)
    expect(data["schema"] == "cohort.allreduce_bench/2" and data["statistic"] == "mean" and
           data["commit"] and data["hosts"] and data["command_line"][0] == bench,
           "the JSON names its schema, statistic, commit, hosts and command line", result)

    # Every collective cohort has, each element checked, roots and counts as nccl-tests has them.
    result = run(bench, "--ranks", "3", "--collective", "all", "-b", "12K", "-e", "48K", "-f", "4",
                 "-n", "3", "-w", "1", "--json", report)
    expect(result.returncode == 0, "--collective all runs", result)
    with open(report) as handle:
        data = json.load(handle)
    names = [r["collective"] for r in data["records"]]
    expect(names == ["all_reduce"] * 2 + ["reduce_scatter"] * 2 + ["all_gather"] * 2 + ["broadcast"] * 2,
           "all-reduce, reduce-scatter, all-gather and broadcast (%s)" % names, result)
    expect(all(r["in_place"]["wrong"] == 0 and r["out_of_place"]["wrong"] == 0 for r in data["records"]),
           "every element of every collective is right", result)
    by_name = {}
    for record in data["records"]:
        by_name.setdefault(record["collective"], record)  # the 12K size of each
    expect(by_name["reduce_scatter"]["count"] == 12288 // 4 // 3 and
           by_name["all_gather"]["count"] == 12288 // 4 // 3 and by_name["all_reduce"]["count"] == 3072,
           "reduce-scatter and all-gather count per rank, as nccl-tests", result)
    expect(by_name["broadcast"]["root"] == 0 and by_name["all_reduce"]["root"] is None,
           "broadcast has a root, all-reduce a null one", result)
    expect(abs(by_name["all_gather"]["bus_factor"] - 2 / 3) < 1e-9 and
           abs(by_name["all_reduce"]["bus_factor"] - 4 / 3) < 1e-9,
           "bus factors (n-1)/n and 2(n-1)/n", result)
    expect(by_name["all_reduce"]["raw"] is None and by_name["all_reduce"]["memcpy_time_s"] > 0,
           "no raw backend on shared memory: null, not 0; the memcpy ceiling measured", result)
    expect(data["statistic"] == "median", "the cohort format times medians by default", result)

    # Sizes a share per rank does not divide are rounded, and the header says so.
    result = run(bench, "--ranks", "3", "--collective", "all_gather", "-b", "1K", "-e", "1K", "-n", "2")
    expect(result.returncode == 0 and "round each size down to a whole share per rank" in result.stdout
           and re.search(r"all_gather\s+1020\s+85 ", result.stdout) is not None,
           "an all-gather size 3 ranks do not divide is rounded, and said so", result)

    # -c 0: nothing checked, nothing claimed.
    result = run(bench, "--ranks", "2", "-b", "4K", "-e", "4K", "-n", "2", "-c", "0", "--json", report)
    with open(report) as handle:
        data = json.load(handle)
    expect(result.returncode == 0 and "N/A (not checked: -c 0)" in result.stdout and
           " OK" not in result.stdout.split("Out of bounds values")[1].splitlines()[0] and
           data["records"][0]["in_place"]["wrong"] is None and data["wrong"] is None,
           "-c 0 reports N/A, never '0 ... OK'", result)

    # Mean or median, rank aggregation, aggregated iterations.
    result = run(bench, "--ranks", "2", "-b", "4K", "-e", "4K", "-n", "3", "--stat", "mean",
                 "-a", "3", "-m", "2", "-z", "1")
    expect(result.returncode == 0 and "the maximum over ranks (-a 3)" in result.stdout and
           "agg iters: 2" in result.stdout and "blocking (-z 1)" in result.stdout,
           "--stat mean with -a 3, -m 2 and -z 1", result)

    # The bandwidth floor: its own exit status, as nccl-tests' NCCL_TESTS_MIN_BW.
    result = run(bench, "--ranks", "2", "-b", "4K", "-e", "4K", "-n", "2", "--min-busbw", "100000")
    expect(result.returncode == 3 and "FAILED" in result.stdout and "bandwidth floor" in result.stdout,
           "--min-busbw no host reaches: exit 3 and FAILED", result)
    result = run(bench, "--ranks", "2", "-b", "4K", "-e", "4K", "-n", "2", "--min-busbw", "0.0001")
    expect(result.returncode == 0 and "passed" in result.stdout, "a floor that is met: exit 0", result)
    result = run(bench, "--ranks", "2", "-b", "4K", "-e", "4K", "-n", "2",
                 env={"NCCL_TESTS_MIN_BW": "100000"})
    expect(result.returncode == 3 and "90% of NCCL_TESTS_MIN_BW=100000" in result.stdout,
           "NCCL_TESTS_MIN_BW is honoured with nccl-tests' 90% rule", result)

    # The traps, each refused with the reason (usage errors exit 2).
    launcher = {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1",
                "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29531"}
    traps = [
        (("--ranks", "2"), launcher, "a launcher started this process", "--ranks under a launcher"),
        (("--ranks", "2", "-b", "1G", "-e", "1K"), None, "is larger than -e", "-b above -e"),
        (("--ranks", "2", "-b", "7", "-e", "64"), None, "not a whole number of float elements",
         "-b 7 with 4-byte elements"),
        (("--ranks", "1024"), None, "out of range", "--ranks 1024"),
        (("--ranks", "2", "-G", "1"), None, "never captures collectives", "-G 1"),
        (("--ranks", "2", "-r", "1"), None, "applies only to --collective broadcast", "-r on all-reduce"),
        (("--ranks", "2", "-z", "1"), None, "applies only to --stat mean", "-z with medians"),
        (("--ranks", "2", "--colective", "all"), None, "did you mean --collective?", "a misspelt flag"),
        (("--ranks", "2", "--collective", "allreduce"), None, "did you mean all_reduce?",
         "a misspelt collective"),
    ]
    for args, env, reason, what in traps:
        result = run(bench, *args, env=env)
        expect(result.returncode == 2 and reason in result.stderr, "refused: " + what, result)
    # Out of memory: said before a single buffer is allocated, not a bare std::bad_alloc.
    result = run(bench, "--ranks", "4", "-b", "60G", "-e", "60G")
    expect(result.returncode == 1 and "of host memory in this process" in result.stderr and
           "bad_alloc" not in result.stderr, "a size the host cannot hold is refused with the numbers", result)

    # --issue-cost still reports the host cost of issuing a collective.
    result = run(bench, "--ranks", "2", "--issue-cost", "20", "-b", "1K", "-e", "64K", "-f", "8",
                 "-n", "3", "-w", "1")
    expect(result.returncode == 0 and re.search(r"host cost of issuing one all-reduce of 4 floats[^\n]*"
                                                r"cohort [0-9.]+ us", result.stdout) is not None,
           "--issue-cost reports the host cost", result)

    if failures:
        sys.exit("%d check(s) failed: %s" % (len(failures), "; ".join(failures)))
    print("allreduce_bench: every check passed")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
