"""The PyTorch peer of train_mlp: the same MLP (32 inputs, ReLU hidden layers, 10 classes),
AdamW, the same global batch split over the ranks, over Gloo on the CPU, ranks as processes on
this host, wrapped as `--wrap` says: DistributedDataParallel (`ddp`, the peer of plain data
parallel), or FSDP2 with each Linear its own unit (`fsdp2`: `fully_shard` on every Linear, then
on the whole model; the peer of train_mlp --zero 3). Prints one JSON line: samples/s, seconds
per step and each rank's peak resident memory.

    python torch_ddp_mlp.py --ranks 4 --hidden 256 --layers 3 --steps 200
    python torch_ddp_mlp.py --wrap fsdp2 --ranks 4 --hidden 2048 --layers 6 --steps 20
"""

import argparse
import json
import os
import resource
import socket
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn


def build_model(hidden, layers):
    widths = [32] + [hidden] * (layers - 1) + [10]
    modules = []
    for i in range(layers):
        modules.append(nn.Linear(widths[i], widths[i + 1]))
        if i + 1 < layers:
            modules.append(nn.ReLU())
    return nn.Sequential(*modules)


def rank_main(rank, args, port, results):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)  # one core's worth per rank, as cohort's host ranks
    dist.init_process_group("gloo", rank=rank, world_size=args.ranks)
    torch.manual_seed(args.seed)
    if args.wrap == "fsdp2":
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        mesh = init_device_mesh("cpu", (args.ranks,))
        model = build_model(args.hidden, args.layers)
        for module in model:
            if isinstance(module, nn.Linear):
                fully_shard(module, mesh=mesh)  # a unit: gathered before use, resharded after
        fully_shard(model, mesh=mesh)
    else:
        model = nn.parallel.DistributedDataParallel(build_model(args.hidden, args.layers))
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.002)
    loss_fn = nn.CrossEntropyLoss()
    local = args.global_batch // args.ranks
    generator = torch.Generator().manual_seed(args.seed + rank)
    inputs = torch.randn(local, 32, generator=generator)
    labels = torch.randint(0, 10, (local,), generator=generator)

    def step():
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model(inputs), labels)
        loss.backward()
        optimizer.step()

    for _ in range(args.warmup):
        step()
    dist.barrier()
    start = time.perf_counter()
    for _ in range(args.steps):
        step()
    dist.barrier()
    seconds = time.perf_counter() - start
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    gathered = [None] * args.ranks
    dist.all_gather_object(gathered, {"seconds": seconds, "peak_rss_kib": peak_kib})
    if rank == 0:
        # Under FSDP2 each rank holds a shard: the global count is the unsharded shapes' product.
        parameters = sum(p.numel() for p in build_model(args.hidden, args.layers).parameters())
        slowest = max(g["seconds"] for g in gathered)
        results.put({
            "peer": f"pytorch-{args.wrap}-gloo",
            "torch_version": torch.__version__,
            "threads_per_rank": torch.get_num_threads(),
            "blas": "MKL" if torch.backends.mkl.is_available() else "not MKL",
            "ranks": args.ranks,
            "parameters": parameters,
            "global_batch": args.global_batch,
            "steps": args.steps,
            "samples_per_second": args.steps * args.global_batch / slowest,
            "ms_per_step": 1000.0 * slowest / args.steps,
            "peak_rss_kib": [g["peak_rss_kib"] for g in gathered],
        })
    dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wrap", choices=("ddp", "fsdp2"), default="ddp")
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=3)
    parser.add_argument("--global-batch", type=int, default=256)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    if args.ranks < 1 or args.layers < 1 or args.global_batch % args.ranks != 0:
        parser.error("--global-batch must be a multiple of --ranks, and both positive")
    context = mp.get_context("spawn")
    results = context.SimpleQueue()
    mp.spawn(rank_main, args=(args, free_port(), results), nprocs=args.ranks, join=True)
    print(json.dumps(results.get()))


if __name__ == "__main__":
    main()
