#!/usr/bin/env python3
"""Runs train_mlp with --json on 4 host ranks and checks its memory report: every category is there,
the library holds at most 16.5 bytes per parameter for f32 AdamW, 8 + 8/N + 0.5 under ZeRO-1 on N
ranks, 4 + 12/N (+ 0.1 of padding) under ZeRO-2 with one bucket in flight, and 16/N (+ 0.1)
under ZeRO-3 with two units and their gradients in flight (and at least what the arrays
themselves take), and the example's own memory stays within its estimate made before allocating.

    check_train_mlp_memory.py TRAIN_MLP COHORTRUN OUTPUT_DIR   # runs every case
    check_train_mlp_memory.py --check REPORT.json [--zero N]     # checks one report
"""
import json
import os
import subprocess
import sys

CATEGORIES = {"parameters", "gradients", "optimizer_state", "buckets", "gathered", "activations",
              "other"}
PERSISTENT = ("parameters", "gradients", "optimizer_state")
LIBRARY = ("parameters", "gradients", "optimizer_state", "buckets", "gathered")
# Large enough that the arenas dominate what the example holds (the data set is fixed).
MODEL = ["--hidden", "512", "--layers", "4", "--steps", "3", "--log-every", "0"]
RANKS = 4


def check(report, zero):
    """Returns the list of what is wrong with `report` (train_mlp's --json), empty when all holds."""
    problems = []
    memory = report.get("memory")
    if not isinstance(memory, dict):
        return ["no 'memory' object in the report"]
    for key in ("device", "bytes_per_parameter", "library_bytes_per_parameter",
                "example_bytes_per_parameter", "estimated_bytes_per_rank",
                "estimated_library_bytes_per_rank", "estimated_example_bytes_per_rank"):
        if key not in memory:
            problems.append(f"memory.{key} is missing")
    if problems:
        return problems
    per_parameter = memory["bytes_per_parameter"]
    missing = CATEGORIES - set(per_parameter)
    if missing:
        problems.append(f"categories missing from memory.bytes_per_parameter: {sorted(missing)}")
    unknown = set(per_parameter) - CATEGORIES
    if unknown:
        problems.append(f"unknown categories in memory.bytes_per_parameter: {sorted(unknown)}")
    for name, value in per_parameter.items():
        if not isinstance(value, (int, float)) or value < 0:
            problems.append(f"memory.bytes_per_parameter.{name} = {value!r}")
    if problems:
        return problems

    ranks = report["ranks"]
    library = memory["library_bytes_per_parameter"]
    total = sum(per_parameter[name] for name in LIBRARY)
    if abs(total - library) > 1e-6 * max(library, 1.0):
        problems.append(f"library_bytes_per_parameter {library} is not the sum of its categories "
                        f"({total})")
    example = memory["example_bytes_per_parameter"]
    rest = sum(value for name, value in per_parameter.items() if name not in LIBRARY)
    if abs(rest - example) > 1e-6 * max(example, 1.0):
        problems.append(f"example_bytes_per_parameter {example} is not the sum of the other "
                        f"categories ({rest})")

    # f32: parameters 4, gradients 4, AdamW's two moments 8; each ZeRO stage keeps a shard of 1/N
    # of one more of them.
    floor = {"parameters": 4.0 / ranks if zero >= 3 else 4.0,
             "gradients": 4.0 / ranks if zero >= 2 else 4.0,
             "optimizer_state": 8.0 / ranks if zero >= 1 else 8.0}
    for name, least in floor.items():
        if per_parameter[name] < least * (1 - 1e-6):
            problems.append(f"{name} {per_parameter[name]:.3f} B/parameter, below the {least:.3f} "
                            "its arrays take: the report misses memory")
    if zero <= 1:
        bound = 8.0 + 8.0 / ranks + 0.5 if zero == 1 else 16.5
        if library > bound:
            problems.append(f"the library holds {library:.3f} B/parameter, above the bound "
                            f"{bound:.3f} ({'ZeRO-1 on %d ranks' % ranks if zero else 'f32 AdamW'})")
    else:
        # The persistent part against the bound; what is in flight against its buffers:
        # ZeRO-2 one of the largest bucket, ZeRO-3 two of the largest unit and their gradients.
        persistent = sum(per_parameter[name] for name in PERSISTENT)
        bound = (4.0 + 12.0 / ranks if zero == 2 else 16.0 / ranks) + 0.1
        if persistent > bound:
            problems.append(f"ZeRO-{zero} holds {persistent:.3f} persistent B/parameter, above "
                            f"{bound:.3f}")
        one = memory["largest_segment_bytes"] / report["parameters"]
        in_flight = per_parameter["buckets"] + per_parameter["gathered"]
        allowed = (1 if zero == 2 else 4) * one
        if abs(in_flight - allowed) > 1e-6 * max(allowed, 1.0) + 0.01:
            problems.append(f"ZeRO-{zero} holds {in_flight:.3f} B/parameter in flight, not the "
                            f"{allowed:.3f} of its buffers ({one:.3f} each)")

    # The example's own memory (data, activations, the final download) is what it estimated
    # before allocating, give or take the allocator's rounding.
    parameters = report["parameters"]
    estimated = memory["estimated_example_bytes_per_rank"] / parameters
    if example > estimated * 1.05 + 0.1:
        problems.append(f"the example holds {example:.3f} B/parameter, more than its estimate "
                        f"{estimated:.3f}")
    estimated_library = memory["estimated_library_bytes_per_rank"] / parameters
    if library > estimated_library * 1.05 + 0.1:
        problems.append(f"the library holds {library:.3f} B/parameter, more than the estimate "
                        f"{estimated_library:.3f}")
    return problems


def run(command, path):
    if os.path.exists(path):
        os.remove(path)
    result = subprocess.run(command, capture_output=True, text=True, timeout=240)
    sys.stdout.write(result.stdout)
    sys.stderr.write(result.stderr)
    assert result.returncode == 0, f"{command} exited with {result.returncode}"
    with open(path) as handle:
        return json.load(handle)


def main(argv):
    if argv and argv[0] == "--check":
        problems = check(json.load(open(argv[1])), int(argv[3]) if argv[2:3] == ["--zero"] else 0)
        print("\n".join(problems) if problems else "ok")
        return 1 if problems else 0
    train_mlp, cohortrun, out_dir = argv
    os.makedirs(out_dir, exist_ok=True)
    failed = False
    # f32 AdamW with ranks as threads (one report for the process, divided over its 4 ranks), and
    # ZeRO-1 with ranks as processes (each rank's own report; rank 0's is written).
    processes = [cohortrun, "--nproc-per-node", str(RANKS), train_mlp]
    cases = [("threads-adamw", 0, [train_mlp, "--ranks", str(RANKS)]),
             ("processes-zero1", 1, processes + ["--zero1"]),
             ("processes-zero2", 2, processes + ["--zero", "2"]),
             ("processes-zero3", 3, processes + ["--zero", "3"])]
    for name, zero, start in cases:
        path = os.path.join(out_dir, f"{name}.json")
        report = run(start + MODEL + ["--json", path], path)
        problems = check(report, zero)
        print(f"{name}: {json.dumps(report['memory'])}")
        for problem in problems:
            print(f"{name}: {problem}")
        failed = failed or bool(problems)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
