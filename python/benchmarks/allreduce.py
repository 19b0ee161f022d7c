"""dist.all_reduce through a torch.distributed backend, timed as cohort's allreduce_bench times
its own: f32 sum in place, each size warmed up, then each iteration timed alone; per rank the
median, then the mean over ranks. Prints one JSON line per size on rank 0.

    torchrun --nproc-per-node 4 allreduce.py --backend cohort --sizes 1K:64M
"""

import argparse
import json
import os
import statistics
import time

import torch
import torch.distributed as dist


def parse_size(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    if text[-1].upper() in units:
        return int(float(text[:-1]) * units[text[-1].upper()])
    return int(text)


def sizes_between(spec):
    low, high = (parse_size(s) for s in spec.split(":"))
    size = low
    while size <= high:
        yield size
        size *= 4


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", required=True)
    parser.add_argument("--sizes", default="1K:64M", help="LOW:HIGH in bytes, x4 steps")
    parser.add_argument("--iters", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--max-seconds", type=float, default=3.0,
                        help="fewer iterations for a size whose iterations would take longer")
    args = parser.parse_args()
    if args.backend == "cohort":
        import cohort  # noqa: F401  (registers the backend)
    torch.set_num_threads(1)
    dist.init_process_group(args.backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    for size in sizes_between(args.sizes):
        data = torch.ones(size // 4, dtype=torch.float32)
        start = time.perf_counter()
        for _ in range(args.warmup):
            dist.all_reduce(data)
        per_iter = (time.perf_counter() - start) / max(args.warmup, 1)
        # Every rank runs the same count: agree on it.
        budget = torch.tensor([per_iter])
        dist.all_reduce(budget, op=dist.ReduceOp.MAX)
        iters = max(5, min(args.iters, int(args.max_seconds / max(budget.item(), 1e-9))))
        times = []
        for _ in range(iters):
            start = time.perf_counter()
            dist.all_reduce(data)
            times.append(time.perf_counter() - start)
        median = torch.tensor([statistics.median(times)], dtype=torch.float64)
        dist.all_reduce(median)
        if rank == 0:
            print(json.dumps({"backend": args.backend, "ranks": world, "bytes": size,
                              "iters": iters, "us": median.item() / world * 1e6}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
