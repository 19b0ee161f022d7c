"""Summarises a run_host_peers.sh folder: medians over rounds, as markdown tables."""

import glob
import json
import os
import statistics
import sys


def round_of(path):
    """The round number at the end of a result's name ("allreduce-shm-12.json": 12)."""
    stem = os.path.splitext(os.path.basename(path))[0]
    tail = stem.rsplit("-", 1)[-1]
    return int(tail) if tail.isdigit() else 0


def in_rounds(pattern):
    return sorted(glob.glob(pattern), key=round_of)


def load(pattern):
    return [json.load(open(path)) for path in in_rounds(pattern)]


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def fmt_us(us):
    if us is None:
        return "n/a"
    return f"{us / 1000:.2f} ms" if us >= 1000 else f"{us:.1f} us"


def main(folder):
    rounds = {t: load(os.path.join(folder, f"allreduce-{t}-*.json")) for t in ("shm", "gloo")}
    mpi = {}  # size -> one time per round, in round order
    for path in in_rounds(os.path.join(folder, "mpi-*.txt")):
        for line in open(path):
            size, us = line.split()
            mpi.setdefault(int(size), []).append(float(us))
    iters = 20  # run_host_peers.sh's default; its settings.txt says otherwise
    settings = os.path.join(folder, "settings.txt")
    if os.path.exists(settings):
        for line in open(settings):
            key, _, value = line.partition(" ")
            if key == "iters":
                iters = int(value)
    if rounds["shm"]:
        summarize_allreduce(rounds, mpi, iters)
    summarize_training(folder)


def summarize_allreduce(rounds, mpi, iters):
    sizes = sorted({r["bytes"] for runs in rounds.values() for run in runs for r in run["records"]})
    count = len(rounds["shm"])
    machine = rounds["shm"][0]["machine"] if rounds["shm"] else "?"
    print(f"All-reduce, f32 sum in place, 4 host processes, {machine}; medians over {count} rounds")
    print(f"(each round: per-rank median of {iters} iterations after 5 warm-up, averaged over ranks)\n")
    print("| size | cohort shm | cohort gloo | raw Gloo | Open MPI | memcpy | shm / MPI | rounds shm faster |")
    print("|---|---|---|---|---|---|---|---|")
    # allreduce_bench's JSON (schema cohort.allreduce_bench/2): times in seconds, null where a
    # column does not apply (no raw backend on shared memory).
    def in_place_us(r):
        return r["in_place"]["time_s"] * 1e6

    def raw_us(r):
        return r["raw"]["time_s"] * 1e6 if r.get("raw") else None

    def memcpy_us(r):
        return r["memcpy_time_s"] * 1e6 if r.get("memcpy_time_s") is not None else None

    for size in sizes:
        def column(transport, value):
            values = [value(r) for run in rounds[transport] for r in run["records"]
                      if r["bytes"] == size]
            return median([v for v in values if v is not None])
        shm = column("shm", in_place_us)
        gloo = column("gloo", in_place_us)
        raw = column("gloo", raw_us)
        copy = column("shm", memcpy_us)
        peer = median(mpi.get(size, []))
        ratio = f"{shm / peer:.2f}" if shm and peer else "n/a"
        # Round by round (each round runs both): in how many was shared memory the faster.
        shm_rounds = [next((in_place_us(r) for r in run["records"] if r["bytes"] == size), None)
                      for run in rounds["shm"]]
        pairs = [(a, b) for a, b in zip(shm_rounds, mpi.get(size, [])) if a is not None]
        faster = f"{sum(a < b for a, b in pairs)} of {len(pairs)}" if pairs else "n/a"
        label = f"{size >> 20} MiB" if size >= 1 << 20 else f"{size >> 10} KiB"
        print(f"| {label} | {fmt_us(shm)} | {fmt_us(gloo)} | {fmt_us(raw)} | {fmt_us(peer)} | "
              f"{fmt_us(copy)} | {ratio} | {faster} |")


def summarize_training(folder):
    train = load(os.path.join(folder, "train_mlp-*.json"))
    torch = load(os.path.join(folder, "torch-*.json"))
    if not train:
        return
    model = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
                  if line.startswith("model name")), "?")
    print(f"\ntrain_mlp vs PyTorch DDP (gloo) on {model} x {os.cpu_count()}, {train[0]['ranks']} ranks, "
          f"{train[0]['parameters']} parameters, global batch "
          f"{train[0]['options']['global_batch']}; medians over {len(train)} rounds\n")
    print("| | samples/s | all-reduce ms/step | exposed ms/step | per round (samples/s) |")
    print("|---|---|---|---|---|")
    rates = [round(t["samples_per_second"]) for t in train]
    print(f"| cohort ({train[0]['backend']}) | {median(rates):.0f} | "
          f"{median([t['comm_ms_per_step'] for t in train]):.2f} | "
          f"{median([t['exposed_comm_ms_per_step'] for t in train]):.2f} | "
          f"{', '.join(map(str, rates))} |")
    if torch:
        rates = [round(t["samples_per_second"]) for t in torch]
        print(f"| PyTorch {torch[0]['torch_version']} DDP | {median(rates):.0f} | | | "
              f"{', '.join(map(str, rates))} |")
    print(f"\ncohort buckets: {train[0]['buckets']}")
    if train[0].get("host_gemm"):
        print(f"cohort GEMM: {train[0]['host_gemm']}")
    if torch and "threads_per_rank" in torch[0]:
        print(f"PyTorch: {torch[0]['threads_per_rank']} thread(s) per rank, {torch[0]['blas']}")
    memory = train[0].get("memory", {})
    if memory:
        print(f"cohort memory per parameter: library "
              f"{memory['library_bytes_per_parameter']:.2f} B, the example's own "
              f"{memory['example_bytes_per_parameter']:.2f} B")
    load_path = os.path.join(folder, "load.txt")
    if os.path.exists(load_path):
        loads = [float(line.split()[2]) for line in open(load_path) if line.strip()]
        print(f"load average (1 min) before each program: {min(loads):.1f} to {max(loads):.1f}")

if __name__ == "__main__":
    main(sys.argv[1])
