"""Summarises a run_sharded_peers.sh folder as markdown: samples/s per program (median over
rounds, and every round), the ratios the sharded modes are held to, and bytes per parameter per
rank from train_mlp's memory report."""

import glob
import json
import os
import statistics
import sys


def rounds_of(folder, name):
    """{round: report} for the program's JSON files."""
    found = {}
    for path in glob.glob(os.path.join(folder, f"{name}-*.json")):
        stem = os.path.splitext(os.path.basename(path))[0]
        tail = stem.rsplit("-", 1)[-1]
        try:
            found[int(tail)] = json.load(open(path))
        except (ValueError, json.JSONDecodeError):
            continue
    return found


def main(folder):
    settings = {}
    for line in open(os.path.join(folder, "settings.txt")):
        key, _, value = line.strip().partition(" ")
        settings[key] = value
    names = {"zero0": "cohort plain data parallel (--zero 0)", "zero2": "cohort ZeRO-2 (--zero 2)",
             "zero3": "cohort ZeRO-3 (--zero 3)", "torch-ddp": "PyTorch DDP (gloo)",
             "torch-fsdp2": "PyTorch FSDP2 fully_shard (gloo)"}
    runs = {name: rounds_of(folder, name) for name in names}
    rate = {name: {r: report["samples_per_second"] for r, report in found.items()}
            for name, found in runs.items()}
    median = {name: statistics.median(values.values()) if values else None
              for name, values in rate.items()}
    parameters = next((report["parameters"] for found in runs.values() for report in found.values()),
                      0)
    loads = [float(line.split()[2]) for line in open(os.path.join(folder, "load.txt"))]
    print(f"train_mlp `{settings.get('mlp')}` ({parameters:,} parameters), {settings.get('ranks')} "
          f"host ranks, AdamW, {settings.get('steps')} timed steps after {settings.get('warmup')}; "
          f"{settings.get('machine')}; commit {settings.get('commit')}, {settings.get('date')}; "
          f"load average before each program {min(loads):.1f}-{max(loads):.1f}\n")
    print("| program | samples/s (median) | per round |")
    print("|---|---|---|")
    for name, title in names.items():
        if median[name] is None:
            continue
        rounds = ", ".join(f"{rate[name][r]:.0f}" for r in sorted(rate[name]))
        print(f"| {title} | {median[name]:.0f} | {rounds} |")
    print()

    def ratio(a, b):
        return f"{median[a] / median[b]:.2f}" if median.get(a) and median.get(b) else "n/a"

    def rounds_won(a, b, floor):
        common = sorted(set(rate[a]) & set(rate[b]))
        won = sum(1 for r in common if rate[a][r] >= floor * rate[b][r])
        return f"{won} of {len(common)}"

    print("| ratio (medians) | value | goal | rounds meeting it |")
    print("|---|---|---|---|")
    print(f"| ZeRO-2 / cohort DDP | {ratio('zero2', 'zero0')} | >= 0.95 | "
          f"{rounds_won('zero2', 'zero0', 0.95)} |")
    print(f"| ZeRO-3 / cohort DDP | {ratio('zero3', 'zero0')} | >= 0.80 | "
          f"{rounds_won('zero3', 'zero0', 0.8)} |")
    print(f"| ZeRO-3 / PyTorch FSDP2 | {ratio('zero3', 'torch-fsdp2')} | >= 1.0 | "
          f"{rounds_won('zero3', 'torch-fsdp2', 1.0)} |")
    print(f"| cohort DDP / PyTorch DDP | {ratio('zero0', 'torch-ddp')} | | |")
    print()
    print("Bytes per parameter per rank, from train_mlp's memory report (the library's categories; "
          "'in flight' is ZeRO-2's bucket ring or ZeRO-3's gathered units):\n")
    print("| mode | parameters | gradients | optimizer state | persistent | in flight | "
          "one bucket or unit |")
    print("|---|---|---|---|---|---|---|")
    for name in ("zero0", "zero2", "zero3"):
        if not runs[name]:
            continue
        report = runs[name][min(runs[name])]
        per = report["memory"]["bytes_per_parameter"]
        persistent = per["parameters"] + per["gradients"] + per["optimizer_state"]
        in_flight = per.get("buckets", 0.0) + per.get("gathered", 0.0)
        pieces = 4 if name == "zero3" else 1  # ZeRO-3: two units and their gradients
        one = in_flight / pieces if in_flight else 0.0
        print(f"| {name} | {per['parameters']:.2f} | {per['gradients']:.2f} | "
              f"{per['optimizer_state']:.2f} | {persistent:.2f} | {in_flight:.2f} | {one:.2f} |")


if __name__ == "__main__":
    main(sys.argv[1])
