#!/usr/bin/env python3
"""train_mlp under a real memory limit (a memory cgroup, as a container imposes): 4 ranks of a
model that cannot fit are refused before anything is allocated, with a message naming the
cgroup's limit, instead of being killed by the kernel's out-of-memory killer; and a model more
than 3 times too large for plain data parallel under the limit is refused with it and trains with
ZeRO-3.

    check_memory_limit.py MEMORY_CGROUP_SH COHORTRUN TRAIN_MLP

Exits 77 (skipped) when no memory cgroup can be made here.
"""
import re
import subprocess
import sys
import time

GIB = 1 << 30
RANKS = 4


def run_limited(memory_cgroup, limit, command, timeout):
    """Runs `command` in a memory cgroup of `limit` bytes; returns (status, output, seconds,
    oom kills)."""
    start = time.monotonic()
    result = subprocess.run([memory_cgroup, str(limit)] + command, capture_output=True, text=True,
                            timeout=timeout)
    seconds = time.monotonic() - start
    output = result.stdout + result.stderr
    kills = None
    for line in result.stderr.splitlines():
        if line.startswith("memory_cgroup: oom_kills "):
            kills = int(line.split()[2].rstrip(","))
    return result.returncode, output, seconds, kills


def peak_of(output):
    """The cgroup's peak usage that memory_cgroup.sh reported, in bytes (0 when unknown)."""
    found = re.search(r"memory_cgroup: oom_kills \d+, peak (\d+)", output)
    return int(found.group(1)) if found else 0


def main(argv):
    memory_cgroup, cohortrun, train_mlp = argv
    problems = []
    # 100.9M parameters, f32 AdamW: about 2 GiB per rank, 8 GiB for 4, in 3.5 GiB. Before the
    # limit was read, the ranks were killed by the kernel 8 s into setting up, with no word why.
    limit = int(3.5 * GIB)
    command = [cohortrun, "--nproc-per-node", str(RANKS), train_mlp, "--hidden", "4096",
               "--layers", "8", "--steps", "3", "--log-every", "0"]
    status, output, seconds, kills = run_limited(memory_cgroup, limit, command, 120)
    if status == 77:
        print(output, end="")
        return 77
    print(output, end="")
    print(f"refusal: exit status {status} after {seconds:.1f} s, {kills} OOM kills")
    if status != 1:
        problems.append(f"expected exit status 1 (refused), got {status}")
    for needed in ("refused before allocating", "the memory cgroup limit of",
                   f"each of the {RANKS} ranks that share it"):
        if needed not in output:
            problems.append(f"the message does not say '{needed}'")
    if kills != 0:
        problems.append(f"the kernel's out-of-memory killer struck {kills} times")
    if seconds > 30:
        problems.append(f"the refusal took {seconds:.1f} s; it must come before any allocation")

    # 81M parameters in 80 layers (hidden 1024), f32 AdamW: plain data parallel needs about 1.2 GiB
    # per rank, ZeRO-3 on 4 ranks about 0.35 (16/4 bytes a parameter, two layers in flight, a
    # small batch). Each rank may have 400 MiB: one cgroup of 1600 MiB (and the baseline) holds
    # the 4.
    per_rank = 400 << 20
    # What the 4 processes hold whatever the model (their libraries' pages, charged to the
    # cgroup: about 375 MiB in a CUDA build, with cuBLAS and cuDNN, a few MiB in a host-only one),
    # measured with a tiny model, is added to the cgroup's limit, so each rank's 400 MiB is room
    # for the model alone in every build.
    tiny = [cohortrun, "--nproc-per-node", str(RANKS), train_mlp, "--hidden", "8", "--layers",
            "1", "--global-batch", "16", "--test-samples", "64", "--steps", "1", "--log-every", "0"]
    status, output, seconds, kills = run_limited(memory_cgroup, int(3.5 * GIB), tiny, 120)
    baseline = peak_of(output)
    print(f"baseline: a tiny model's 4 ranks peaked at {baseline / (1 << 20):.1f} MiB "
          f"(exit status {status})")
    if status != 0:
        print(output, end="")
        problems.append(f"the tiny model did not train (exit status {status})")
    limit = RANKS * per_rank + baseline
    model = ["--hidden", "1024", "--layers", "80", "--global-batch", "16", "--test-samples", "64",
             "--steps", "3", "--log-every", "0"]
    launch = [cohortrun, "--nproc-per-node", str(RANKS), train_mlp] + model
    status, output, seconds, kills = run_limited(memory_cgroup, limit,
                                                 launch + ["--zero", "0"], 120)
    print(output, end="")
    print(f"plain data parallel: exit status {status} after {seconds:.1f} s, {kills} OOM kills")
    needed = re.search(r"needs (\d+) bytes", output)
    if status != 1 or not needed or "refused before allocating" not in output:
        problems.append("plain data parallel was not refused before allocating")
    else:
        ratio = int(needed.group(1)) / RANKS / per_rank
        print(f"plain data parallel needs {ratio:.2f} times the per-rank limit")
        if ratio < 3:
            problems.append(f"the model is only {ratio:.2f} times too large for plain data "
                            "parallel; the test wants at least 3")
        if not re.search(r"--zero 3 would need [^(]*\(fits\)", output):
            problems.append("the refusal does not say that --zero 3 fits")
    if kills != 0:
        problems.append(f"plain data parallel: the out-of-memory killer struck {kills} times")
    status, output, seconds, kills = run_limited(memory_cgroup, limit,
                                                 launch + ["--zero", "3"], 240)
    print(output, end="")
    print(f"ZeRO-3: exit status {status} after {seconds:.1f} s, {kills} OOM kills")
    if status != 0 or "final loss" not in output:
        problems.append(f"ZeRO-3 did not train under the limit (exit status {status})")
    if kills != 0:
        problems.append(f"ZeRO-3: the out-of-memory killer struck {kills} times")

    for problem in problems:
        print("FAILED: " + problem)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
