"""dist.all_reduce through a torch.distributed backend, timed as cohort's allreduce_bench times
its own: f32 sum in place, each size warmed up, then each iteration timed alone; per rank the
median, then the mean over ranks. Prints one JSON line per size on rank 0.

Each size is warmed up for --warmup iterations and --warmup-seconds, whichever is longer, then
timed over --iters (500, as compare.sh times allreduce_bench), both cut down for a size whose
iterations would take longer than --max-seconds. The time matters on 4 ranks of 2 cores: the
first 0.1-0.3 s after init_process_group, 1 KiB calls took 1.5-2x their later time (114-148 us
falling to 67-87 us over three runs), so 50 warm-up calls (5 ms) measured the processes' start
rather than the call.

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


def agreed_seconds(call, count):
    """Runs `call` `count` times; the slowest rank's seconds per call."""
    start = time.perf_counter()
    for _ in range(count):
        call()
    seconds = torch.tensor([(time.perf_counter() - start) / count])
    dist.all_reduce(seconds, op=dist.ReduceOp.MAX)
    return max(seconds.item(), 1e-9)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", required=True)
    parser.add_argument("--sizes", default="1K:64M", help="LOW:HIGH in bytes, x4 steps")
    parser.add_argument("--iters", type=int, default=500)
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--via", choices=["dist", "backend"], default="dist",
                        help="dist: dist.all_reduce; backend: the group's c10d backend for CPU "
                             "tensors called directly (its allreduce, then wait), to tell "
                             "torch.distributed's Python layer from the backend's own time")
    parser.add_argument("--warmup-seconds", type=float, default=0.5,
                        help="warm up each size for at least this long (at most a third of "
                             "--max-seconds)")
    parser.add_argument("--max-seconds", type=float, default=3.0,
                        help="fewer iterations (and a third of this for warm-up) for a size "
                             "whose iterations would take longer")
    args = parser.parse_args()
    if args.backend == "cohort":
        import cohort  # noqa: F401  (registers the backend)
    torch.set_num_threads(1)
    dist.init_process_group(args.backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    for size in sizes_between(args.sizes):
        data = torch.ones(size // 4, dtype=torch.float32)
        # Every rank runs the same counts: each is agreed on from the slowest rank's time.
        if args.via == "backend":
            backend = dist.group.WORLD._get_backend(torch.device("cpu"))
            call = lambda: backend.allreduce([data]).wait()  # noqa: E731
        else:
            call = lambda: dist.all_reduce(data)  # noqa: E731
        first = agreed_seconds(call, 1)
        warm_seconds = min(args.warmup_seconds, args.max_seconds / 3)
        block = max(1, min(args.warmup, int(args.max_seconds / 3 / first)))
        spent = 0.0
        while True:  # blocks of warm-up until both the count and the time are reached
            per_iter = agreed_seconds(call, block)
            spent += block * per_iter
            if spent >= warm_seconds:
                break
            block = max(1, int((warm_seconds - spent) / per_iter) + 1)
        iters = max(5, min(args.iters, int(args.max_seconds / per_iter)))
        times = []
        for _ in range(iters):
            start = time.perf_counter()
            dist.all_reduce(data)
            times.append(time.perf_counter() - start)
        median = torch.tensor([statistics.median(times)], dtype=torch.float64)
        dist.all_reduce(median)
        if rank == 0:
            print(json.dumps({"backend": args.backend, "via": args.via, "ranks": world,
                              "bytes": size,
                              "iters": iters, "us": median.item() / world * 1e6}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
