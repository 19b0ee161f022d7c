"""PyTorch DDP training train_mlp's MLP (32 inputs, ReLU hidden layers, 10 classes; AdamW, the
global batch split over the ranks) over a chosen torch.distributed backend, under torchrun.
Rank 0 prints one JSON line: samples/s over the timed steps (the slowest rank's time) and every
step's loss averaged over the ranks, so that two backends' runs can be compared step by step.

    torchrun --nproc-per-node 4 ddp_mlp.py --backend cohort --hidden 256 --layers 3
    torchrun --nproc-per-node 4 ddp_mlp.py --backend gloo --hidden 2048 --layers 6 --steps 30
    torchrun --nproc-per-node 2 ddp_mlp.py --backend cohort --device cuda

--device cuda trains on GPU LOCAL_RANK (modulo the GPUs visible): the model is made and seeded on
the CPU and then moved, so its start is the same bits as on the CPU; the timing synchronizes the
GPU. The timing and the losses are all-reduced as CPU tensors either way.

--compute-only runs every step under DDP's no_sync(): the same ranks, model, batch and optimizer
with no gradient all-reduce, the step time that no transport can go below (its losses are each
rank's own, not the synchronized model's).
"""

import argparse
import contextlib
import gc
import json
import os
import time

import torch
import torch.distributed as dist
from torch import nn


def build_model(hidden, layers):
    widths = [32] + [hidden] * (layers - 1) + [10]
    modules = []
    for i in range(layers):
        modules.append(nn.Linear(widths[i], widths[i + 1]))
        if i + 1 < layers:
            modules.append(nn.ReLU())
    return nn.Sequential(*modules)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", required=True)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=3)
    parser.add_argument("--global-batch", type=int, default=256)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--compute-only", action="store_true",
                        help="no gradient all-reduce (DDP's no_sync): the compute bound")
    args = parser.parse_args()
    if args.backend == "cohort":
        import cohort  # noqa: F401  (registers the backend)
    torch.set_num_threads(1)  # one core's worth per rank, as cohort's host ranks
    device = torch.device("cpu")
    if args.device == "cuda":
        if not torch.cuda.is_available():
            raise SystemExit("--device cuda: this torch sees no CUDA device")
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0"))
                              % torch.cuda.device_count())
        torch.cuda.set_device(device)
    dist.init_process_group(args.backend)
    rank, ranks = dist.get_rank(), dist.get_world_size()
    if args.global_batch % ranks != 0:
        raise SystemExit("--global-batch must be a multiple of the number of ranks")
    torch.manual_seed(args.seed)
    model = nn.parallel.DistributedDataParallel(
        build_model(args.hidden, args.layers).to(device),
        device_ids=[device] if device.type == "cuda" else None)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.002)
    loss_fn = nn.CrossEntropyLoss()
    local = args.global_batch // ranks
    generator = torch.Generator().manual_seed(args.seed + rank)
    centers = torch.randn(10, 32, generator=torch.Generator().manual_seed(args.seed))
    labels = torch.randint(0, 10, (local,), generator=generator)
    inputs = centers[labels] + 0.5 * torch.randn(local, 32, generator=generator)
    inputs, labels = inputs.to(device), labels.to(device)

    def synchronize():
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    losses = []

    def step():
        optimizer.zero_grad(set_to_none=True)
        with model.no_sync() if args.compute_only else contextlib.nullcontext():
            loss = loss_fn(model(inputs), labels)
            loss.backward()
        optimizer.step()
        losses.append(loss.detach())

    for _ in range(args.warmup):
        step()
    synchronize()
    dist.barrier()
    start = time.perf_counter()
    for _ in range(args.steps):
        step()
    synchronize()
    dist.barrier()
    seconds = torch.tensor([time.perf_counter() - start], dtype=torch.float64)
    dist.all_reduce(seconds, op=dist.ReduceOp.MAX)
    mean_losses = torch.stack(losses).to("cpu", torch.float64)
    dist.all_reduce(mean_losses)
    mean_losses /= ranks
    if rank == 0:
        print(json.dumps({
            "backend": args.backend,
            "compute_only": args.compute_only,
            "device": args.device,
            "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
            "torch_version": torch.__version__,
            "ranks": ranks,
            "parameters": sum(p.numel() for p in model.parameters()),
            "global_batch": args.global_batch,
            "steps": args.steps,
            "samples_per_second": args.steps * args.global_batch / seconds.item(),
            "ms_per_step": 1000.0 * seconds.item() / args.steps,
            "losses": mean_losses.tolist(),
        }), flush=True)
    # Drop every reference to the process group before destroying it, so that it is destroyed
    # here and its threads are joined: a gloo worker thread still alive at interpreter exit
    # releases its last tensors while Python finalizes and aborts the process
    # (ProcessGroupGloo::runLoop, "terminate called without an active exception").
    del step, model, optimizer, seconds, mean_losses, losses
    gc.collect()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
