#!/usr/bin/env python3
"""train_mlp under a real memory limit (a memory cgroup, as a container imposes): 4 ranks of a
model that cannot fit are refused before anything is allocated, with a message naming the
cgroup's limit, instead of being killed by the kernel's out-of-memory killer.

    check_memory_limit.py MEMORY_CGROUP_SH COHORTRUN TRAIN_MLP

Exits 77 (skipped) when no memory cgroup can be made here.
"""
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
    for problem in problems:
        print("FAILED: " + problem)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
