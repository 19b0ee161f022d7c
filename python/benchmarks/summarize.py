"""Summarizes compare.sh's records: medians over rounds, as Markdown tables."""

import json
import statistics
import sys
from collections import defaultdict


def read(path):
    try:
        return [json.loads(line) for line in open(path) if line.startswith("{")]
    except FileNotFoundError:
        return []


def size_name(n):
    return f"{n >> 20} MiB" if n >= 1 << 20 else f"{n >> 10} KiB"


def main():
    folder = sys.argv[1]
    rounds = defaultdict(dict)  # (program, size) -> {round: us}
    for record in read(f"{folder}/allreduce.json"):
        program = record["backend"]
        if record.get("via") == "backend":
            program += " backend"
        rounds[(program, record["bytes"])][record.get("round")] = record["us"]

    def times(program, size):
        return list(rounds.get((program, size), {}).values())

    def median(program, size):
        values = times(program, size)
        return statistics.median(values) if values else None

    def per_round(a, b, size):
        """a / b in each round that ran both."""
        both = sorted(set(rounds[(a, size)]) & set(rounds[(b, size)]), key=str)
        return ", ".join(f"{rounds[(a, size)][r] / rounds[(b, size)][r]:.2f}" for r in both)

    sizes = sorted({b for (_, b) in rounds})
    print("| size | cohort | gloo | gloo / cohort | cohort's c10d backend called directly "
          "| cohort C++ allreduce_bench | cohort / C++ |")
    print("|---|---|---|---|---|---|---|")
    for size in sizes:
        cohort, gloo = median("cohort", size), median("gloo", size)
        direct, cpp = median("cohort backend", size), median("cohort C++", size)
        cells = [size_name(size), f"{cohort:.1f} us" if cohort else "", f"{gloo:.1f} us" if gloo else "",
                 f"{gloo / cohort:.2f}x" if cohort and gloo else "",
                 f"{direct:.1f} us" if direct else "", f"{cpp:.1f} us" if cpp else "",
                 f"{cohort / cpp:.2f}x" if cohort and cpp else ""]
        print("| " + " | ".join(cells) + " |")
        if cohort and gloo:
            print(f"<!-- {size_name(size)} per round: cohort {times('cohort', size)}, gloo {times('gloo', size)} -->")
        if cohort and cpp:
            print(f"<!-- {size_name(size)} cohort / C++ per round: {per_round('cohort', 'cohort C++', size)}; "
                  f"backend called directly / C++: {per_round('cohort backend', 'cohort C++', size)} -->")
    ddp = defaultdict(list)
    losses = {}
    for record in read(f"{folder}/ddp.json"):
        if record.get("compute_only"):
            ddp[(record["parameters"], "compute only")].append(record["samples_per_second"])
            continue
        ddp[(record["parameters"], record["backend"])].append(record["samples_per_second"])
        losses[(record["parameters"], record["backend"], record["round"])] = record["losses"]
    print()
    print("| parameters | cohort samples/s | gloo samples/s | cohort / gloo | per round (cohort; gloo) "
          "| largest loss difference | no all-reduce (samples/s) | its / gloo: the highest cohort / gloo |")
    print("|---|---|---|---|---|---|---|---|")
    for parameters in sorted({p for (p, _) in ddp}):
        c, g = ddp[(parameters, "cohort")], ddp[(parameters, "gloo")]
        worst = 0.0
        for (p, b, r), values in losses.items():
            if p == parameters and b == "cohort" and (p, "gloo", r) in losses:
                worst = max([worst] + [abs(x - y) for x, y in zip(values, losses[(p, "gloo", r)])])
        bound = ddp.get((parameters, "compute only"))
        bound_cells = (f"{statistics.median(bound):.0f} | "
                       f"{statistics.median(bound) / statistics.median(g):.2f}x" if bound and g
                       else " | ")
        if c and g:
            print(f"| {parameters:,} | {statistics.median(c):.0f} | {statistics.median(g):.0f} | "
                  f"{statistics.median(c) / statistics.median(g):.2f}x | "
                  f"{', '.join(f'{x:.0f}' for x in c)}; {', '.join(f'{x:.0f}' for x in g)} | {worst:.1e} "
                  f"| {bound_cells} |")
    loads = [r["load"] for r in read(f"{folder}/load.json")]
    if loads:
        print(f"\nload average (1 min) before the programs: {min(loads):.1f} to {max(loads):.1f}, "
              f"median {statistics.median(loads):.1f}")


if __name__ == "__main__":
    main()
